"""OnnxExporter: the Dynamo pipeline, then ``torch.onnx.export``, validated in ONNX Runtime.

Stages, each under its banner below (``grep -nE "^def (_patch_|_fix_|_aten_)" exporters/onnx/*.py`` lists every
workaround):

1. Torch patches — ``@register_patch("onnx", ...)`` for torch ops the ONNX exporter cannot translate.
2. ONNX patches — ``@register_patch("onnx", ...)`` on torch.onnx and onnxscript internals (the optimizer's
   rules, output handling).
3. FX fixes — ``@register_fx_program_fix("onnx")`` on the whole program, then ``@register_fx_node_fix("onnx")``
   on each node, for what the ONNX exporter cannot lower.
4. ONNX translations — ``_ONNX_TRANSLATION_TABLE``: aten op → custom onnxscript function ``_aten_*``
   (``exporters/onnx/translations.py``).
5. ONNX IR fixes — ``_IR_FIXES``: ``_fix_ir_*`` functions rewriting the finished model for ONNX Runtime.
6. ORT fusions — with ``OnnxConfig(ort_fusions=True)`` only: ONNX Runtime's fused operators
   (``exporters/onnx/fusions.py``), on the fixed graph, so validation covers them.
7. Quantization — ``OnnxConfig(quantize=QuantizeConfig("int8" | "int4"))``: ONNX Runtime's quantizers on the finished
   model (``exporters/onnx/quantize.py``), validated against the same scales in PyTorch and against float eager.

The onnxscript optimizer runs unless the model class is listed in ``ONNX_DISABLE_OPTIMIZE`` (the
ledger) for the export's mode, or ``OnnxConfig(optimize=False)``.
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from exporters.base import ExportResult, StageClock, config_as_dict, start_export
from exporters.bundle.format import RUNTIMES, ComponentSpec
from exporters.bundle.signature import describe_component, user_input_placeholders
from exporters.dynamo.exporter import (
    DynamoConfig,
    DynamoExporter,
    describe_export,
    second_shape_inputs,
    size_one_inputs,
)
from exporters.fx_rewrites import feed_contiguous, make_reshape_input_contiguous, split_complex_arithmetic
from exporters.masks import broadcast_expansion
from exporters.onnx import folding, rewriter  # noqa: F401  (register the onnxscript optimizer patches)
from exporters.onnx.fusions import fuse_for_onnxruntime
from exporters.onnx.translations import translation_table
from exporters.quantize.record import QuantizedExport
from exporters.quantize.schemes import QuantizeConfig
from exporters.utils import (
    Workaround,
    announce_workaround,
    apply_fx_node_fixes,
    apply_fx_program_fixes,
    installed_patches,
    record_hit,
    register_fx_node_fix,
    register_fx_program_fix,
    register_patch,
    tracking_hits,
)

__all__ = ["OnnxConfig", "OnnxExporter"]

# Models whose serialized proto would pass this size are validated from a file with external data.
_IN_MEMORY_LIMIT = 1 << 30


@dataclass
class OnnxConfig:
    """How to export to ONNX. Tolerances are ONNX Runtime vs eager in fp32: kernels differ (fused
    MatMul/Softmax), so rtol is looser than Dynamo's; atol stays at 1e-4.

    ``ort_fusions`` rewrites the graph into ONNX Runtime's fused operators (RMS norm, skip norm, rotary
    embedding, attention where matched: ``exporters/onnx/fusions.py``); the artifact then runs in ONNX Runtime
    only, which is what validates and loads it.

    ``opset_version`` 20 is torch.onnx's own default in torch 2.13: from opset 20 GELU is one ``Gelu`` node
    instead of an Erf formula of five (BERT 131 → 123 nodes, Whisper 276 → 252), which ONNX Runtime runs
    faster; it is named here, not left to torch, so the manifest records what the graph targets.
    """

    dynamic: bool = False
    dynamic_shapes: Any = None
    static_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # as DynamoConfig's
    optimize: bool = True
    ort_fusions: bool = False
    opset_version: int = 20
    without: frozenset[str] = frozenset()
    atol: float = 1e-4
    rtol: float = 1e-3
    quantize: QuantizeConfig | None = None  # stage 7; None: float

    def __post_init__(self) -> None:
        if self.quantize is not None:
            self.quantize.check("onnx")

    def as_dict(self) -> dict[str, Any]:
        return config_as_dict(self)


class OnnxExporter:
    """``OnnxExporter(OnnxConfig(dynamic=True)).export(model, inputs, validate=True)``."""

    backend = "onnx"

    def __init__(self, config: OnnxConfig | None = None):
        self.config = config or OnnxConfig()

    def export_for_generation(self, model: torch.nn.Module, inputs: Mapping[str, Any], config: Any = None) -> Any:
        """Prefill and decode components with a KV cache, as one bundle (exporters.generation.export)."""
        from exporters.generation.export import export_for_generation

        return export_for_generation(self, model, dict(inputs), config)

    def export(self, model: torch.nn.Module, inputs: Mapping[str, Any], *, validate: bool = False) -> ExportResult:
        run = start_export(model, self.config.without)
        inputs = dict(inputs)
        clock = run.clock
        dynamo = DynamoExporter(DynamoConfig(
            dynamic=self.config.dynamic, dynamic_shapes=self.config.dynamic_shapes,
            static_dims=self.config.static_dims, without=self.config.without))
        with tracking_hits(run.hits), installed_patches("onnx", self.config.without):
            program = dynamo.export_program(model, inputs, clock)
            with clock("fx node fixes"):
                apply_fx_program_fixes(program, "onnx")
                apply_fx_node_fixes(program.graph_module, "onnx")
            with clock("torch.onnx.export"):
                onnx_program = torch.onnx.export(
                    program,
                    args=(),
                    kwargs=inputs,
                    dynamo=True,
                    optimize=self.config.optimize,
                    opset_version=self.config.opset_version,
                    custom_translation_table=translation_table(self.config.without),
                    verbose=False,
                )
        with clock("metadata"):
            metadata = describe_export(self.backend, model, inputs, program, self.config, run)
            component = describe_component(program, inputs, "model.onnx", RUNTIMES["onnx"])
            placeholders = [node.name for node in user_input_placeholders(program)]
        with clock("ir fixes"), tracking_hits(run.hits):
            name_graph(onnx_program.model, component, placeholders)
            apply_ir_fixes(onnx_program.model, self.config.without)
        fuse_for_ort(onnx_program.model, self.config.ort_fusions, clock, metadata.notes)
        artifact, quantization = quantize(onnx_program.model, model, self.config.quantize, clock)
        metadata.workarounds_fired = dict(sorted(run.hits.counts.items()))
        session = functools.cache(lambda: _session(artifact))  # only validation pays for it
        run.finish()
        return ExportResult(
            artifact=artifact,
            metadata=metadata,
            model=model,
            inputs=inputs,
            run_artifact=lambda kw: _run(session(), kw),
            save_artifact=lambda path: save_model(artifact, path),
            component=component,
            program=program,
            atol=self.config.atol,
            rtol=self.config.rtol,
            make_second_inputs=(lambda: second_shape_inputs(program, inputs)) if self.config.dynamic else None,
            quantization=quantization,
            make_smaller_inputs=(lambda: size_one_inputs(program, inputs, self.config.dynamic_shapes))
            if self.config.dynamic else None,
        ).validated_if(validate)


def save_model(model: ir.Model, path: Path) -> Path:
    """Write ``model.onnx``; weights go to ``model.onnx.data`` once the model is large."""
    size = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    external = f"{path.name}.data" if size > _IN_MEMORY_LIMIT // 8 else None
    ir.save(model, str(path), external_data=external)
    return path


def _session(model: ir.Model) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    proto = ir.serde.serialize_model(model)
    if proto.ByteSize() < _IN_MEMORY_LIMIT:
        return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    directory = Path(tempfile.mkdtemp(prefix="exportbot-onnx-"))
    path = save_model(model, directory / "model.onnx")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run(session: Any, inputs: Mapping[str, Any]) -> list[np.ndarray]:
    names = {i.name for i in session.get_inputs()}
    feed = {k: v.detach().cpu().numpy() for k, v in inputs.items() if k in names and isinstance(v, torch.Tensor)}
    return [torch.from_numpy(np.asarray(out)) for out in session.run(None, feed)]


# ── Readable names and honest shapes ──
# The graph's inputs and outputs take the bundle's leaf names (``input_ids``, ``logits``,
# ``past_key_values.layers.0.keys``) and the shapes the torch.export program proves: an integer where the
# program is static, the role name (``batch``, ``sequence``, ``height``, ``width``) where it is symbolic, one
# name per symbol (exporters.bundle.signature names them). torch.onnx's own shapes are not trusted: exporting an
# ExportedProgram it declares a ViT's channel dim symbolic and reuses one symbol for height and width.
def name_graph(model: ir.Model, component: ComponentSpec, placeholders: list[str]) -> None:
    """Rename and reshape the graph's inputs and outputs after ``component``; drop from ``component.inputs``
    the leaves the graph does not take (torch.onnx leaves out inputs the graph never reads). An output leaf
    named like an input leaf (a model returning its ``attention_mask``) is named ``<name>_output``, in the
    graph and in ``component.outputs``: a graph cannot hold two values of one name."""
    graph = model.graph
    by_placeholder = dict(zip(placeholders, component.inputs))
    taken = []
    symbol_names: dict[str, set[str]] = {}
    for value in graph.inputs:
        spec = by_placeholder.get(value.name)
        if spec is None:
            raise ValueError(f"ONNX graph input {value.name!r} is none of the program's inputs {placeholders}")
        for old, new in zip(value.shape or (), spec.shape):
            if isinstance(old, ir.SymbolicDim) and old.value and isinstance(new, str):
                symbol_names.setdefault(old.value, set()).add(new)
        value.name = spec.name
        value.shape = _shape(spec.shape)
        taken.append(spec)
    component.inputs = taken
    _rename_inner_dims(graph, {old: names.pop() for old, names in symbol_names.items() if len(names) == 1})
    if len(graph.outputs) != len(component.outputs):
        raise ValueError(f"the ONNX graph has {len(graph.outputs)} outputs, the program {len(component.outputs)}")
    input_names = {spec.name for spec in taken}
    for index, (value, spec) in enumerate(zip(list(graph.outputs), component.outputs)):
        if value.is_graph_input() or value.name in {v.name for v in graph.outputs[:index]}:
            value = _identity_of(graph, value)  # an output that is an input (or another output) gets its own value
            graph.outputs[index] = value
        if spec.name in input_names:  # an input the model returns (Qwen2Audio's attention_mask): ONNX names a value once
            spec.name = f"{spec.name}_output"
        value.name = spec.name
        value.shape = _shape(spec.shape)


def _rename_inner_dims(graph: ir.Graph, names: Mapping[str, str]) -> None:
    """Give the graph's inner values the input dims' names (``s2`` → ``batch``, ``s15 + 1`` → ``past + 1``).

    Why: onnxscript's fusion rules bind a dim by name across a pattern's values, graph inputs and outputs and
    inner values alike. Its SDPA rule binds the batch from a decode's query (inner: torch's ``s2``) and from
    ``present_key_0`` (an output: ``batch``) and fails the match on two names of one batch: a Llama without
    grouped-query heads got no fused decode attention. A torch symbol that two input dims name differently
    (torch.onnx's own shapes, above) keeps its name.
    """
    if not names:
        return
    word = re.compile(r"\b(" + "|".join(re.escape(old) for old in sorted(names, key=len, reverse=True)) + r")\b")
    for node in graph:
        for value in node.outputs:
            if value.shape is None or value.is_graph_output():
                continue
            value.shape = ir.Shape([ir.SymbolicDim(word.sub(lambda m: names[m.group(1)], dim.value))
                                    if isinstance(dim, ir.SymbolicDim) and dim.value else dim for dim in value.shape])


def _shape(dims: list[int | str]) -> ir.Shape:
    return ir.Shape([dim if isinstance(dim, int) else ir.SymbolicDim(dim) for dim in dims])


def _identity_of(graph: ir.Graph, value: ir.Value) -> ir.Value:
    node = ir.node("Identity", inputs=[value])
    node.outputs[0].type = value.type
    graph.append(node)
    return node.outputs[0]


# ── Stage 1: Torch patches ──
# `@register_patch("onnx", "torch.<op>")` factories for torch ops the ONNX exporter cannot translate as they are,
# or translates into a graph that runs slower than the op needs.
@register_patch(
    "onnx",
    "torch.nn.functional.scaled_dot_product_attention",
    upstream="https://github.com/microsoft/onnxscript/pull/2654",
    dependency="onnxscript",
)
def _patch_sdpa_boolean_mask(original: Callable) -> Callable:
    """Hand SDPA an additive mask instead of a boolean one, and zero the rows that attend to no key.

    Eager SDPA returns zeros for a query row whose mask blocks every key (aten's safe softmax; padded
    positions of a left-padded batch have such rows). torchlib lowers a boolean mask to ``Where(mask, 0,
    lowest)``, ``Softmax``, then an ``IsNaN`` + ``Where`` guard meant to produce those zeros
    (microsoft/onnxscript#2479); since the mask fills with the dtype's lowest value instead of -inf
    (microsoft/onnxscript#2654) such a row no longer goes NaN, the guard never fires, and ONNX Runtime returns
    the mean of the values there (0.7 off eager on a 6×8 example). Here the mask goes in additive and the
    row is zeroed on the output by a (batch, 1, query, 1) flag computed from the mask alone, once for all the
    layers that share the mask: eager's numerics, and two fewer passes over
    every layer's (batch, heads, query, key) weights (transformers hands SDPA a boolean mask whenever it
    traces, ViT and unpadded BERT too).
    """

    # transformers hands every layer the same mask tensor (an encoder-decoder alternates two: self and cross
    # attention): the additive mask and the row flag are built once per mask and dtype and reused, so a layer
    # adds one ``mul`` to the traced graph, not seven nodes (each node is paid again by run_decompositions,
    # translation and the optimizer: 17 % of a dynamic BERT export). Found by identity; holding the masks
    # keeps their ids from being reused, and a new trace brings new mask objects.
    built: list[tuple[torch.Tensor, torch.dtype, torch.device, torch.Tensor, torch.Tensor]] = []

    def additive_and_attended(mask: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for seen, dtype, device, additive, attended in built:
            if seen is mask and dtype == query.dtype and device == query.device:
                return additive, attended
        # From 0-d tensors only: a zeros tensor of the mask's shape becomes one (batch, 1, query, key)
        # initializer in a static graph.
        kept = torch.zeros((), dtype=query.dtype, device=query.device)
        lowest = torch.full((), torch.finfo(query.dtype).min, dtype=query.dtype, device=query.device)
        additive, attended = torch.where(mask, kept, lowest), mask.any(dim=-1, keepdim=True).to(query.dtype)
        built.append((mask, query.dtype, query.device, additive, attended))
        return additive, attended

    def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
             *args: Any, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
            return original(query, key, value, attn_mask, *args, **kwargs)
        additive, attended = additive_and_attended(attn_mask, query)
        return original(query, key, value, additive, *args, **kwargs) * attended

    return sdpa


@register_patch(
    "onnx", "transformers.masking_utils._vmap_expansion_sdpa",
    upstream="https://github.com/pytorch/pytorch/issues/140849", dependency="torch",
)  # fmt: skip
def _patch_vmap_mask_expansion_for_onnx(original: Callable) -> Callable:
    """Build vmap-style attention masks by broadcasting: torch.onnx's decompositions cannot re-trace vmap.

    A mask with an ``or_mask_function``/``and_mask_function`` (Gemma 3's bidirectional image blocks) makes
    ``sdpa_mask`` use ``torch.vmap``; the exported graph keeps ``_vmap_increment_nesting``/``_add_batch_dim`` and
    torch.onnx's ``run_decompositions`` fails on ``aten.new_ones`` of the batched tensor (``Either your tensor may
    have escaped from inside a function being vmapped``). ``exporters.masks.broadcast_expansion`` gives the same
    mask from the index-based mask function.
    """
    return broadcast_expansion


# ── Stage 2: ONNX patches ──
# Patches of torch.onnx and onnxscript internals, active only inside the export call.
@register_patch(
    "onnx", "onnxscript.rewriter._matcher.SimplePatternMatcher._match_constant", dependency="onnxscript",
    counts_itself=True,
)  # fmt: skip
def _patch_exact_zero_in_no_op_rules(original: Callable) -> Callable:
    """Match a rewrite pattern's constant ``0`` only against an exact zero.

    The optimizer's no-op rules (``x + 0``, ``x - 0`` → ``Identity``, onnxscript/rewriter/rules/common/_no_op.py)
    compare with ``math.isclose(value, 0, abs_tol=1e-8)``, the default ``abs_tol`` of a pattern ``Constant``
    (onnxscript/rewriter/_pattern_ir.py:616), so they also delete ``x + 1e-8``: Helium's and Moshi's RMSNorm
    ``rsqrt(variance + 1e-8)`` lost its epsilon and became ``Reciprocal(Sqrt(variance))``, infinite for an
    all-zero row (a ``padding_idx`` embedding, which stays zero in training too), and the NaN reached every
    later position of a left-padded row. A zero pattern constant gets ``abs_tol`` 0 here; other constants
    (``x * 1``, ``x / 1``) keep their tolerance, which an epsilon cannot meet. No upstream issue found; draft
    with reproducer: docs/upstream-drafts/_patch_exact_zero_in_no_op_rules.md.
    """
    from onnxscript.rewriter._pattern_ir import Constant

    def match_constant(self: Any, pattern_constant: Any, value: Any) -> bool:
        if pattern_constant._value == 0 and pattern_constant._abs_tol:
            exact = Constant(0, pattern_constant._rel_tol, 0.0)
            matched = original(self, exact, value)
            if not matched and original(self, pattern_constant, value):
                record_hit("_patch_exact_zero_in_no_op_rules")  # a near-zero constant it would have deleted
            return matched
        return original(self, pattern_constant, value)

    return match_constant


@register_patch(
    "onnx", "torch.onnx._internal.exporter._core._handle_output_node", dependency="torch", counts_itself=True,
)  # fmt: skip
def _patch_constant_outputs_skipped(original: Callable) -> Callable:
    """Leave a program's constant outputs (Python ints, floats, bools) out of the ONNX graph, as torch.onnx
    already does for ``None``.

    MaskFormerSwinModel returns ``hidden_states_spatial_dimensions``, a tuple of (height, width) ints, so the
    program's output node returns ``(layer_norm_12, view_63, 16, 16, 8, 8, ...)``; torch.onnx's output
    handler reads ``.name`` of every entry but ``None`` and fails with ``'int' object has no attribute
    'name'``, although its graph-signature step skips these very outputs (``ConstantArgument``). A constant
    is no graph value: the bundle's manifest records it (``constants``, docs/export-format.md) and
    ``exporters.load`` puts it back. No upstream issue found; draft with reproducer:
    docs/upstream-drafts/_patch_constant_outputs_skipped.md.
    """

    def handle_output_node(node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        outputs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
        values = tuple(out for out in outputs if out is None or isinstance(out, torch.fx.Node))
        if len(values) == len(outputs):
            return original(node, *args, **kwargs)
        record_hit("_patch_constant_outputs_skipped")
        return original(_OutputNode(node.name, (values,)), *args, **kwargs)

    return handle_output_node


@dataclass(frozen=True)
class _OutputNode:
    """What torch.onnx's output handler reads of an FX output node: its name and its returned values."""

    name: str
    args: tuple[Any, ...]


@register_patch(
    "onnx", "onnx_ir.passes.common.output_fix._alias_direct_outputs", dependency="onnxscript", optional=True,
    counts_itself=True,
)  # fmt: skip
def _patch_returned_input_keeps_its_name(original: Callable) -> Callable:
    """Keep the name of a graph input that the model also returns; the added Identity's output takes another.

    ONNX forbids a graph input as a graph output, so onnx_ir's ``OutputFixPass`` (run by the onnxscript
    optimizer) puts an ``Identity`` between them, gives the Identity's output the input's name and renames
    the *input* to ``<name>_orig`` (onnx_ir/passes/common/output_fix.py): the model's interface changes, and
    the bundle's inputs no longer match the graph's. Qwen2AudioModel returns its ``attention_mask`` unchanged
    (``Qwen2AudioCausalLMOutputWithPast.attention_mask``) and failed with ``ONNX graph input
    'attention_mask_orig' is none of the program's inputs``. Here the input gets its name back and the
    output is named ``<name>_output`` (``name_graph`` then names every output). The fix belongs in onnx-ir,
    which is not pinned here: ``dependency`` names onnxscript, whose optimizer runs the pass and whose
    releases move the onnx-ir requirement (so an audit sees it). Optional: onnx-ir before 0.1.13 has no pass.
    No upstream issue found; draft with reproducer: docs/upstream-drafts/_patch_returned_input_keeps_its_name.md.
    """

    def alias_direct_outputs(graph_like: ir.Graph | ir.Function) -> bool:
        graphs = (graph_like, *graph_like.subgraphs())
        names = {id(value): value.name for graph in graphs for value in graph.inputs}
        modified = original(graph_like)
        for graph in graphs:
            for value in graph.inputs:
                name = names[id(value)]
                if value.name == name:
                    continue
                for output in graph.outputs:
                    if output.name == name:
                        output.name = f"{name}_output"
                value.name = name
                record_hit("_patch_returned_input_keeps_its_name")
        return modified

    return alias_direct_outputs


# ── Stage 3: FX node fixes ──
@register_fx_node_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/141107", dependency="torch")
def _fix_reshape_of_strided(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Make the input of ``reshape`` contiguous when it is a permuted (non-contiguous) tensor.

    torch.onnx decomposes with ``backed_size_oblivious=True``, under which ``reshape`` of a permuted tensor
    (T5's ``attn_output.reshape(*input_shape, -1)`` after SDPA) is lowered to ``view`` and fails with
    ``Cannot view a tensor with shape ... and strides ...``. A ``contiguous`` first is what eager does anyway.
    """
    return make_reshape_input_contiguous(graph_module, node)


@register_fx_node_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/194381", dependency="torch")
def _fix_rsub_scalar(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Rewrite ``aten.rsub.Scalar(x, c)`` as ``aten.sub.Tensor(scalar_tensor(c), x)``.

    torch.onnx decomposes ``rsub`` to ``sub.Tensor(c, x)`` with a Python scalar where the schema wants a Tensor;
    for an integer ``x`` (XLNet's ``1.0 - attention_mask``) its type-promotion pass then fails with ``aten::sub()
    Expected a value of type 'Tensor' for argument 'self'``. A rank-0 tensor of the result dtype is exact.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.rsub.Scalar:
        return False
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return False
    source, other = node.args[0], node.args[1]
    alpha = node.args[2] if len(node.args) > 2 else node.kwargs.get("alpha", 1)
    graph = graph_module.graph
    with graph.inserting_before(node):
        scalar = graph.call_function(
            torch.ops.aten.scalar_tensor.default, (other,), {"dtype": value.dtype, "device": value.device}
        )
        difference = graph.call_function(torch.ops.aten.sub.Tensor, (scalar, source), {"alpha": alpha})
    scalar.meta["val"] = value.new_zeros(())
    difference.meta.update(node.meta)
    node.replace_all_uses_with(difference)
    graph.erase_node(node)
    return True


_TRANSPOSING = (torch.ops.aten.transpose.int, torch.ops.aten.permute.default)


@register_fx_node_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/141107", dependency="torch")
def _fix_view_of_transposed(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Insert ``contiguous`` between a ``transpose``/``permute`` and the ``view`` that reads it.

    The exported graph drops ``attn_output.transpose(1, 2).contiguous()``'s ``contiguous`` when the fused SDPA
    kernel's output strides make the transpose contiguous already; torch.onnx decomposes SDPA to the math path,
    whose output is laid out differently, and the ``view`` (Afmoe's ``output.view(*input_shape, -1)``) then fails
    with ``Cannot view a tensor with shape ... and strides ...``. ``contiguous`` changes no values.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.view.default:
        return False
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.target not in _TRANSPOSING:
        return False
    if not isinstance(source.meta.get("val"), torch.Tensor):
        return False
    feed_contiguous(graph_module, node, source)
    return True


@register_fx_program_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/126972", dependency="torch")
def _fix_complex_rotary_for_onnx(program: Any) -> bool:
    """Compute complex-valued rotary embeddings (``view_as_complex``, ``polar``) on pairs of reals.

    torch.onnx has no translation for most ops on complex values: Llama 4's and DeepSeek-V2's
    ``freqs_cis[:, :, None, :]`` fails with ``No ONNX function found for aten.unsqueeze ... complex-valued
    input`` (pytorch/pytorch#126972). The product is a rotation of (x0, x1) pairs; run once on the whole
    program before the node fixes, ``exporters.fx_rewrites.split_complex_arithmetic`` writes it with real ops.
    """
    return split_complex_arithmetic(program.graph_module, program) > 0


# ── Stage 4: ONNX translations ──
# aten op → onnxscript function, for ops whose default lowering is missing or wrong: `_ONNX_TRANSLATION_TABLE`
# and every `_aten_*` translation live in exporters/onnx/translations.py; stage 4 hands `translation_table`
# to torch.onnx.export (above).


# ── Stage 5: ONNX IR fixes ──
# `_fix_ir_*(graph) -> bool` rewrites of the finished model for ONNX Runtime bugs; True = it changed something.
# Registered with `_register_ir_fix(upstream=..., dependency=...)`, applied to the main graph and every function.
_IR_FIXES: list[Callable[[ir.Graph | ir.Function], bool]] = []


def _register_ir_fix(*, upstream: str | None = None, dependency: str | None = None) -> Callable:
    def decorate(fix: Callable) -> Callable:
        announce_workaround(Workaround(fix.__name__, "ir_fix", "onnx", fix, (), upstream, dependency))
        _IR_FIXES.append(fix)
        return fix

    return decorate


def apply_ir_fixes(model: ir.Model, without: frozenset[str]) -> None:
    graphs = [model.graph, *model.functions.values()]
    for fix in _IR_FIXES:
        if fix.__name__ in without:
            continue
        if any([fix(graph) for graph in graphs]):
            record_hit(fix.__name__)


# ── Stage 6: ORT fusions ──
# ``OnnxConfig(ort_fusions=True)``: onnxscript's rewrites into ONNX Runtime's fused operators, on the fixed graph and
# before quantization, so that validation covers what ships.
def fuse_for_ort(model: ir.Model, enabled: bool, clock: StageClock, notes: list[str]) -> None:
    """Rewrite ``model`` in place into ONNX Runtime's fused operators when ``enabled``; the note says what fused."""
    if not enabled:
        return
    with clock("ort fusions"):
        fused = fuse_for_onnxruntime(model)
    notes.append(f"ONNX Runtime fusions: {fused or 'none matched'}")


# ── Stage 7: Quantization ──
# ``OnnxConfig(quantize=QuantizeConfig(scheme))``: ONNX Runtime's dynamic int8 or MatMulNBits int4 quantizer runs on
# the finished model; the weights it quantized, dequantized from its output, make the PyTorch fidelity reference
# (exporters/onnx/quantize.py), and the float model stays the quality reference.
def quantize(model: ir.Model, float_model: torch.nn.Module, config: QuantizeConfig | None,
             clock: StageClock) -> tuple[ir.Model, QuantizedExport | None]:
    """The model to ship: ``model`` quantized with ``config``'s scheme, or ``model`` itself (float)."""
    if config is None:
        return model, None
    from exporters.onnx.quantize import quantize_onnx

    with clock("quantization"):
        return quantize_onnx(model, float_model, config)
