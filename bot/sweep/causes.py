"""Why non-passing sweep exports do not pass: the reviewed causes in ``sweeps/causes.toml``, matched to records.

A pass rate says how many exports work; a maintainer also needs to know why each of the others does not, and
whether that is the exporter's job (a workaround to write), the model's (a ledger entry), the tiny builder's, an
honest validation verdict, or this machine's limits. Each ``[[cause]]`` names one failure group by a substring of
its triage signature (``bot.sweep.triage.failure_signature``), optionally narrowed to model patterns and backends,
with the root cause and what was done about it. ``explain`` sorts every non-passing record into exactly one
bucket, so docs/coverage.md can say how many are still untriaged. Loading validates every key: a typo in a level
or a key would otherwise silently leave records untriaged.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.outcome import PASS, SKIPPED
from bot.sweep.triage import failure_signature

DEFAULT_CAUSES = Path("sweeps/causes.toml")
LEVELS = ("exporter", "model", "builder", "validation", "resources")
_REQUIRED = ("id", "signature", "level", "reason", "action")
_OPTIONAL = ("models", "backends")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class CausesError(ValueError):
    """``sweeps/causes.toml`` is malformed; the message names the file and the cause."""


@dataclass(frozen=True)
class Cause:
    """One reviewed failure group: which records it covers and why they fail."""

    id: str
    signature: str
    level: str
    reason: str
    action: str
    models: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()

    def matches(self, record: Mapping[str, Any], signature: str) -> bool:
        """The record's signature contains ours, and its model and backend are among ours (when we name any)."""
        return (
            self.signature in signature
            and (not self.models or any(fnmatch.fnmatchcase(record["model"], p) for p in self.models))
            and (not self.backends or record["backend"] in self.backends)
        )


@dataclass
class Explanation:
    """Every non-passing record in one bucket: ledger entry, builder gap, a triaged cause, or untriaged."""

    ledger: list[Mapping[str, Any]] = field(default_factory=list)
    builder_gap: list[Mapping[str, Any]] = field(default_factory=list)
    by_cause: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    untriaged: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def triaged(self) -> int:
        return sum(len(records) for records in self.by_cause.values())


def parse_causes(data: Mapping[str, Any], source: str) -> list[Cause]:
    """Causes from a parsed TOML document; every problem is a ``CausesError`` naming ``source`` and the cause."""
    unknown_top = set(data) - {"cause"}
    if unknown_top:
        raise CausesError(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown_top))}; expected [[cause]]")
    entries = data.get("cause", [])
    if not isinstance(entries, list):
        raise CausesError(f"{source}: `cause` must be an array of tables ([[cause]])")
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, 1):
        where = f"{source}: cause {entry.get('id') or f'#{index}'}" if isinstance(entry, dict) else source
        if not isinstance(entry, dict):
            raise CausesError(f"{where}: every [[cause]] must be a table")
        missing = [key for key in _REQUIRED if not isinstance(entry.get(key), str) or not entry[key].strip()]
        if missing:
            raise CausesError(f"{where}: missing or empty {', '.join(missing)}")
        unknown = set(entry) - set(_REQUIRED) - set(_OPTIONAL)
        if unknown:
            raise CausesError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if not _ID.match(entry["id"]):
            raise CausesError(f"{where}: id must be kebab-case (a-z, 0-9, '-')")
        if entry["id"] in seen:
            raise CausesError(f"{where}: duplicate id")
        if entry["level"] not in LEVELS:
            raise CausesError(f"{where}: level {entry['level']!r} is not one of {', '.join(LEVELS)}")
        lists = {}
        for key in _OPTIONAL:
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
                raise CausesError(f"{where}: {key} must be an array of non-empty strings")
            lists[key] = tuple(value)
        seen.add(entry["id"])
        causes.append(Cause(entry["id"], entry["signature"], entry["level"], entry["reason"].strip(),
                            entry["action"].strip(), lists["models"], lists["backends"]))  # fmt: skip
    return causes


def load_causes(path: Path) -> list[Cause]:
    """``path``'s causes; a missing file means none have been written yet (every failure is untriaged)."""
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise CausesError(f"{path}: not TOML ({error})") from None
    return parse_causes(data, str(path))


def explain(
    records: Iterable[Mapping[str, Any]], causes: Sequence[Cause], census_ok: Mapping[str, bool] | None = None
) -> Explanation:
    """Sort the non-passing records: a ledger skip first, then a builder gap (the census says the class does not
    build or run eagerly, so no exporter could pass it), then the first cause that matches, else untriaged."""
    explanation = Explanation(by_cause={cause.id: [] for cause in causes})
    for record in records:
        if record["status"] == PASS:
            continue
        if record["status"] == SKIPPED and record.get("ledger_entry"):
            explanation.ledger.append(record)
            continue
        if census_ok is not None and census_ok.get(record["model"]) is False:
            explanation.builder_gap.append(record)
            continue
        signature = failure_signature(record)
        cause = next((cause for cause in causes if cause.matches(record, signature)), None)
        if cause is None:
            explanation.untriaged.append(record)
        else:
            explanation.by_cause[cause.id].append(record)
    return explanation
