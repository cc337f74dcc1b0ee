"""``torch.export.load`` of a ``.pt2`` without its two repeated costs: the same result, about half the time.

Profiled on a tiny Llama bundle (``benchmarks/bench_bundle.py``; cProfile of ``torch.export.load``), the
deserialiser spends most of its time redoing work whose answer it already had:

- ``_dict_to_dataclass`` asks ``typing.get_type_hints`` for the same ~30 schema classes thousands of times
  (5,600 calls on the tiny Llama; a quarter of the load). Filed upstream:
  https://github.com/pytorch/pytorch/issues/196452 (open).
- ``_parse_sym_expr`` re-parses every sub-expression of every symbolic shape with ``sympy.sympify`` (parse
  once, then ``str(arg)`` and parse again for each argument, recursively): 571 parses, another quarter.

``load_program`` answers both from a memo that lives for one load. The memos are exact: type hints of a
class are fixed, and ``sympify(text, locals)`` depends only on the text and on the ``locals`` entries for
the names that occur in it, which are part of the key. The file is still read from disk and deserialised in
full by torch; nothing of an earlier load is reused.
"""

from __future__ import annotations

import contextlib
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import sympy
import torch

__all__ = ["load_program", "memoised_deserialiser"]

_NAME = re.compile(r"[A-Za-z_]\w*")


class _MemoTyping(types.ModuleType):
    """``typing`` as the deserialiser sees it, with ``get_type_hints`` answered once per class."""

    def __init__(self) -> None:
        super().__init__("typing")
        self._hints: dict[tuple[Any, ...], dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(typing, name)

    def get_type_hints(self, obj: Any, globalns: Any = None, localns: Any = None, include_extras: bool = False) -> Any:
        key = (obj, id(globalns), id(localns), include_extras)
        if key not in self._hints:
            self._hints[key] = typing.get_type_hints(obj, globalns, localns, include_extras)
        return self._hints[key]


class _MemoSympy(types.ModuleType):
    """``sympy`` as the deserialiser sees it, with ``sympify`` of a string answered once per text and per
    the objects its names resolve to."""

    def __init__(self) -> None:
        super().__init__("sympy")
        self._parsed: dict[tuple[Any, ...], Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(sympy, name)

    def sympify(self, value: Any, locals: dict[str, Any] | None = None, **options: Any) -> Any:
        if not isinstance(value, str) or options:
            return sympy.sympify(value, locals=locals, **options)
        names = locals or {}
        key = (value, tuple((name, names.get(name)) for name in _NAME.findall(value)))
        if key not in self._parsed:
            self._parsed[key] = sympy.sympify(value, locals=locals)
        return self._parsed[key]


@contextlib.contextmanager
def memoised_deserialiser() -> Iterator[None]:
    """Within the block, torch's export deserialiser memoises type hints and expression parsing."""
    from torch._export.serde import serialize

    with mock.patch.object(serialize, "typing", _MemoTyping()), mock.patch.object(serialize, "sympy", _MemoSympy()):
        yield


def load_program(path: Path | str, memoised: bool = True) -> torch.export.ExportedProgram:
    """``torch.export.load(path)``; ``memoised=False`` is the plain call (the benchmark's baseline)."""
    if not memoised:
        return torch.export.load(str(path))
    with memoised_deserialiser():
        return torch.export.load(str(path))
