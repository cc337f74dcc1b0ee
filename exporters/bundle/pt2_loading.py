"""``torch.export.load`` of a ``.pt2`` without its repeated work: the same program in less than half the time.

Profiled on a tiny Llama bundle (cProfile of ``torch.export.load``; 2.2 s), the deserialiser spends most of
its time redoing work whose answer it already had:

- ``_dict_to_dataclass`` (schema JSON → dataclasses, 15,000 recursive calls) asks ``typing.get_type_hints``
  for the same ~30 schema classes 5,600 times and re-inspects each class on every call: 0.55 s, a quarter
  of the load. Upstream: https://github.com/pytorch/pytorch/issues/196452 (type hints, open) and
  https://github.com/pytorch/pytorch/issues/176428 (schema deserialisation moved to C++; not in torch 2.13).
- ``_parse_sym_expr`` re-parses every sub-expression of every symbolic shape with ``sympy.sympify`` (parse
  once, then ``str(arg)`` and parse again for each argument, recursively): 571 parses, another quarter.

``load_program`` installs two registered patches (backend ``dynamo.pt2-load``, only while the file loads): the
schema conversion planned once per class (``_PlannedSchema``, 0.09 s instead of 0.55) and each expression
parsed once per load (``_MemoSympy``). Both are exact: a class's conversion depends only
on the class, and ``sympify(text, locals)`` only on the text and the ``locals`` entries for the names that
occur in it, which are part of the key. The file is still read from disk and deserialised in full by torch
(fake tensors, symbols, ranges, weights); nothing of an earlier load is reused. tests/test_bundle.py checks
that the program equals plain ``torch.export.load``'s.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from exporters.utils import installed_patches, register_patch

__all__ = ["PT2_LOAD", "load_program"]

_NAME = re.compile(r"[A-Za-z_]\w*")


class _PlannedSchema:
    """``_dict_to_dataclass(cls, data)`` (schema JSON → schema dataclasses) with the per-class decisions made
    once: torch's version re-resolves the class, re-inspects its ``typing`` origin and re-reads its type
    hints on each of its ~15,000 calls for a tiny model. The same rules, in the same order: a schema name
    or forward reference resolves to its class; ``Annotated`` converts as its origin; ``Optional[T]`` is None
    or a ``T``; a ``_Union`` is ``create(field=value)`` from its one key; a dataclass takes the fields present
    in ``data``; otherwise a list, a dict or a float is converted by the type's arguments, anything else
    is kept."""

    def __init__(self, serialize: Any) -> None:
        from torch._export.serde import schema
        from torch._export.serde.union import _Union

        self._serialize, self._schema, self._union = serialize, schema, _Union
        self._plans: dict[Any, Callable[[Any], Any]] = {}

    def __call__(self, cls: Any, data: Any) -> Any:
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plans[cls] = self._plan(cls)
        return plan(data)

    def _plan(self, cls: Any) -> Callable[[Any], Any]:
        convert = self
        resolved = self._serialize._resolve_schema_cls(cls)
        if isinstance(resolved, str):
            raise AssertionError(f"Unresolved class type: '{resolved}'.")
        origin, arguments = typing.get_origin(resolved), typing.get_args(resolved)
        if origin is typing.Annotated:
            return self._plan(resolved.__origin__)
        if origin in (typing.Union, types.UnionType) and type(None) in arguments:
            if len(arguments) != 2:
                raise AssertionError(f"expected 2 type args, got {len(arguments)}")
            inner = arguments[0]
            return lambda data: None if data is None else convert(inner, data)
        if isinstance(resolved, type) and issubclass(resolved, self._union):
            hints = typing.get_type_hints(resolved, globalns=vars(self._schema))

            def union(data: Any) -> Any:
                if not isinstance(data, dict) or len(data) != 1:
                    raise AssertionError(f"expected a dict with 1 key, got {data!r:.80}")
                (key, value), = data.items()
                return resolved.create(**{key: convert(hints[key], value)})
            return union
        if dataclasses.is_dataclass(resolved):
            hints = typing.get_type_hints(resolved, globalns=vars(self._schema))
            names = [(f.name, hints[f.name]) for f in dataclasses.fields(resolved)]
            return lambda data: resolved(**{name: convert(kind, data[name]) for name, kind in names if name in data})
        is_float = resolved is float

        def other(data: Any) -> Any:
            if isinstance(data, list):
                return [convert(arguments[0], item) for item in data] if data else data
            if isinstance(data, dict):
                return {key: convert(arguments[1], value) for key, value in data.items()}
            return float(data) if is_float else data
        return other


class _MemoSympy:
    """``sympify`` with a string's answer kept per text and per the objects its names resolve to: the same
    text under the same ``locals`` entries always parses to the same expression, so the memo is exact."""

    def __init__(self, sympify: Callable[..., Any]) -> None:
        self._sympify = sympify
        self._parsed: dict[tuple[Any, ...], Any] = {}

    def sympify(self, value: Any, locals: dict[str, Any] | None = None, **options: Any) -> Any:
        if not isinstance(value, str) or options:
            return self._sympify(value, locals=locals, **options)
        names = locals or {}
        key = (value, tuple((name, names.get(name)) for name in _NAME.findall(value)))
        if key not in self._parsed:
            self._parsed[key] = self._sympify(value, locals=locals)
        return self._parsed[key]


# ── The registered patches (backend "dynamo.pt2-load": installed only while a .pt2 is loaded) ──
PT2_LOAD = "dynamo.pt2-load"  # the Dynamo backend's artifact; runs on its stack (torch)


@register_patch(PT2_LOAD, "torch._export.serde.serialize._dict_to_dataclass",
                upstream="https://github.com/pytorch/pytorch/issues/196452", dependency="torch", speed=True)
def _patch_pt2_schema_conversion_planned_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """Schema JSON → dataclasses with each class's conversion planned once (see ``_PlannedSchema``); torch's
    C++ deserialiser (pytorch/pytorch#176428) or a type-hint cache (#196452) makes this unnecessary."""
    from torch._export.serde import serialize

    return _PlannedSchema(serialize)


@register_patch(PT2_LOAD, "sympy.sympify", dependency="torch", speed=True)
def _patch_pt2_expression_parsed_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """``sympify`` of a shape expression's text answered once per text and the objects its names resolve to
    (see ``_MemoSympy``): torch's ``_parse_sym_expr`` parses the text of every SymInt it meets, however often that text recurs.
    Installed only for the load, under the patch lock, so no other sympy caller sees the memo afterwards. Not
    reported upstream yet: the ready-to-file issue is docs/upstream-drafts/_patch_pt2_expression_parsed_once.md."""
    return _MemoSympy(original).sympify


def load_program(path: Path | str, memoised: bool = True) -> torch.export.ExportedProgram:
    """``torch.export.load(path)`` with the ``pt2-load`` patches installed; ``memoised=False`` is the plain
    call (the benchmark's baseline and the test's reference)."""
    if not memoised:
        return torch.export.load(str(path))
    with installed_patches(PT2_LOAD):
        return torch.export.load(str(path))
