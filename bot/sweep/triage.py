"""Failure triage: an error message normalised to a signature, and records grouped by it (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.outcome import PASS, SKIPPED
from bot.signatures import normalize_error
from bot.sweep.records import CRASHED, TIMEOUT, record_key, signal_name
from bot.sweep.tasks import Key


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
