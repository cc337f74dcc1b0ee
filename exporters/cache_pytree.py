"""Stage 3 of the dynamo exporter: ``Cache`` classes and their layers as pytree nodes, walked attribute by attribute.

torch.export flattens inputs and outputs with torch's pytree. transformers registers ModelOutput subclasses
itself, but not Cache subclasses: without this stage a model returning a DynamicCache fails with "Found
<class 'DynamicCache'> in output, which is not a known type". Kept out of ``exporter_dynamo`` (which runs it
as its stage 3) because the loaders need it too, without an exporter.

Which attributes of a class are children is learnt from the first instance that holds tensors in them and
kept per class: flattening must depend on the structure, not on the values, because ExecuTorch's emitter
flattens a copy of the output whose tensor leaves were replaced by ints. Everything else is the node's
context, saved with the program as JSON. What particular caches need beyond that are pytree rules, each a
registered workaround (``@register_pytree_rule``) that ``--without`` leaves out.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from exporters.bundle.format import TracedInt
from exporters.utils import Workaround, active_disabled, announce_workaround, record_hit

__all__ = ["ClassConstant", "register_pytree_rule", "register_pytree_types", "register_walked_type"]

_CHILD_ATTRIBUTES: dict[type, set[str]] = {}
# Every class registered by register_walked_type: an attribute holding one of them is structure (see
# _empty_caches_as_subtrees), whatever tensors it holds at the moment.
_WALKED_TYPES: set[type] = set()
# A class only a pytree rule registers → that rule: flattening an instance is when the rule took effect (a hit).
_REGISTERED_BY_RULE: dict[type, str] = {}


# Why the context rules are exportbot's own: the context is what this stage's walk (_flatten_to_context) makes of a
# cache's attributes; torch's pytree saves whatever a registered flatten puts there, and transformers registers
# no cache class, so nothing upstream builds the context these rules correct.
_OWN_CONTEXT = ("it corrects what this stage's own attribute walk (_flatten_to_context) puts into a cache's pytree "
                "context; transformers registers no cache class as a pytree node, so no upstream flatten makes that "
                "context")

# Pytree rules: what particular caches need from the walk, each a registered workaround that
# ``--without NAME`` leaves out (a necessity probe), checked when the export being tracked flattens.
def register_pytree_rule(
    *, upstream: str | None = None, dependency: str | None = None, internal: str | None = None,
) -> Callable[[Callable], Callable]:  # fmt: skip
    """Register ``rule(value) -> result | None`` as a ``pytree_rule`` workaround of the dynamo stage; ``internal``
    says why it fixes this stage's own walk rather than an upstream bug (no upstream issue to follow)."""

    def decorate(rule: Callable) -> Callable:
        announce_workaround(Workaround(rule.__name__, "pytree_rule", "dynamo", rule, (), upstream, dependency,
                                       internal=internal))  # fmt: skip
        return rule

    return decorate


def _apply_rule(rule: Callable, value: Any) -> Any:
    """``rule(value)``, or None when the tracked export leaves the rule out; a non-None result is a hit."""
    if rule.__name__ in active_disabled():
        return None
    result = rule(value)
    if result is not None:
        record_hit(rule.__name__)
    return result


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
    if type(obj) in _REGISTERED_BY_RULE:
        record_hit(_REGISTERED_BY_RULE[type(obj)])
    known = _CHILD_ATTRIBUTES.setdefault(type(obj), set())
    children: list[Any] = []
    context: list[tuple[str, Any]] = []
    for name, value in vars(obj).items():
        child = name in known or _holds_tensors(value) or bool(_apply_rule(_empty_caches_as_subtrees, value))
        if child:
            known.add(name)
            children.append(value)
            context.append((name, _CHILD))
        else:
            context.append((name, _constant(value)))
    return children, context


def _constant(value: Any) -> Any:
    """A context value: traced scalars concrete (nested ones too, by rule), a class by its import path (by rule)."""
    value = _concrete(value)
    if isinstance(value, (list, tuple, dict)):
        nested = _apply_rule(_concrete_nested_scalars, value)
        return value if nested is None else nested
    if isinstance(value, type):
        named = _apply_rule(_class_by_import_path, value)
        return value if named is None else named
    return value


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


@register_pytree_rule(dependency="transformers", internal=_OWN_CONTEXT)
def _concrete_nested_scalars(value: list | tuple | dict) -> list | tuple | dict | None:
    """Concretise traced scalars inside a tensor-free list, tuple or dict of a cache's context too.

    DeepSeek-V4's compressed-attention layers keep ``entry_count: dict[str, int]`` (modeling_deepseek_v4.py:187),
    per-branch counts that are SymInts (``s70//4``) under dynamic shapes. Only a top-level SymInt was made
    concrete, so these stayed in the output spec: ``run_decompositions``' deep copy of the module call graph
    fails with ``Cannot access data pointer of Tensor`` and saving with ``cannot save a SymInt constant``.
    Each becomes a ``TracedInt`` like a top-level one. Returns None when ``value`` holds no traced scalar.
    """

    def walk(item: Any, depth: int = 0) -> Any:
        if depth > 4:
            return item
        if isinstance(item, dict):
            return {k: walk(v, depth + 1) for k, v in item.items()}
        if type(item) in (list, tuple):
            return type(item)(walk(v, depth + 1) for v in item)
        return _concrete(item)

    if not any(isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)) for leaf in _scalars(value)):
        return None
    return walk(value)


def _scalars(value: Any, depth: int = 0) -> Iterator[Any]:
    if depth > 4:
        return
    items = value.values() if isinstance(value, dict) else value if type(value) in (list, tuple) else None
    if items is None:
        yield value
        return
    for item in items:
        yield from _scalars(item, depth + 1)


@dataclass(frozen=True)
class ClassConstant:
    """A class held by a cache's context, saved by its import path (``module`` + ``qualname``)."""

    cls: type

    @property
    def path(self) -> list[str]:
        return [self.cls.__module__, self.cls.__qualname__]

    @staticmethod
    def imported(module: str, qualname: str) -> ClassConstant:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        return ClassConstant(found)


@register_pytree_rule(dependency="transformers", internal=_OWN_CONTEXT)
def _class_by_import_path(value: type) -> ClassConstant | None:
    """Keep a class-valued cache attribute in the context by its import path, so the program can be saved.

    MiniMaxCache (modeling_minimax.py:72) calls ``DynamicCache.__init__()`` without a config and keeps
    ``layer_class_to_replicate = DynamicLayer`` (cache_utils.py:1491), a class; the context encoder had no rule
    for one (``cannot save a ABCMeta constant in a pytree context``). A class importable by module and
    qualified name is saved as that path and imported back; any other (a local class) is left as it was.
    """
    try:
        importable = ClassConstant.imported(value.__module__, value.__qualname__).cls is value
    except (ImportError, AttributeError):
        importable = False
    return ClassConstant(value) if importable else None


@register_pytree_rule(dependency="transformers", internal=_OWN_CONTEXT)
def _empty_caches_as_subtrees(value: Any) -> bool | None:
    """Flatten an attribute holding a cache or cache layer as a child, even while it holds no tensor.

    Asked for the attributes the plain walk would put in the context; True when ``value`` is, or holds in
    lists, tuples or dicts, an instance of a walked type. Musicgen Melody's decoder makes
    ``EncoderDecoderCache(DynamicCache(config), DynamicCache(config))`` (modeling_musicgen_melody.py:482) but has
    no cross-attention, so the cross-attention cache keeps its pre-created layers empty. As a tensor-free
    attribute it became a constant of the output spec, which cannot be saved (``cannot save a DynamicCache
    constant in a pytree context``) and would freeze the empty cache into the program; as a child it is a
    subtree whose empty layers' ``keys = None`` are constant outputs (exporters/bundle/signature.py records those).
    """

    return True if _nested_any(value, lambda item: type(item) in _WALKED_TYPES) else None


def _unflatten_from_context(cls: type, children: list[Any], context: list[tuple[str, Any]]) -> Any:
    instance = cls.__new__(cls)
    remaining = iter(children)
    for name, value in context:
        if value is _CHILD:
            value = next(remaining)
        elif isinstance(value, ClassConstant):
            value = value.cls
        instance.__dict__[name] = value
    return instance


class _ChildMarker:
    """Marks a child's place in a context; one instance, kept by copy and pickle (``run_decompositions``
    deep-copies output specs, and an identity check against a copy would silently drop children)."""

    def __repr__(self) -> str:
        return "<child>"

    def __reduce__(self) -> str:
        return "_CHILD"


_CHILD = _ChildMarker()


def _nested_any(value: Any, found: Any, into_objects: bool = False, depth: int = 0) -> bool:
    """Whether ``found(item)`` holds for ``value`` or an item nested in its lists, tuples and dict values (and,
    with ``into_objects``, plain objects' attributes), at most 4 levels down: cache contexts are shallow, and
    the bound keeps a cyclic attribute graph from recursing forever."""
    if found(value):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    elif into_objects and hasattr(value, "__dict__") and not isinstance(value, (type, torch.nn.Module)):
        items = vars(value).values()
    else:
        return False
    return any(_nested_any(item, found, into_objects, depth + 1) for item in items)


def _holds_tensors(value: Any) -> bool:
    return _nested_any(value, lambda item: isinstance(item, torch.Tensor), into_objects=True)


def register_walked_type(cls: type) -> None:
    if cls in pytree.SUPPORTED_NODES:
        return
    _WALKED_TYPES.add(cls)

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
        if isinstance(value, ClassConstant):
            return {"class": value.path}
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
        if kind == "class":
            return ClassConstant.imported(*content)
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
    if _layer_types_of_cache_maps.__name__ not in active_disabled():
        for cls in _layer_types_of_cache_maps(cache_utils) or ():
            register_walked_type(cls)
            _REGISTERED_BY_RULE[cls] = _layer_types_of_cache_maps.__name__
    # Model-specific caches that are not Cache subclasses (transformers 5.0's Lfm2HybridConvCache) live in the
    # module of the submodule that makes them, which for a composite model is not the top-level one.
    for module in {inspect.getmodule(type(sub)) for sub in model.modules()}:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and cls.__name__.endswith("Cache"):
                register_walked_type(cls)


@register_pytree_rule(
    dependency="transformers",
    internal="it completes this stage's own registration of cache layer classes (register_pytree_types walks the "
    "*LayerMixin subclasses, which misses DummyLayer); transformers registers no cache class as a pytree node, and "
    "exportbot registers them all itself, so there is no upstream registration to fix",
)
def _layer_types_of_cache_maps(cache_utils: Any) -> list[type] | None:
    """Also register the layer classes of cache_utils' layer-type maps that derive from no ``*LayerMixin``.

    ``DummyLayer`` (cache_utils.py:1377), the layer the maps give layers without attention (``"dummy"`` in
    ``DYNAMIC_LAYER_TYPE_MAPPING`` / ``STATIC_LAYER_TYPE_MAPPING``), has no base class, so the mixin walk never
    registered it and torch.export refused Nemotron 3.5 Transcribe's returned cache (``Found <class
    'transformers.cache_utils.DummyLayer'> in output, which is not a known type``). Returns the classes not
    registered yet, None when there are none. Its hits are the flattenings of such a layer, not the
    registration, which every export makes. Registration is process-wide: a probe without this rule needs a
    process that has not registered them yet (the audit's re-runs are one export per process).
    """
    maps = [value for name, value in vars(cache_utils).items() if name.endswith("LAYER_TYPE_MAPPING")]
    found = {cls for mapping in maps if isinstance(mapping, dict) for cls in mapping.values() if isinstance(cls, type)}
    missing = sorted((cls for cls in found if cls not in pytree.SUPPORTED_NODES), key=lambda cls: cls.__qualname__)
    return missing or None
