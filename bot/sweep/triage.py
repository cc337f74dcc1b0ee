"""Failure triage: an error message normalised to a signature, and records grouped by it (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.outcome import PASS, SKIPPED
from bot.sweep.records import CRASHED, TIMEOUT, record_key, signal_name
from bot.sweep.tasks import Key

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+~-]+){2,}/?")
_SYMBOL = re.compile(r"\b([su])\d+\b")  # torch's shape symbols: s0 (backed), u0 (unbacked)
_NUMBERED_NAME = re.compile(r"(?<=[A-Za-z])_\d+\b")  # FX node and module names: add_3, layer_0
_NUMBER = re.compile(r"(?<!\w)\d+(?:\.\d+)*(?:[eE][-+]?\d+)?(?!\w)")
_STEM = re.compile(r"^(.+?)(?:Model|For[A-Z]|LMHead|Encoder|Decoder|Backbone|PreTrained)")
SIGNATURE_CHARS = 200


def model_stem(model: str) -> str:
    """The family part of a class name (``Bert`` of ``BertForMaskedLM``), which errors repeat in class names."""
    match = _STEM.match(model)
    return match.group(1) if match else model


def normalize_error(text: str, model: str | None = None) -> str:
    """A signature for an error message: the same bug in two models, or at two shapes, gives the same string.

    Addresses become ``0x?``, paths ``<path>``, shape symbols ``s?``/``u?``, numbers ``N`` (so
    ``[2, 8, 64]`` becomes ``[N, N, N]`` and line numbers disappear), numbered node names ``add_N``, and names
    built on the model's family (``BertSelfAttention``, ``modeling_bert``) ``<Model>``/``<model>``. Only the
    first non-blank line is kept, whitespace collapsed: it names the failure; the rest is context.
    """
    normalized = _HEX.sub("0x?", text)
    normalized = _PATH.sub("<path>", normalized)
    if model:
        stem = model_stem(model)
        normalized = re.sub(rf"\b{re.escape(stem)}\w*", "<Model>", normalized)
        normalized = re.sub(rf"(?<![A-Za-z0-9]){re.escape(stem.lower())}(?![A-Za-z0-9])", "<model>", normalized)
    normalized = _SYMBOL.sub(r"\1?", normalized)
    normalized = _NUMBERED_NAME.sub("_N", normalized)
    normalized = _NUMBER.sub("N", normalized)
    line = next((line for line in normalized.splitlines() if line.strip()), "")
    return " ".join(line.split())[:SIGNATURE_CHARS]


def failure_signature(record: Mapping[str, Any]) -> str:
    """The triage group of a record that did not pass: its status, error type and normalised error."""
    status = record["status"]
    if status == CRASHED and record.get("signal"):
        return f"{CRASHED}: {signal_name(record['signal'])}"
    if status in (CRASHED, TIMEOUT):
        return f"{status}: {normalize_error(record.get('error') or '')}"
    message = normalize_error(record.get("error") or "", record["model"])
    return ": ".join(part for part in (status, record.get("error_type"), message) if part)


@dataclass
class FailureGroup:
    """Records that failed the same way; ``keys`` name them, so a group points at examples to reproduce."""

    signature: str
    keys: list[Key] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.keys)

    def examples(self, limit: int = 3) -> list[str]:
        return [f"{model} ({backend}/{mode})" for model, backend, mode in sorted(self.keys)[:limit]]

    def as_dict(self) -> dict[str, Any]:
        """``sweep ... --json``'s failure group (docs/sweep-results.md): every export in it, not only examples."""
        exports = [{"model": model, "backend": backend, "mode": mode} for model, backend, mode in sorted(self.keys)]
        return {"signature": self.signature, "count": self.count, "exports": exports}


def triage(records: Iterable[Mapping[str, Any]]) -> list[FailureGroup]:
    """Group every record that neither passed nor was skipped by ``failure_signature``, biggest group first."""
    groups: dict[str, FailureGroup] = {}
    for record in records:
        if record["status"] not in (PASS, SKIPPED):
            signature = failure_signature(record)
            groups.setdefault(signature, FailureGroup(signature)).keys.append(record_key(record))
    return sorted(groups.values(), key=lambda group: (-group.count, group.signature))
