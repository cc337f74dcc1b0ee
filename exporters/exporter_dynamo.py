"""DynamoExporter: a transformers model through ``torch.export`` in five stages.

Every other exporter runs this pipeline first, inside its own patches (see ``exporters.utils`` for the
nesting order). The stages, in order, each under its banner below:

1. Forward-signature patch — a flat ``forward`` signature of the given input names.
2. Model patches — ``register_patch("dynamo", ...)`` workarounds.
3. Pytree registration — ``Cache`` and ``ModelOutput`` subclasses become pytree nodes.
4. Dynamic shapes — ``Dim.AUTO`` everywhere when ``dynamic=True``, unless overridden.
5. State cleanup — tensor attributes that forward set during tracing are put back.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import Dim, ExportedProgram

from exporters import pt2_loading  # noqa: F401  (registers the pt2-load patches validation's load installs)
from exporters.base import (
    ExportMetadata,
    ExportResult,
    ExportRun,
    StageClock,
    config_as_dict,
    package_versions,
    start_export,
)
from exporters.bundle import RUNTIMES, TracedInt
from exporters.signature import describe_component, output_structure
from exporters.tiny import resized_mask
from exporters.utils import installed_patches, tracking_hits
from exporters.validation import named_tensors

__all__ = ["DynamoConfig", "DynamoExporter", "register_walked_type", "second_shape_inputs"]


@dataclass
class DynamoConfig:
    """How to run ``torch.export``.

    ``without`` names workarounds to leave out (a necessity probe); every other one stays installed.
    Tolerances: Dynamo keeps fp32 graphs, so 1e-4 / 1e-4 is tight and still above float noise.
    """

    dynamic: bool = False
    dynamic_shapes: Any = None
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
        """Prefill and decode components with a KV cache, as one bundle (exporters.generation_export)."""
        from exporters.generation_export import export_for_generation

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
        with clock("second-shape inputs"):
            second_inputs = second_shape_inputs(program, inputs) if self.config.dynamic else None
        run.finish()
        return ExportResult(
            artifact=program,
            metadata=metadata,
            model=model,
            inputs=inputs,
            run_artifact=lambda kw: [t for _, t in named_tensors(program.module()(**kw))],
            save_artifact=lambda out: _save_program(program, out / "model.pt2"),
            component=component,
            program=program,
            atol=self.config.atol,
            rtol=self.config.rtol,
            second_inputs=second_inputs,
        ).validated_if(validate)

    def export_program(self, model: torch.nn.Module, inputs: dict[str, Any], clock: StageClock) -> ExportedProgram:
        """Stages 1-5 around one ``torch.export.export`` call (also used by the ONNX and ExecuTorch exporters)."""
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
            return torch.export.export(
                model, args=(), kwargs=inputs, dynamic_shapes=dynamic_shapes, strict=self.config.strict
            )


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
# ``installed_patches("dynamo", without)`` from exporters.utils; the patches themselves are registered
# with ``@register_patch("dynamo", ...)`` in exporters/patches_dynamo.py.


# ── Stage 3: Pytree registration ──
# torch.export flattens inputs and outputs with torch's pytree. transformers registers ModelOutput
# subclasses itself, but not Cache subclasses: without this stage a model returning a DynamicCache fails
# with "Found <class 'DynamicCache'> in output, which is not a known type".
# Which attributes of a class are children, learnt from the first instance that holds tensors in them and
# kept per class: flattening must depend on the structure, not on the values, because ExecuTorch's emitter
# flattens a copy of the output whose tensor leaves were replaced by ints.
_CHILD_ATTRIBUTES: dict[type, set[str]] = {}


def _flatten_to_context(obj: Any) -> tuple[list[Any], list[tuple[str, Any]]]:
    """Split an object's attributes into tensor-holding children and a constant context.

    Children are attributes holding tensors (directly, or inside lists/tuples/dicts/objects, which pytree
    recurses into once registered), or attributes that held tensors in an earlier instance of the class;
    everything else goes into the context, a traced scalar as the value it had at the sample shape.

    Why concrete: a context is a constant of the program's output spec. A SymInt there (a sliding-window
    cache layer's ``cumulative_length`` under dynamic shapes) belongs to the tracing ShapeEnv, means nothing
    when the program runs, cannot be saved, and breaks every ``copy.deepcopy`` of the module call graph that
    ``run_decompositions`` makes (torch.onnx and ExecuTorch: ``Cannot access data pointer of Tensor``).
    """
    known = _CHILD_ATTRIBUTES.setdefault(type(obj), set())
    children: list[Any] = []
    context: list[tuple[str, Any]] = []
    for name, value in vars(obj).items():
        if name in known or _holds_tensors(value):
            known.add(name)
            children.append(value)
            context.append((name, _CHILD))
        else:
            context.append((name, _concrete(value)))
    return children, context


def _concrete(value: Any) -> Any:
    """A traced SymInt/SymFloat/SymBool as its sample-shape value (its hint), a SymInt as a ``TracedInt``
    that also keeps the expression it was traced as (the loader recomputes it at the caller's sizes);
    anything else unchanged."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = value.node.hint
        if hint is None:
            return value
        if isinstance(value, torch.SymInt):
            return TracedInt(int(hint), str(value.node.expr))
        return type(hint)(hint)
    return value


def _unflatten_from_context(cls: type, children: list[Any], context: list[tuple[str, Any]]) -> Any:
    instance = cls.__new__(cls)
    remaining = iter(children)
    for name, value in context:
        instance.__dict__[name] = next(remaining) if value is _CHILD else value
    return instance


class _ChildMarker:
    """Marks a child's place in a context; one instance, kept by copy and pickle (``run_decompositions``
    deep-copies output specs, and an identity check against a copy would silently drop children)."""

    def __repr__(self) -> str:
        return "<child>"

    def __reduce__(self) -> str:
        return "_CHILD"


_CHILD = _ChildMarker()


def _holds_tensors(value: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return any(_holds_tensors(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensors(v, depth + 1) for v in value.values())
    if hasattr(value, "__dict__") and not isinstance(value, (type, torch.nn.Module)):
        return any(_holds_tensors(v, depth + 1) for v in vars(value).values())
    return False


def register_walked_type(cls: type) -> None:
    if cls in pytree.SUPPORTED_NODES:
        return

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        children, context = _flatten_to_context(obj)
        names = [name for name, value in context if value is _CHILD]
        return [(pytree.GetAttrKey(n), c) for n, c in zip(names, children)], context

    pytree.register_pytree_node(
        cls,
        _flatten_to_context,
        lambda children, context: _unflatten_from_context(cls, list(children), context),
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=flatten_with_keys,
        to_dumpable_context=_dumpable_context,
        from_dumpable_context=_loaded_context,
    )


def _dumpable_context(context: list[tuple[str, Any]]) -> str:
    """JSON for a saved program: JSON constants, dtypes, devices, and lists/tuples/dicts of them.

    Dicts are stored as key/value pairs so that non-string keys (EncoderDecoderCache.is_updated maps layer
    indices to flags) come back with their type.
    """

    def encode(value: Any) -> Any:
        if value is _CHILD:
            return {"child": True}
        if isinstance(value, TracedInt):
            return {"traced": [int(value), value.expr]}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            return {type(value).__name__: [encode(v) for v in value]}
        if isinstance(value, dict):
            return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
        raise TypeError(f"cannot save a {type(value).__name__} constant in a pytree context")

    return json.dumps([[name, encode(value)] for name, value in context])


def _loaded_context(dumped: str) -> list[tuple[str, Any]]:
    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        (kind, content), = value.items()
        if kind == "child":
            return _CHILD
        if kind == "traced":
            return TracedInt(*content)
        if kind == "dtype":
            return getattr(torch, content)
        if kind == "device":
            return torch.device(content)
        if kind == "dict":
            return {decode(k): decode(v) for k, v in content}
        return (tuple if kind == "tuple" else list)(decode(v) for v in content)

    return [(name, decode(value)) for name, value in json.loads(dumped)]


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def register_pytree_types(model: torch.nn.Module) -> None:
    """Register every loaded Cache subclass and its layer types (idempotent, process-wide)."""
    from transformers import cache_utils

    # Explicit branch: a cache's layers live in a list of layer objects (attention layers derive from
    # CacheLayerMixin, linear-attention layers from LinearAttentionCacheLayerMixin); register every
    # concrete subclass of those mixins too, so the walk reaches their tensors.
    bases = [cache_utils.Cache] + [
        cls for name, cls in inspect.getmembers(cache_utils, inspect.isclass) if name.endswith("LayerMixin")
    ]
    for base in bases:
        for cls in [base, *_subclasses(base)]:
            if not inspect.isabstract(cls):
                register_walked_type(cls)
    # Model-specific caches that are not Cache subclasses (transformers 5.0's Lfm2HybridConvCache) live in the
    # module of the submodule that makes them, which for a composite model is not the top-level one.
    for module in {inspect.getmodule(type(sub)) for sub in model.modules()}:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and cls.__name__.endswith("Cache"):
                register_walked_type(cls)


# ── Stage 4: Dynamic shapes ──
# ``dynamic=True`` lets torch.export decide every dimension (Dim.AUTO): dims the model really fixes are
# specialised, the rest stay symbolic. ``DynamoConfig.dynamic_shapes`` overrides the whole spec.
def dynamic_shapes_for(inputs: Mapping[str, Any], config: DynamoConfig) -> Any:
    if config.dynamic_shapes is not None:
        return config.dynamic_shapes
    if not config.dynamic:
        return None
    return {name: _auto_spec(value) for name, value in inputs.items()}


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

    Each free symbol, in turn, takes the nearest size within its range (1..8, 16 or 32 up, else down) that
    passes the program's own guards; dims that are expressions of symbols (``2*s0``) follow. torch.export
    records the divisibility it relied on as guards (a Swin backbone's ``width % 4 == 0`` and more), and
    inputs violating them would compare the artifact outside the shapes it was exported for; a symbol no
    other size satisfies stays put. Values keep the originals' character: padded attention masks stay padded
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
    guards = getattr(program.module(), "_guards_fn", None)
    moved = dict(hints)
    for symbol, hint in hints.items():
        bounds = program.range_constraints.get(symbol)
        lower = int(bounds.lower) if bounds is not None and isinstance(bounds.lower, sympy.Integer) else 2
        upper = int(bounds.upper) if bounds is not None and isinstance(bounds.upper, sympy.Integer) else None
        steps = (*range(1, 9), 16, 32)
        candidates = [hint + d for d in steps if upper is None or hint + d <= upper]
        candidates += [hint - d for d in steps if hint - d >= max(lower, 2)]
        for size in candidates:
            trial = _moved_inputs(inputs, sizes, moved | {symbol: size})
            if guards is None or _passes(guards, trial):
                moved[symbol] = size
                break
    return _moved_inputs(inputs, sizes, moved)


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
    """Whether ``candidate`` passes the program's input guards (the check its ``module()`` runs first)."""
    try:
        guards(*pytree.tree_leaves(list(candidate.values())))
    except AssertionError:
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
