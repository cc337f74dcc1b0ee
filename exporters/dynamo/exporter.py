"""DynamoExporter: a transformers model through ``torch.export`` in six stages.

Every other exporter runs this pipeline first, inside its own patches (see ``exporters.utils`` for the
nesting order). The stages, in order, each under its banner below:

1. Forward-signature patch — a flat ``forward`` signature of the given input names.
2. Model patches — ``register_patch("dynamo", ...)`` workarounds.
3. Pytree registration — ``Cache`` and ``ModelOutput`` subclasses become pytree nodes.
4. Dynamic shapes — ``Dim.AUTO`` everywhere when ``dynamic=True``, unless overridden.
5. State cleanup — tensor attributes that forward set during tracing are put back.
6. Program fixes — ``register_fx_program_fix("dynamo", ...)`` workarounds on the program every backend gets.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import Dim, ExportedProgram

from exporters.base import (
    ExportMetadata,
    ExportResult,
    ExportRun,
    StageClock,
    config_as_dict,
    package_versions,
    start_export,
)
from exporters.bundle import pt2_loading  # noqa: F401  (register validation's patches)
from exporters.bundle.format import RUNTIMES
from exporters.bundle.signature import describe_component, dim_role, output_structure
from exporters.cache_pytree import register_pytree_types, register_walked_type
from exporters.dynamo import patches  # noqa: F401  (register stage 2's patches)
from exporters.dynamo.patches import SECOND_SHAPE
from exporters.padding import resized_mask
from exporters.utils import apply_fx_program_fixes, installed_patches, tracking_hits
from exporters.validation import named_tensors

__all__ = ["DynamoConfig", "DynamoExporter", "register_walked_type", "second_shape_inputs", "size_one_inputs",
           "without_static_dims"]


@dataclass
class DynamoConfig:
    """How to run ``torch.export``.

    ``without`` names workarounds to leave out (a necessity probe); every other one stays installed.
    Tolerances: Dynamo keeps fp32 graphs, so 1e-4 / 1e-4 is tight and still above float noise.
    """

    dynamic: bool = False
    dynamic_shapes: Any = None
    static_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    strict: bool = False
    without: frozenset[str] = frozenset()
    atol: float = 1e-4
    rtol: float = 1e-4

    def as_dict(self) -> dict[str, Any]:
        return config_as_dict(self)


class DynamoExporter:
    """``DynamoExporter(DynamoConfig(dynamic=True)).export(model, inputs, validate=True)``."""

    backend = "dynamo"

    def __init__(self, config: DynamoConfig | None = None):
        self.config = config or DynamoConfig()

    def export_for_generation(self, model: torch.nn.Module, inputs: Mapping[str, Any], config: Any = None) -> Any:
        """Prefill and decode components with a KV cache, as one bundle (exporters.generation.export)."""
        from exporters.generation.export import export_for_generation

        return export_for_generation(self, model, dict(inputs), config)

    def export(self, model: torch.nn.Module, inputs: Mapping[str, Any], *, validate: bool = False) -> ExportResult:
        run = start_export(model, self.config.without)
        inputs = dict(inputs)
        clock = run.clock
        with tracking_hits(run.hits):
            program = self.export_program(model, inputs, clock)
        with clock("metadata"):
            metadata = describe_export(self.backend, model, inputs, program, self.config, run)
            component = describe_component(program, inputs, "model.pt2", RUNTIMES["dynamo"])
        run.finish()
        return ExportResult(
            artifact=program,
            metadata=metadata,
            model=model,
            inputs=inputs,
            run_artifact=lambda kw: [t for _, t in named_tensors(program.module()(**kw))],
            save_artifact=lambda path: _save_program(program, path),
            component=component,
            program=program,
            atol=self.config.atol,
            rtol=self.config.rtol,
            make_second_inputs=(lambda: second_shape_inputs(program, inputs)) if self.config.dynamic else None,
            make_smaller_inputs=(lambda: size_one_inputs(program, inputs, self.config.dynamic_shapes))
            if self.config.dynamic else None,
        ).validated_if(validate)

    def export_program(self, model: torch.nn.Module, inputs: dict[str, Any], clock: StageClock) -> ExportedProgram:
        """Stages 1-6 around one ``torch.export.export`` call (also used by the ONNX and ExecuTorch exporters)."""
        with clock("pytree registration"):
            register_pytree_types(model)
        dynamic_shapes = dynamic_shapes_for(inputs, self.config)
        with (
            clock("torch.export"),
            torch.no_grad(),
            flat_forward_signature(model, list(inputs)),
            installed_patches("dynamo", self.config.without),
            cleaned_model_state(model),
        ):
            program = torch.export.export(
                model, args=(), kwargs=inputs, dynamic_shapes=dynamic_shapes, strict=self.config.strict
            )
        with clock("program fixes"):
            apply_program_fixes(program)
        return program


def _save_program(program: ExportedProgram, path: Path) -> Path:
    torch.export.save(program, str(path))
    return path


def describe_export(
    backend: str,
    model: torch.nn.Module,
    inputs: Mapping[str, Any],
    program: ExportedProgram,
    config: Any,
    run: ExportRun,
) -> ExportMetadata:
    """Metadata for one export; output names come from the program's output structure."""
    with torch.no_grad():
        output_names = [name for name, _ in named_tensors(output_structure(program))]
    return ExportMetadata(
        backend=backend,
        model_class=type(model).__name__,
        input_names=list(inputs),
        input_shapes={k: list(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)},
        output_names=output_names,
        dynamic=bool(getattr(config, "dynamic", False)),
        dynamic_dims=dynamic_dim_ranges(program),
        versions=package_versions(backend),
        config=config.as_dict(),
        workarounds_fired=dict(sorted(run.hits.counts.items())),
        workarounds_disabled=sorted(getattr(config, "without", ())),
        stage_seconds=run.stage_seconds,
    )


# ── Stage 1: Forward-signature patch ──
# torch.export maps kwargs to the parameters of ``model.forward``. transformers' forwards end in
# ``**kwargs``; a dynamic_shapes dict keyed by input name then no longer lines up with the signature.
# A flat signature made of exactly the given input names fixes that. Internal, not an extension point.
@contextlib.contextmanager
def flat_forward_signature(model: torch.nn.Module, names: list[str]) -> Iterator[None]:
    original = model.forward
    had_instance_forward = "forward" in vars(model)

    def forward(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(zip(names, args))
        return original(**kwargs)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names]
    )
    model.forward = forward
    try:
        yield
    finally:
        if had_instance_forward:
            model.forward = original
        else:
            del model.forward


# ── Stage 2: Model patches ──
# ``installed_patches("dynamo", without)`` from exporters.utils; the patches themselves (on torch.export's
# internals) are registered with ``@register_patch("dynamo", ...)`` in exporters/dynamo/patches.py.


# ── Stage 3: Pytree registration ──
# ``register_pytree_types`` from exporters/cache_pytree.py (the loaders use the same walk): Cache classes and
# their layer classes become pytree nodes; the pytree rules there (``@register_pytree_rule``) are its workarounds.


# ── Stage 4: Dynamic shapes ──
# ``dynamic=True`` lets torch.export decide every dimension (Dim.AUTO): dims the model really fixes are
# specialised, the rest stay symbolic. ``static_dims`` keeps named input axes out of it: an input that stands
# for one value per patch (ViTMAE's masking ``noise``) is tied to the image only through the indices it
# sorts into, which torch.export cannot see, so under Dim.AUTO its axis would be free to move alone.
# ``DynamoConfig.dynamic_shapes`` overrides the whole spec.
def dynamic_shapes_for(inputs: Mapping[str, Any], config: DynamoConfig) -> Any:
    if config.dynamic_shapes is not None:
        return config.dynamic_shapes
    if not config.dynamic:
        return None
    spec = {name: _auto_spec(value) for name, value in inputs.items()}
    return without_static_dims(spec, inputs, config.static_dims)


def without_static_dims(
    spec: dict[str, Any], inputs: Mapping[str, Any], static_dims: Mapping[str, Sequence[int]]
) -> dict[str, Any]:
    """``spec`` with the ``static_dims`` axes of top-level tensor inputs left out, so they stay static. An
    input that is not a tensor input, or an axis it does not have, is an error: the caller meant another."""
    spec = dict(spec)
    for name, axes in static_dims.items():
        value = inputs.get(name)
        if not isinstance(value, torch.Tensor) or any(not 0 <= axis < value.dim() for axis in axes):
            shape = list(value.shape) if isinstance(value, torch.Tensor) else None
            raise ValueError(f"static_dims names {name!r} axes {list(axes)}; the inputs have it as {shape}")
        dims = spec.get(name)
        if isinstance(dims, dict):
            spec[name] = {axis: dim for axis, dim in dims.items() if axis not in axes} or None
    return spec


def _auto_spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return dict.fromkeys(range(value.dim()), Dim.AUTO)
    if type(value) in (list, tuple):
        return type(value)(_auto_spec(v) for v in value)
    if isinstance(value, dict):
        return {k: _auto_spec(v) for k, v in value.items()}
    if type(value) in pytree.SUPPORTED_NODES:
        children, _ = pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
        return [_auto_spec(child) for child in children]
    return None


def _user_input_sizes(program: ExportedProgram) -> dict[str, tuple[Any, ...]]:
    """Placeholder shapes (ints and SymInts) of the top-level tensor inputs, by input name."""
    user_inputs = set(program.graph_signature.user_inputs)
    return {
        node.name: tuple(node.meta["val"].shape)
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name in user_inputs and isinstance(node.meta.get("val"), torch.Tensor)
    }


def dynamic_dim_ranges(program: ExportedProgram) -> dict[str, dict[str, Any]]:
    """``{input: {dim index: {"symbol", "min", "max"}}}`` for every input dim that stayed symbolic."""
    ranges: dict[str, dict[str, Any]] = {}
    for name, sizes in _user_input_sizes(program).items():
        for index, size in enumerate(sizes):
            # A SymInt whose expression has no symbol left was specialised (Dim.AUTO found it static).
            if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
                expr = size.node.expr
                bounds = [program.range_constraints.get(s) for s in expr.free_symbols]
                lower = max((int(b.lower) for b in bounds if b is not None), default=None)
                upper_values = [int(b.upper) for b in bounds if b is not None and isinstance(b.upper, sympy.Integer)]
                ranges.setdefault(name, {})[str(index)] = {
                    "symbol": str(expr),
                    "min": lower,
                    "max": min(upper_values) if upper_values else None,
                }
    return ranges


def second_shape_inputs(program: ExportedProgram, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Inputs of another size along every symbolic dim the program allows to move.

    Each free symbol, in turn, takes the nearest size within its range (1..8, 16 or 32 up, else down, else
    twice its own: an audio length that must stay a whole number of 320-sample hops) that passes the
    program's own guards; dims that are expressions of symbols (``2*s0``) follow. torch.export
    records the divisibility it relied on as guards (a Swin backbone's ``width % 4 == 0`` and more), and
    inputs violating them would compare the artifact outside the shapes it was exported for. A symbol that
    cannot move alone moves with the unmoved symbols of its sample size; one no other size satisfies stays
    put (the sweep record's ``unmoved_dims``). Values keep the originals' character: padded attention masks stay padded
    (same side, same rows), constant tensors stay constant, integer tensors repeat the originals' rows (ids
    stay in range, boxes stay boxes), floats keep mean and spread. Returns None when the program has no
    symbolic dim.
    """
    sizes = _user_input_sizes(program)
    hints: dict[sympy.Symbol, int] = {}
    for name, shape in sizes.items():
        for index, size in enumerate(shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                hints[size.node.expr] = int(inputs[name].shape[index])
    if not hints:
        return None
    guards = _input_guards(program)
    moved = dict(hints)
    for symbol, hint in hints.items():
        if moved[symbol] != hint:
            continue  # moved with another symbol
        bounds = program.range_constraints.get(symbol)
        lower = int(bounds.lower) if bounds is not None and isinstance(bounds.lower, sympy.Integer) else 2
        upper = int(bounds.upper) if bounds is not None and isinstance(bounds.upper, sympy.Integer) else None
        steps = (*range(1, 9), 16, 32)
        candidates = [hint + d for d in steps if upper is None or hint + d <= upper]
        candidates += [hint - d for d in steps if hint - d >= max(lower, 2)]
        candidates += [2 * hint] if upper is None or 2 * hint <= upper else []
        # Alone first; then with every symbol of the same sample size not moved yet: two named dims the model
        # ties (``input_ids`` and ``attention_mask`` lengths, each its own ``Dim``) stay two symbols equal by
        # a guard, and neither can move without the other.
        together = {s for s, h in hints.items() if h == hint and moved[s] == h}
        for group in [{symbol}] + ([together] if together != {symbol} else []):
            size = next((size for size in candidates if guards is None or _passes(
                guards, _moved_inputs(inputs, sizes, moved | dict.fromkeys(group, size)))), None)
            if size is not None:
                moved |= dict.fromkeys(group, size)
                break
    return _moved_inputs(inputs, sizes, moved)


def size_one_inputs(program: ExportedProgram, inputs: Mapping[str, Any],
                    dynamic_shapes: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """``[(label, inputs)]``: for each role of symbolic dim whose range torch.export started at 2 (``batch``,
    ``sequence``), the inputs with every symbol of that role at 1 and the rest at the sample's sizes ("batch 1").

    A range that starts at 2 is torch.export's 0/1 specialisation, not the model's bound; validation runs the
    bundle at these shapes to find out (exporters.minimum_sizes). A range that starts higher (a Swin image's
    4) is the model's and is left alone. Symbols of one role move together: BERT's ``attention_mask_batch`` is
    its own symbol but must equal ``batch``. The program's guards are not consulted: one that refuses 1 (Swin's
    ``... != 1`` over a batch-derived size) is itself the 0/1 specialisation, and the bundle's answer at 1 is
    what the manifest records. A minimum the caller asked for in ``dynamic_shapes`` (``--dynamic-dim
    input_ids:1:2:32``) is theirs, not the tracer's, and is kept.
    """
    sizes = _user_input_sizes(program)
    hints: dict[sympy.Symbol, int] = {}
    roles: dict[str, set[sympy.Symbol]] = {}
    for name, shape in sizes.items():
        for index, size in enumerate(shape):
            if not (isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol)):
                continue
            symbol = size.node.expr
            if symbol in hints:
                continue
            hints[symbol] = int(inputs[name].shape[index])
            bounds = program.range_constraints.get(symbol)
            asked = _requested_minimum(dynamic_shapes, name, index)
            if bounds is not None and bounds.lower == 2 and hints[symbol] > 1 and (asked or 1) < 2:
                roles.setdefault(dim_role(name, index) or f"{name} dim {index}", set()).add(symbol)
    return [(f"{role} 1", _moved_inputs(inputs, sizes, hints | dict.fromkeys(symbols, 1)))
            for role, symbols in roles.items()]


def _requested_minimum(dynamic_shapes: Any, name: str, axis: int) -> int | None:
    """The ``min`` a top-level ``dynamic_shapes`` dict gives input ``name``'s ``axis`` (a ``Dim`` or a
    ``Dim.AUTO``/``Dim.DYNAMIC`` hint with bounds), or None where it gives none."""
    dims = dynamic_shapes.get(name) if isinstance(dynamic_shapes, Mapping) else None
    dim = dims.get(axis) if isinstance(dims, Mapping) else None
    return getattr(dim, "min", None)


def _input_guards(program: ExportedProgram) -> torch.nn.Module | None:
    """The check ``program.module()`` runs on its inputs first (``_guards_fn``), or None where it has none.

    Under the second-shape patch: torch leaves the guards out when a caller's file path names executorch.
    """
    with installed_patches(SECOND_SHAPE):
        return getattr(program.module(), "_guards_fn", None)


def _moved_inputs(
    inputs: Mapping[str, Any], sizes: dict[str, tuple[Any, ...]], moved: Mapping[sympy.Symbol, int]
) -> dict[str, Any]:
    """``inputs`` resampled to the sizes that ``moved`` (symbol → size) gives their symbolic dims."""
    generator = torch.Generator().manual_seed(1234)
    second: dict[str, Any] = dict(inputs)
    for name, shape in sizes.items():
        new_shape = [int(s.node.expr.xreplace(moved)) if isinstance(s, torch.SymInt) else int(s) for s in shape]
        if new_shape != list(inputs[name].shape):
            mask = resized_mask(inputs[name], new_shape) if name.endswith("attention_mask") else None
            second[name] = mask if mask is not None else _resample(inputs[name], new_shape, generator)
    return second


def _passes(guards: torch.nn.Module, candidate: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` passes the program's input guards (the check its ``module()`` runs first).

    A guard can also fail by arithmetic: Gemma 4's vision pooler guards on a size divided by another that is 0
    for some candidates (``ZeroDivisionError`` in ``_guards_fn``), which rejects the candidate all the same.
    """
    try:
        guards(*pytree.tree_leaves(list(candidate.values())))
    except (AssertionError, ArithmeticError):
        return False
    return True


def _resample(original: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    flat = original.flatten()
    if flat.numel() and (flat == flat[0]).all():
        return torch.full(shape, flat[0].item(), dtype=original.dtype)
    if original.dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if not original.is_floating_point():
        # Cycle the original values along each resized dim: every row keeps its own structure (a box's
        # x0 <= x1, y0 <= y1 for LayoutLM's bbox), which independent random draws would break.
        tiled = original
        for dim, size in enumerate(shape):
            if size != tiled.shape[dim]:
                tiled = tiled.index_select(dim, torch.arange(size) % tiled.shape[dim])
        return tiled.clone()
    mean, std = original.float().mean(), original.float().std().clamp_min(1e-3)
    return (torch.randn(shape, generator=generator) * std + mean).to(original.dtype)


# ── Stage 5: State cleanup ──
# Tracing runs forward on fake tensors. Attributes that forward assigns and that did not exist before
# (torch.export only restores attributes it saw before) keep those fake tensors, and the next eager call
# or deepcopy breaks on them. Attributes named in _STATEFUL_CACHE_ATTRS are eager-side caches: they are
# emptied for the trace, so a stale eager value is not baked into the graph, and restored afterwards.
_STATEFUL_CACHE_ATTRS: list[str] = [
    "cached_rotary_positional_embedding",  # Wav2Vec2-BERT, SeamlessM4T rotary caches
    "cached_sequence_length",
]


def _contains_fake(value: Any) -> bool:
    return any(isinstance(leaf, FakeTensor) for leaf in pytree.tree_leaves(value))


@contextlib.contextmanager
def cleaned_model_state(model: torch.nn.Module) -> Iterator[None]:
    before = [(module, dict(vars(module))) for module in model.modules()]
    emptied = [
        (module, attr, getattr(module, attr))
        for module in model.modules()
        for attr in _STATEFUL_CACHE_ATTRS
        if hasattr(module, attr)
    ]
    for module, attr, _ in emptied:
        setattr(module, attr, None)
    try:
        yield
    finally:
        for module, attr, value in emptied:
            setattr(module, attr, value)
        for module, attributes in before:
            for name, value in list(vars(module).items()):
                if _contains_fake(value):
                    if name in attributes:
                        setattr(module, name, attributes[name])
                    else:
                        delattr(module, name)


# ── Stage 6: Program fixes ──
# ``@register_fx_program_fix("dynamo")`` (in ``exporters.dynamo.patches``) on ``fix(exported_program)``: repairs
# of what torch.export traced that every backend needs, run before the backend's own fixes.
def apply_program_fixes(program: ExportedProgram) -> None:
    apply_fx_program_fixes(program, "dynamo")
