"""The sweep's work list: one ``Task`` per (class, backend, mode), shards by name hash, selection filters.

Pure: plain data in, plain data out, so sharding and selection are tested without torch or a process.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MODES = ("static", "dynamic")
GENERATE = "generate"  # ``sweep run --task text-generation``: prefill + decode, validated token for token

Key = tuple[str, str, str]  # (class, backend, mode, with "+SCHEME" for a quantized export): one record per key


def keyed_mode(mode: str, quantize: str | None) -> str:
    """The mode part of a key: the mode, with ``+SCHEME`` for a quantized export (``static+8da4w``), so a
    quantized record never replaces the float one of its class when records are merged."""
    return mode if quantize is None else f"{mode}+{quantize}"


@dataclass(frozen=True, order=True)
class Task:
    """One export of the sweep: a class, a backend and a shape mode (and a ``--quantize`` scheme, or None)."""

    model: str
    backend: str
    mode: str
    quantize: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.mode != "static"  # a generation export has dynamic shapes

    @property
    def generate(self) -> bool:
        return self.mode == GENERATE

    @property
    def key(self) -> Key:
        return (self.model, self.backend, keyed_mode(self.mode, self.quantize))

    @property
    def label(self) -> str:
        return f"{self.model} {self.backend}/{keyed_mode(self.mode, self.quantize)}"

    @property
    def slug(self) -> str:
        return f"{self.model}-{self.backend}-{keyed_mode(self.mode, self.quantize)}"


def collect_class_names(mappings: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every class name in transformers' auto mappings, whose values are a name or a tuple of names."""
    names: set[str] = set()
    for mapping in mappings:
        for value in mapping.values():
            names.update(value if isinstance(value, (tuple, list)) else (value,))
    return names


def shard_index(name: str, count: int) -> int:
    """The 0-based shard of ``name``: a hash of the name alone, so that no filter, ordering or transformers
    upgrade can move a class between shards run with the same ``count``; shards never overlap or miss one."""
    return int.from_bytes(hashlib.sha1(name.encode()).digest()[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` with 1 <= i <= n (CI matrices count from one) as ``(i, n)``; ``ValueError`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--shard must look like i/n (for example 2/8), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text}: i must be between 1 and n")
    return index, count


def select_classes(
    classes: Sequence[str],
    patterns: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
    limit: int | None = None,
) -> list[str]:
    """Deduplicate, keep names matching any ``fnmatch`` pattern, keep this shard's, then the first ``limit``.

    The limit comes last so that ``--limit`` with ``--resume`` keeps pointing at the same classes.
    """
    selected = list(dict.fromkeys(classes))
    if patterns:
        selected = [name for name in selected if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    if shard is not None:
        index, count = shard
        selected = [name for name in selected if shard_index(name, count) == index - 1]
    return selected[:limit] if limit is not None else selected


def plan_tasks(classes: Iterable[str], backends: Iterable[str], modes: Iterable[str], done: set[Key],
               quantize: str | None = None) -> list[Task]:
    """Every (class, backend, mode) not already in ``done``, class by class (quantized with ``quantize``)."""
    backends, modes = tuple(backends), tuple(modes)
    tasks = (Task(model, backend, mode, quantize) for model in classes for backend in backends for mode in modes)
    return [task for task in tasks if task.key not in done]


def parse_class_list(text: str) -> list[str]:
    """A ``--classes`` file: one class per line; blank lines and ``#`` comments (whole or trailing) ignored."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


