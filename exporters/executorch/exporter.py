"""ExecutorchExporter: the Dynamo pipeline, then ExecuTorch lowering to a ``.pte``, run in ``executorch.runtime``.

``ExecutorchExporter(ExecutorchConfig(backend="xnnpack", dynamic=True)).export(model, inputs, validate=True)``
traces with ``DynamoExporter.export_program``, lowers with ``to_edge_transform_and_lower`` (the backend's
partitioner) and ``to_executorch``, and validates the serialized program in the ExecuTorch runtime against
eager. Stages, each under its banner below:

1. Backend preparation — ``@register_backend(name)`` on ``prepare_for_<name>(model, inputs)``: device, dtype
   and partitioners of one ExecuTorch backend (``_BACKEND_PREPARE``).
2. Torch patches — ``@register_patch("executorch", ...)`` for every backend and
   ``@register_patch("executorch.<backend>", ...)`` for one backend (``.dynamic`` suffixed: dynamic exports only).
3. ExecuTorch patches — the same registry, for ExecuTorch internals that crash on (or specialise) valid graphs.
4. FX program fixes — ``@register_fx_program_fix("executorch")``, run once after ``torch.export``.
5. FX node fixes — ``@register_fx_node_fix("executorch")``, run on every node after the program fixes.

Dynamic dims are always bounded: ExecuTorch plans memory for the upper bound of every symbolic dim, and a
program traced with unbounded dims runs only at its example shape (stack.md, E2). ``dynamic=True`` makes the
batch dim of every tensor input and the sequence dim of token inputs dynamic with
``Dim.AUTO(min=1, max=max_batch / max_sequence)``; ``dynamic_shapes`` replaces that spec, and is rejected after
tracing if a dim it leaves dynamic has no upper bound.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram

from exporters.base import ExportResult, config_as_dict, start_export
from exporters.bundle.format import RUNTIMES
from exporters.bundle.signature import describe_component
from exporters.dynamo.exporter import (
    DynamoConfig,
    DynamoExporter,
    describe_export,
    dynamic_dim_ranges,
    second_shape_inputs,
    size_one_inputs,
    without_static_dims,
)
from exporters.executorch import (  # noqa: F401  (register lowering speed, layout and output patches, op, Core ATen and symbolic-op fixes)
    core_aten,
    layout,
    lowering,
    ops,
    symbolic,
    xnnpack,
)
from exporters.executorch.program import PteRunner, backend_config, owning_its_dicts, save_pte
from exporters.executorch.symbolic import require_dims_kept
from exporters.fx_rewrites import (
    fourier_transform_as_matmuls,
    make_reshape_input_contiguous,
    make_view_of_permutation_contiguous,
    reduce_max_dim_as_pooling,
    spell_out_tanh_gelu,
    split_complex_arithmetic,
)
from exporters.masks import broadcast_expansion
from exporters.utils import (
    apply_fx_node_fixes,
    apply_fx_program_fixes,
    installed_patches,
    record_hit,
    register_fx_node_fix,
    register_fx_program_fix,
    register_patch,
    tracking_hits,
)

__all__ = [
    "BackendUnavailableError",
    "ExecutorchConfig",
    "ExecutorchExporter",
    "UnboundedDimError",
    "bounded_dynamic_shapes",
    "register_backend",
]

# Default bounds of ``dynamic=True``. ExecuTorch sizes its memory arena for these maxima, so they are kept
# small enough for a phone and large enough for a real request; torch.export may narrow them further (a
# position-embedding table of 64 rows caps the sequence at 64), and the program's own bounds are recorded.
DEFAULT_MAX_BATCH = 8
DEFAULT_MAX_SEQUENCE = 128

# Inputs whose dim 1 is a token sequence. Every other non-batch dim (image height and width, audio samples,
# feature frames) stays at its example size: vision and audio stems rarely accept other sizes as traced.
_SEQUENCE_INPUTS = frozenset({
    "input_ids", "attention_mask", "token_type_ids", "position_ids", "bbox",
    "decoder_input_ids", "decoder_attention_mask",
})


class BackendUnavailableError(ValueError):
    """The requested ExecuTorch backend cannot run on this machine (no GPU, package missing)."""


class UnboundedDimError(ValueError):
    """A dynamic dim has no upper bound, so the lowered program would run only at the example shape."""


@dataclass
class ExecutorchConfig:
    """How to lower to ExecuTorch.

    Tolerances are runtime vs eager in fp32: XNNPACK's GEMM and softmax kernels accumulate in another order
    than ATen's, so rtol is as loose as ONNX Runtime's (1e-3) while atol stays at 1e-4.
    """

    backend: str = "xnnpack"
    dynamic: bool = False
    dynamic_shapes: Any = None
    static_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # as DynamoConfig's
    max_batch: int = DEFAULT_MAX_BATCH
    max_sequence: int = DEFAULT_MAX_SEQUENCE
    without: frozenset[str] = frozenset()
    atol: float = 1e-4
    rtol: float = 1e-3

    def __post_init__(self) -> None:
        if self.backend not in _BACKEND_PREPARE:
            raise ValueError(
                f"unknown ExecuTorch backend {self.backend!r}; choose from {', '.join(sorted(_BACKEND_PREPARE))}"
            )
        if self.max_batch < 1 or self.max_sequence < 2:
            raise ValueError(f"max_batch must be >= 1 and max_sequence >= 2, got {self.max_batch}, {self.max_sequence}")

    def as_dict(self) -> dict[str, Any]:
        return config_as_dict(self)


class ExecutorchExporter:
    """``ExecutorchExporter(ExecutorchConfig(backend="xnnpack")).export(model, inputs, validate=True)``."""

    backend = "executorch"

    def __init__(self, config: ExecutorchConfig | None = None):
        self.config = config or ExecutorchConfig()
        # ExecuTorch's lowering stack takes ~3-4 s to import. The exporter module imports it lazily so that
        # listing workarounds stays cheap; an exporter that will lower pays it here, not inside export(),
        # so an export call's time is the export's own (as with transformers.exporters, which imports it
        # with its module).
        import executorch.exir  # noqa: F401

    def export_for_generation(self, model: torch.nn.Module, inputs: Mapping[str, Any], config: Any = None) -> Any:
        """Prefill and decode components with a KV cache, as one bundle (exporters.generation.export)."""
        from exporters.generation.export import export_for_generation

        return export_for_generation(self, model, dict(inputs), config)

    def export(self, model: torch.nn.Module, inputs: Mapping[str, Any], *, validate: bool = False) -> ExportResult:
        config = self.config
        prepare = _BACKEND_PREPARE[config.backend]
        started = time.perf_counter()
        # Backend first: a missing device must fail before anything touches the model (not even eval()).
        model, inputs, partitioners = prepare(model, dict(inputs))
        run = start_export(model, config.without)
        run.started = started
        clock = run.clock
        run.stage_seconds["backend preparation"] = round(time.perf_counter() - started, 4)
        dynamic_shapes = self._dynamic_shapes(inputs)
        dynamo = DynamoExporter(DynamoConfig(dynamic_shapes=dynamic_shapes, without=config.without))
        from executorch.exir import to_edge_transform_and_lower

        with (
            tracking_hits(run.hits),
            installed_executorch_patches(config.backend, config.without, dynamic=dynamic_shapes is not None),
        ):
            program = dynamo.export_program(model, inputs, clock)
            require_bounded_dims(program)
            with clock("fx fixes"):
                apply_program_fixes(program)
                apply_node_fixes(program, config.backend)
            exported_dims = dynamic_dim_ranges(program)
            with clock("to_edge_transform_and_lower"):
                edge = to_edge_transform_and_lower(owning_its_dicts(program), partitioner=partitioners)
            require_dims_kept(exported_dims, dynamic_dim_ranges(edge.exported_program()))
            with clock("to_executorch"):
                lowered = edge.to_executorch(backend_config(edge.exported_program()))
        with clock("metadata"):
            metadata = describe_export(self.backend, model, inputs, program, config, run)
            component = describe_component(program, inputs, "model.pte", RUNTIMES["executorch"])
        metadata.dynamic = bool(metadata.dynamic_dims)
        if metadata.dynamic_dims:
            metadata.notes.append(
                "dynamic dims are bounded (dynamic_dims max): the runtime rejects larger inputs and plans memory "
                "for the maxima"
            )
        run.finish()
        return ExportResult(
            artifact=lowered,
            metadata=metadata,
            model=model,
            inputs=inputs,
            run_artifact=PteRunner(lowered.buffer),
            save_artifact=lambda path: save_pte(lowered.buffer, path),
            component=component,
            program=program,
            atol=config.atol,
            rtol=config.rtol,
            make_second_inputs=lambda: second_shape_inputs(program, inputs),
            make_smaller_inputs=lambda: size_one_inputs(program, inputs, dynamic_shapes),
        ).validated_if(validate)

    def _dynamic_shapes(self, inputs: Mapping[str, Any]) -> Any:
        """The user's spec, else the bounded default when ``dynamic``, else None (static)."""
        if self.config.dynamic_shapes is not None:
            return self.config.dynamic_shapes
        if not self.config.dynamic:
            return None
        spec = bounded_dynamic_shapes(inputs, self.config.max_batch, self.config.max_sequence)
        return without_static_dims(spec, inputs, self.config.static_dims)


def bounded_dynamic_shapes(inputs: Mapping[str, Any], max_batch: int, max_sequence: int) -> dict[str, Any]:
    """Batch (dim 0) of every tensor input and sequence (dim 1) of token inputs, each ``Dim.AUTO`` with bounds.

    ``Dim.AUTO`` rather than named ``Dim``s: torch.export then specialises a dim the model fixes and narrows a
    bound the model imposes (position tables) instead of failing the export, and it relates the batch dims of
    all inputs by itself. Non-tensor inputs (caches) stay static.
    """
    spec: dict[str, Any] = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            spec[name] = None
            continue
        dims = {0: Dim.AUTO(min=1, max=max_batch)}
        if name in _SEQUENCE_INPUTS and value.dim() > 1:
            dims[1] = Dim.AUTO(min=1, max=max_sequence)
        spec[name] = dims
    return spec


def require_bounded_dims(program: ExportedProgram) -> None:
    """Refuse a program with an unbounded symbolic input dim before spending a lowering on it (E2)."""
    unbounded = [
        f"{name} dim {index}"
        for name, dims in dynamic_dim_ranges(program).items()
        for index, bounds in dims.items()
        if bounds["max"] is None
    ]
    if unbounded:
        raise UnboundedDimError(
            f"ExecuTorch needs an upper bound on every dynamic dim; none on {', '.join(unbounded)} "
            "(give Dim(..., max=N) or Dim.AUTO(max=N) in dynamic_shapes)"
        )


# ── Stage 1: Backend preparation ──
# ``prepare_for_<name>(model, inputs) -> (model, inputs, partitioners)`` puts model and inputs on the backend's
# device and dtype and picks its partitioners. A backend is added by decorating one with
# ``@register_backend("<name>")``; ``ExecutorchConfig(backend=...)`` accepts every registered name. A backend
# that cannot run here raises ``BackendUnavailableError`` as its first statement, before any work.
Prepare = Callable[[torch.nn.Module, dict[str, Any]], tuple[torch.nn.Module, dict[str, Any], list[Any]]]
_BACKEND_PREPARE: dict[str, Prepare] = {}


def register_backend(name: str) -> Callable[[Prepare], Prepare]:
    """Make ``ExecutorchConfig(backend=name)`` use the decorated ``prepare_for_<name>``."""

    def decorate(prepare: Prepare) -> Prepare:
        _BACKEND_PREPARE[name] = prepare
        return prepare

    return decorate


def _moved_inputs(inputs: dict[str, Any], device: str, dtype: torch.dtype) -> dict[str, Any]:
    """Tensors (also inside caches) to ``device``; floating ones to ``dtype``, integer ones keep theirs."""

    def move(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device=device, dtype=dtype if tensor.is_floating_point() else tensor.dtype)

    return {name: pytree.tree_map_only(torch.Tensor, move, value) for name, value in inputs.items()}


@register_backend("xnnpack")
def prepare_for_xnnpack(
    model: torch.nn.Module, inputs: dict[str, Any]
) -> tuple[torch.nn.Module, dict[str, Any], list[Any]]:
    """CPU in fp32: XNNPACK's partitioner and the edge passes expect a CPU graph, and fp32 is its exact path."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    model = model.to(device="cpu", dtype=torch.float32)
    return model, _moved_inputs(inputs, "cpu", torch.float32), [XnnpackPartitioner()]


@register_backend("cuda")
def prepare_for_cuda(
    model: torch.nn.Module, inputs: dict[str, Any]
) -> tuple[torch.nn.Module, dict[str, Any], list[Any]]:
    """GPU in bf16: the ExecuTorch CUDA backend compiles with AOTInductor, which needs a visible GPU and bf16."""
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "ExecuTorch backend 'cuda' needs a CUDA GPU, and torch.cuda.is_available() is False on this machine"
        )
    try:
        from executorch.backends.cuda.cuda_backend import CudaBackend
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    except ImportError as error:
        raise BackendUnavailableError(f"ExecuTorch backend 'cuda' cannot be imported: {error}") from error
    partitioner = CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])
    model = model.to(device="cuda", dtype=torch.bfloat16)
    return model, _moved_inputs(inputs, "cuda", torch.bfloat16), [partitioner]


# ── Stage 2: Torch patches ──
# Nesting, outermost first: ``executorch`` (every backend), then ``executorch.dynamic`` and
# ``executorch.<backend>``, then ``executorch.<backend>.dynamic`` (the ``.dynamic`` levels only for exports with
# dynamic shapes: a workaround that matters only for symbolic dims costs a static export nothing), then
# ``dynamo`` (installed by ``DynamoExporter.export_program`` inside). When two levels patch one target, the inner one receives the outer replacement as its
# ``original``. Patches stay installed through lowering, because ``to_edge_transform_and_lower`` re-traces the
# program (``run_decompositions``).
@contextlib.contextmanager
def installed_executorch_patches(backend: str, without: frozenset[str], *, dynamic: bool) -> Iterator[list[str]]:
    with (
        installed_patches("executorch", without) as common,
        (installed_patches("executorch.dynamic", without) if dynamic else contextlib.nullcontext([])) as common_dynamic,
        installed_patches(f"executorch.{backend}", without) as own,
        (
            installed_patches(f"executorch.{backend}.dynamic", without) if dynamic else contextlib.nullcontext([])
        ) as dynamic_only,
    ):
        yield [*common, *common_dynamic, *own, *dynamic_only]


# ── Stage 3: ExecuTorch patches ──
# ``@register_patch("executorch", "executorch.exir....")`` factories for ExecuTorch internals that crash on
# valid (dynamic-shape) graphs, ``@register_patch("executorch.<backend>", ...)`` for one backend's internals;
# installed by stage 2's ``installed_executorch_patches``.
@register_patch(
    "executorch.xnnpack.dynamic",
    "executorch.backends.xnnpack.partition.config.generic_node_configs.UnsqueezeCopyConfig.check_constraints",
    "executorch.backends.xnnpack.partition.config.gemm_configs.ConvolutionConfig.check_constraints",
    dependency="executorch",
)
def _patch_xnnpack_reshape_one_dynamic_dim(original: Callable) -> Callable:
    """Keep nodes that XNNPACK lowers through a static reshape out of the delegate when they have more than
    one dynamic dim: ``unsqueeze_copy``, and 1-d convolutions (run as 2-d between an unsqueeze and a squeeze).

    XNNPACK's static reshape allows one dynamic dim, and its visitor raises ``XNNPACK reshape only supports 1
    dynamic dimension`` in preprocessing; the partitioner configs (``UnsqueezeCopyConfig``, added by
    pytorch/executorch#19261, and ``ConvolutionConfig``) do not check it, so any (batch, sequence)-dynamic
    graph with such a node (Cohere, GPT-J rotary embeddings; ConvBERT's separable conv) fails to lower.
    Rejected here, the node runs as a portable kernel. Not reported upstream yet: the ready-to-file issue, with
    its reproducer, is docs/upstream-drafts/_patch_xnnpack_reshape_one_dynamic_dim.md.

    Delegation cost: each rejected node leaves the XNNPACK delegate (and splits it), so this is scoped to
    dynamic exports (``executorch.xnnpack.dynamic``) and rejects only nodes with two or more symbolic dims;
    static exports delegate exactly as without it.
    """
    from torch.fx.experimental.symbolic_shapes import free_symbols

    def check_constraints(self: Any, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        if not original(self, node, ep):
            return False
        shape = getattr(node.meta.get("val"), "shape", ())
        reshaped = "convolution" not in str(node.target) or len(shape) == 3  # a 2-d conv needs no reshape
        return not reshaped or sum(1 for dim in shape if free_symbols(dim)) <= 1

    return check_constraints


@register_patch(
    "executorch", "transformers.integrations.moe.ExpertsInterface.get_interface",
    upstream="https://github.com/pytorch/executorch/issues/11320", dependency="executorch",
    optional=True,  # transformers 5.0.0 has no ExpertsInterface (measured: every ExecuTorch export failed there)
)  # fmt: skip
def _patch_moe_experts_batched_mm(original: Callable) -> Callable:
    """Run transformers' mixture-of-experts layers with the ``batched_mm`` experts instead of ``grouped_mm``.

    The ``grouped_mm`` experts sort tokens by expert and call the ``transformers::grouped_mm_fallback`` custom op
    between ``histc`` offsets: the custom op has no ExecuTorch kernel, ``aten::sort.values`` is not in the
    runtime's portable kernels (``Missing operator: aten::sort.values``) and ``empty_like`` of the sorted rows
    decomposes to ``aten.empty_permuted``, which is not Core ATen. ``batched_mm`` gathers each token's expert
    weights and multiplies in one ``bmm``: the same values, from ops every ExecuTorch backend runs. The model's
    own setting is left alone; only the lookup answers differently while the export runs. The upstream link is
    ExecuTorch's portable Core-ATen coverage tracker (pytorch/executorch#11320), where ``sort`` is missing.
    """

    def get_interface(self: Any, experts_implementation: str, default: Callable) -> Callable:
        return original(self, "batched_mm" if experts_implementation == "grouped_mm" else experts_implementation, default)

    return get_interface


@register_patch(
    "executorch", "executorch.exir.verification.verifier._check_tensor_args_matching_op_allowed_dtype",
    dependency="executorch", counts_itself=True,
)  # fmt: skip
def _patch_edge_dtype_check_specialising_list_returns(original: Callable) -> Callable:
    """Stop the edge verifier's dtype check from guarding on a symbolic dim of an op that returns ``Tensor[]``.

    ``EdgeOpArgValidator.call_function`` reads an op's outputs from ``node.meta["val"]`` as one entry per
    schema return, but an op with a single ``Tensor[]`` return (``split_with_sizes_copy``, ``unbind_copy``)
    stores the list itself there: the validator then takes the list's first tensor for the list and calls
    ``len()`` on it, which turns that tensor's symbolic dim 0 into a Python int. The guard specialises the
    symbol to the sample's size in the program's shape env, so ``to_edge`` (whose ``ExportedProgram``
    constructor runs the verifier) returns, and leaves behind in the traced program, a graph that is static
    where torch.export made it dynamic. Validation then fails at the second shape (``input 'input_ids' dim 1
    is 6; the export is static there: 8``). Dense models split along a static batch dim, so the guard is
    harmless there. Mixture-of-experts ``batched_mm`` experts split ``[tokens * top_k, 2 * intermediate]``
    rows (``gate_up.chunk(2, dim=-1)``), whose dim 0 is the flattened, dynamic token count (Mixtral,
    Qwen2-MoE prefill). While the check runs, each such node's list is wrapped as its one return, so the
    validator sees a list, checks its dtype, and guards nothing; the meta is restored after. Static exports need
    it too: a split by data-dependent sizes (JetMoE's mixture of attention heads, ``inputs.split(expert_size)``)
    gives the first piece an unbacked dim 0, and there the guard fails (``Could not extract specialized integer
    from data-dependent expression u224``). Hits count the wrapped lists whose first tensor has a symbolic size,
    the ones the check would have guarded on (the check runs on every program). Not reported upstream yet: the ready-to-file issue, with its
    reproducer, is docs/upstream-drafts/_patch_edge_dtype_check_specialising_list_returns.md.
    """

    def check(graph_module: torch.fx.GraphModule) -> None:
        wrapped = [node for node in graph_module.graph.nodes if _single_list_return(node)]
        for node in wrapped:
            if node.meta["val"] and any(isinstance(size, torch.SymInt) for size in node.meta["val"][0].shape):
                record_hit("_patch_edge_dtype_check_specialising_list_returns")
            node.meta["val"] = (node.meta["val"],)
        try:
            return original(graph_module)
        finally:
            for node in wrapped:
                node.meta["val"] = node.meta["val"][0]

    return check


def _single_list_return(node: torch.fx.Node) -> bool:
    """An op node whose schema has one ``Tensor[]`` return and whose meta value is that list."""
    returns = getattr(getattr(node.target, "_schema", None), "returns", None)
    return (
        node.op == "call_function"
        and isinstance(node.meta.get("val"), list)
        and returns is not None
        and len(returns) == 1
        and returns[0].type == torch.ListType.ofTensors()
    )


@register_patch(
    "executorch", "transformers.masking_utils._vmap_expansion_sdpa",
    upstream="https://github.com/pytorch/pytorch/issues/140849", dependency="torch",
)  # fmt: skip
def _patch_vmap_mask_expansion_for_executorch(original: Callable) -> Callable:
    """Build vmap-style attention masks by broadcasting: ExecuTorch's decompositions cannot re-trace vmap.

    A mask with an ``or_mask_function``/``and_mask_function`` (streaming speech encoders' chunk masks, Gemma 3's
    image blocks) makes ``sdpa_mask`` use ``torch.vmap``; the exported graph keeps its batching calls and
    ``to_edge_transform_and_lower`` fails with ``Either your tensor may have escaped from inside a function being
    vmapped``. ``exporters.masks.broadcast_expansion`` gives the same mask from the index-based mask function.
    """
    return broadcast_expansion


# ── Stage 4: FX program fixes ──
# ``@register_fx_program_fix("executorch")`` on ``fix(exported_program) -> bool | None``, for repairs that need
# the whole program (range constraints, graph signature, state dict).
def apply_program_fixes(program: ExportedProgram) -> None:
    apply_fx_program_fixes(program, "executorch")


@register_fx_program_fix(
    "executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch"
)
def _fix_fft_not_core_aten(program: ExportedProgram) -> bool:
    """Compute ``torch.fft.fft``/``fftn`` over static dims as real DFT matmuls: ``_fft_c2c`` is not Core ATen.

    FNet mixes tokens with ``torch.fft.fftn(hidden_states, dim=(1, 2)).real`` (modeling_fnet.py); ExecuTorch's
    edge verifier rejects the decomposed ``Operator torch._ops.aten._fft_c2c.default is not in Core ATen opset``
    (pytorch/executorch#1362 for the r2c variant), and no ExecuTorch kernel takes complex values
    (pytorch/executorch#11404). ``exporters.fx_rewrites.fourier_transform_as_matmuls`` leaves a complex pair that
    ``_fix_complex_rotary_for_executorch``, registered after this fix, carries on as reals.
    """
    graph_module = program.graph_module
    rewritten = sum(fourier_transform_as_matmuls(graph_module, node) for node in list(graph_module.graph.nodes))
    if rewritten:
        graph_module.recompile()
    return rewritten > 0


@register_fx_program_fix(
    "executorch", upstream="https://github.com/pytorch/executorch/issues/11404", dependency="executorch"
)
def _fix_complex_rotary_for_executorch(program: ExportedProgram) -> bool:
    """Compute complex-valued rotary embeddings (``view_as_complex``, ``polar``) on pairs of reals.

    ExecuTorch's kernels and delegates have no complex dtype (pytorch/executorch#11404, portable complex
    support), so Llama 4's and DeepSeek-V2's ``view_as_complex(q) * polar(1, angle)`` cannot run. The product
    is a rotation of (x0, x1) pairs; ``exporters.fx_rewrites.split_complex_arithmetic`` writes it with real ops,
    and so it does for the complex pairs ``_fix_fft_not_core_aten`` leaves (FNet's ``.real`` of an FFT).
    """
    return split_complex_arithmetic(program.graph_module, program) > 0


# ── Stage 5: FX node fixes ──
# ``@register_fx_node_fix("executorch")`` on ``fix(graph_module, node) -> bool`` for single nodes that the
# lowering (its decompositions, the edge verifier, a partitioner) cannot take as traced (those for operators
# outside the Core ATen opset are in ``exporters.executorch.core_aten``, for operators without a portable
# kernel in ``exporters.executorch.ops``);
# ``@register_fx_node_fix("executorch.<backend>")`` for fixes that only one backend needs.
def apply_node_fixes(program: ExportedProgram, backend: str) -> int:
    common = apply_fx_node_fixes(program.graph_module, "executorch")
    return common + apply_fx_node_fixes(program.graph_module, f"executorch.{backend}")


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/141107", dependency="torch")
def _fix_strided_reshape_input(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Make the input of ``reshape`` contiguous when it is strided (non-contiguous) at trace time.

    The lowering decomposes SDPA again, into a kernel whose output has another memory layout than the traced
    one; a reshape after it then yields a strided view, and the ``view`` traced after that (GPT-2's
    ``Conv1D``: ``x.view(-1, x.size(-1))``) fails with ``Cannot view a tensor with shape ... and strides``.
    ``contiguous`` first pins the layout, which is what eager's reshape of a strided tensor does anyway. That
    changes the layout downstream: Afmoe reshapes SDPA's strided output to its own shape, transposes it back
    and ``view``s it (modeling_afmoe.py:382), valid only in the traced layout, so a view of a transpose or
    permute gets its own ``contiguous`` too (``make_view_of_permutation_contiguous``).
    """
    return make_reshape_input_contiguous(graph_module, node) or make_view_of_permutation_contiguous(graph_module, node)


@register_fx_node_fix(
    "executorch.xnnpack", upstream="https://github.com/pytorch/executorch/pull/22851", dependency="executorch"
)
def _fix_tanh_gelu_for_xnnpack(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Spell out ``gelu(approximate="tanh")`` before XNNPACK partitions the graph.

    XNNPACK serialises GELU without its ``approximate`` argument and runs exact GELU, ~5e-4 away from the tanh
    form per activation: Gemma's ``gelu_pytorch_tanh`` MLPs then miss eager by up to 4e-4. The formula runs on
    XNNPACK's exact mul/add/tanh.
    """
    return spell_out_tanh_gelu(graph_module, node)


@register_fx_node_fix("executorch.xnnpack", dependency="executorch")
def _fix_max_dim_for_xnnpack(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Give XNNPACK every 4-D ``max.dim`` as the keepdim=True reduction over dim 2 or 3 that it serialises.

    XNNPACK's partitioner claims ``max.dim`` on any 4-D float input whose users take only the values
    (``MaxDimConfig`` checks rank, dtype and users, not ``keepdim`` or ``dim``), but its serializer writes only
    a max pooling over dim 2 or 3 with the dim kept, so lowering fails in preprocess with ``amax.default only
    supports keep_dim == True`` (or ``only supports dim == 2 or dim == 3``): Hiera's query pooling,
    ``view(b, stride, -1, c).max(dim=1).values``. ``exporters.fx_rewrites.reduce_max_dim_as_pooling`` writes
    the same reduction as transpose / ``max.dim(·, 2 or 3, keepdim=True)`` / transpose / squeeze. Delegation:
    the values-only ``max.dim`` that failed is now delegated (as before, but lowerable) with the transposes and
    squeeze; one whose indices are used stays on the portable kernels as before. Not reported upstream yet:
    the ready-to-file issue is docs/upstream-drafts/_fix_max_dim_for_xnnpack.md.
    """
    return reduce_max_dim_as_pooling(graph_module, node)
