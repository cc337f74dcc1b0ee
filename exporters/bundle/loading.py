"""``exporters.load(directory)``: a bundle back as a callable that returns what the eager model returned.

The loader reads ``export.json``, registers the pytree types the manifest names (ModelOutputs register when
their transformers module is imported; caches are registered the way the Dynamo exporter registers them),
opens one runner per component, and on each call checks the arguments against the manifest before the
runtime sees them: a missing or unexpected input, a wrong dtype or rank, a static dim of another size, a
dynamic dim outside its range, or two dims that share a name but not a size each fail with one line
naming the input and dim. Outputs are rebuilt with the manifest's output spec, whose traced constants (a
sliding-window cache layer's ``cumulative_length``: ``TracedInt``) are recomputed at the call's dim sizes;
output leaves that are constants of the program (``constants``: ints, None) go back where eager had them.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from exporters.bundle.format import DEFAULT_COMPONENT, ComponentSpec, Manifest, TracedInt, read_manifest
from exporters.bundle.runners import open_runner
from exporters.bundle.signature import dtype_name, map_traced_constants
from exporters.flatten import leaves_with_path
from exporters.validation import leaf_name

__all__ = ["ExportedComponent", "ExportedModel", "InputError", "load", "register_bundle_types"]


class InputError(ValueError):
    """The arguments do not fit what the artifact was exported for (named input, dim and size)."""


def _resolve(serialized: str) -> type:
    """The class behind a serialized pytree type name (``transformers.cache_utils.DynamicCache``)."""
    parts = serialized.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                found = getattr(found, attribute)
        except AttributeError:
            continue
        return found
    raise ImportError(f"cannot import {serialized}, which the bundle's input/output structure names")


def register_pytree_names(names: list[str]) -> None:
    """Register each named type so specs naming it can be read back (idempotent)."""
    for name in names:
        if name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            continue
        cls = _resolve(name)  # importing a ModelOutput's module registers it (transformers does that itself)
        if name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            continue
        from exporters.cache_pytree import register_walked_type

        register_walked_type(cls)
        if name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            raise ImportError(f"{name} was registered as {cls.__module__}.{cls.__qualname__}; the bundle names it {name}")


def register_bundle_types(directory: Path | str) -> None:
    """The one call that makes plain ``torch.export.load(directory / "model.pt2")`` work in a fresh process:
    it registers every pytree type (ModelOutput, Cache and cache-layer classes) the bundle's specs name."""
    for spec in read_manifest(directory).components.values():
        register_pytree_names(spec.pytree_types)


class ExportedComponent:
    """One artifact of a bundle, callable with the eager model's keyword arguments."""

    def __init__(self, directory: Path, name: str, spec: ComponentSpec):
        self.name = name
        self.spec = spec
        register_pytree_names(spec.pytree_types)
        self.in_spec = pytree.treespec_loads(spec.in_spec)
        self.out_spec = pytree.treespec_loads(spec.out_spec)
        placeholder = pytree.tree_unflatten([0] * self.in_spec.num_leaves, self.in_spec)
        self.leaf_names = [leaf_name(path) for path, _ in leaves_with_path(placeholder)]
        self.has_traced_constants = map_traced_constants(self.out_spec, lambda value: value) is not self.out_spec
        self.runner = open_runner(directory, spec)

    @property
    def input_names(self) -> list[str]:
        return list(self.spec.arguments)

    def __call__(self, **kwargs: Any) -> Any:
        feed = self.check_inputs(kwargs)
        outputs = self.runner(feed)
        constants = self.spec.constants
        if len(outputs) + len(constants) != self.out_spec.num_leaves:
            raise RuntimeError(
                f"{self.spec.file} returned {len(outputs)} outputs; the manifest's output structure has "
                f"{self.out_spec.num_leaves}" + (f", {len(constants)} of them constants" if constants else "")
            )
        for constant in constants:  # ascending positions: each lands where eager returned it
            outputs.insert(constant.index, constant.value)
        out_spec = self.out_spec
        if self.has_traced_constants:
            sizes = self.dim_sizes(feed)
            out_spec = map_traced_constants(out_spec, lambda value: _evaluated(value, sizes))
        return pytree.tree_unflatten(outputs, out_spec)

    def dim_sizes(self, feed: dict[str, torch.Tensor]) -> dict[str, int]:
        """The size of every named dim in this call (the inputs were checked: one size per name)."""
        return {dim: int(size) for spec in self.spec.inputs for dim, size in zip(spec.shape, feed[spec.name].shape)
                if isinstance(dim, str) and dim in self.spec.dims}

    def check_inputs(self, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The leaves to feed, by manifest name, after checking every argument against the manifest."""
        spec = self.spec
        kwargs = self.with_defaults(kwargs)
        missing = [name for name in spec.arguments if name not in kwargs]
        if missing:
            raise InputError(f"missing input {missing[0]!r}: {self._takes()}")
        unexpected = [name for name in kwargs if name not in spec.arguments]
        if unexpected:
            raise InputError(f"unexpected input {unexpected[0]!r}: {self._takes()}")
        leaves = {leaf_name(path): value for path, value in leaves_with_path({name: kwargs[name] for name in spec.arguments})}
        # Leaves by name, not TreeSpec equality: a cache's constants (a layer's length so far) may differ from
        # the traced ones without changing what the artifact takes.
        if list(leaves) != self.leaf_names:
            different = next((a, b) for a, b in zip([*leaves, None], [*self.leaf_names, None]) if a != b)
            raise InputError(
                f"the inputs hold {len(leaves)} tensors, exported with {len(self.leaf_names)}; first difference: "
                f"{different[0]!r} where the export takes {different[1]!r} (a cache needs the exported layers)"
            )
        seen: dict[str, tuple[int, str, int]] = {}
        feed: dict[str, torch.Tensor] = {}
        for tensor_spec in spec.inputs:
            name = tensor_spec.name
            value = leaves[name]
            if not isinstance(value, torch.Tensor):
                raise InputError(f"input {name!r} must be a tensor, got {type(value).__name__}")
            if dtype_name(value.dtype) != tensor_spec.dtype:
                raise InputError(f"input {name!r} has dtype {dtype_name(value.dtype)}; exported for {tensor_spec.dtype}")
            if value.dim() != len(tensor_spec.shape):
                raise InputError(
                    f"input {name!r} has {value.dim()} dims {list(value.shape)}; exported for {len(tensor_spec.shape)}"
                    f" {tensor_spec.shape}"
                )
            for index, (size, dim) in enumerate(zip(value.shape, tensor_spec.shape)):
                self._check_dim(name, index, int(size), dim, seen)
            feed[name] = value
        return feed

    def with_defaults(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with every optional argument the caller left out filled as eager fills it (the manifest's
        ``optional``: a constant in the shape of another argument the caller did pass)."""
        filled = dict(kwargs)
        for name, default in self.spec.optional.items():
            like = kwargs.get(default.shape_of)
            if name not in kwargs and isinstance(like, torch.Tensor):
                dtype = next(t.dtype for t in self.spec.inputs if t.name == name)
                filled[name] = torch.full(like.shape, default.fill, dtype=getattr(torch, dtype))
        return filled

    def _check_dim(self, name: str, index: int, size: int, dim: int | str, seen: dict[str, tuple[int, str, int]]) -> None:
        if isinstance(dim, int):
            if size != dim:
                raise InputError(f"input {name!r} dim {index} is {size}; the export is static there: {dim}")
            return
        bounds = self.spec.dims.get(dim)
        if bounds is None:  # an expression of named dims: the named ones are checked where they stand alone
            return
        if not bounds.contains(size):
            why = f": {bounds.min_reason}" if bounds.min_reason and bounds.min is not None and size < bounds.min else ""
            raise InputError(
                f"input {name!r} dim {index} ({dim}) is {size}, outside the validated range {bounds.describe()}{why}"
            )
        first = seen.setdefault(dim, (size, name, index))
        if first[0] != size:
            raise InputError(
                f"input {name!r} dim {index} is {size} but {first[1]!r} dim {first[2]} is {first[0]}: both are "
                f"{dim!r}, which the exported program requires to be equal"
            )

    def _takes(self) -> str:
        optional = [name for name in self.spec.arguments if name in self.spec.optional]
        required = [name for name in self.spec.arguments if name not in self.spec.optional]
        return f"{self.spec.file} takes {', '.join(required)}" + (
            f" (optional: {', '.join(optional)})" if optional else "")


def _evaluated(value: TracedInt, sizes: dict[str, int]) -> TracedInt:
    """``value`` at ``sizes``: its expression evaluated, or its export-time value where the expression
    names a dim the call has no size for (or none at all)."""
    if value.expr is None:
        return value
    expr = sympy.sympify(value.expr, locals={name: sympy.Symbol(name) for name in sizes})
    if any(str(symbol) not in sizes for symbol in expr.free_symbols):
        return value
    return TracedInt(int(expr.xreplace({sympy.Symbol(name): sympy.Integer(size) for name, size in sizes.items()})),
                     value.expr)


class ExportedModel:
    """A loaded bundle: call it like the eager model (``model(input_ids=..., attention_mask=...)``).

    A single-graph bundle has one component, ``model``, which ``__call__`` runs; a generation bundle's
    components (``prefill``, ``decode``) are in ``components``.
    """

    def __init__(self, directory: Path, manifest: Manifest, components: dict[str, ExportedComponent]):
        self.directory = directory
        self.metadata = manifest
        self.components = components

    @property
    def default(self) -> ExportedComponent:
        if DEFAULT_COMPONENT in self.components:
            return self.components[DEFAULT_COMPONENT]
        if len(self.components) == 1:
            return next(iter(self.components.values()))
        raise TypeError(
            f"{self.directory} has components {', '.join(self.components)}; call one of them: "
            f"model.components[{next(iter(self.components))!r}](...)"
        )

    @property
    def input_names(self) -> list[str]:
        return self.default.input_names

    def __call__(self, **kwargs: Any) -> Any:
        return self.default(**kwargs)

    def generate(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """Greedy (or seeded sampling) generation run in this bundle's runtime; see exporters.bundle.decoding."""
        from exporters.bundle.decoding import generate

        return generate(self, input_ids, **kwargs)

    @functools.cached_property
    def config(self) -> Any:
        """The model's transformers config (``config.json``), or None when the bundle has none."""
        if not self.metadata.files.get("config"):
            return None
        import transformers

        return transformers.AutoConfig.from_pretrained(self.directory, local_files_only=True)

    @functools.cached_property
    def generation_config(self) -> Any:
        """The model's ``GenerationConfig``, or None when the model cannot generate."""
        if not self.metadata.files.get("generation_config"):
            return None
        import transformers

        return transformers.GenerationConfig.from_pretrained(self.directory, local_files_only=True)

    @functools.cached_property
    def tokenizer(self) -> Any:
        """The checkpoint's tokenizer, saved in the bundle (``files["tokenizer"]``), or None (a tiny model)."""
        return self.preprocessor("tokenizer")

    @functools.cached_property
    def processor(self) -> Any:
        """The checkpoint's processor, else its feature extractor or image processor, or None."""
        return next((p for kind in ("processor", "feature_extractor", "image_processor")
                     if (p := self.preprocessor(kind)) is not None), None)

    def preprocessor(self, kind: str) -> Any:
        """``kind`` (exporters.bundle.preprocessors.PREPROCESSORS) as saved in this bundle, or None."""
        from exporters.bundle.preprocessors import load_preprocessor

        return load_preprocessor(self.directory, kind) if self.metadata.files.get(kind) else None

    def __repr__(self) -> str:
        return (f"ExportedModel({str(self.directory)!r}, backend={self.metadata.backend!r}, "
                f"model_class={self.metadata.model_class!r}, components={list(self.components)})")


def load(directory: Path | str) -> ExportedModel:
    """Load a bundle written by ``ExportResult.save`` / ``exportbot export``; every component's file is
    opened in a fresh runtime object now, so a broken file fails here rather than at the first call."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    components = {name: ExportedComponent(directory, name, spec) for name, spec in manifest.components.items()}
    return ExportedModel(directory, manifest, components)
