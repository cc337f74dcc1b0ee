"""Where each registered workaround fires: ``exportbot workarounds index RESULTS... --out docs/workaround-index.md``.

Why an index: a workaround can only be shown unnecessary by re-running exports that need it, and the
sweep already records which workarounds fired in every export (``workarounds_fired``, see
docs/sweep-results.md). Turning those records into workaround name → exports gives ``exportbot audit
--workarounds`` and ``exportbot bisect`` their probes, and gives reviewers a committed, diffable answer to
"what does this workaround touch?". The Markdown page is for people; its JSON twin
(``docs/workaround-index.json``) is what the bot reads. Neither carries a timestamp or timings, so
regenerating from the same results gives the same bytes.

Probes: a workaround that fired in hundreds of exports is re-run in at most ``DEFAULT_PROBE_LIMIT``
(:func:`select_probes`), chosen among exports that *passed* with it (an export that fails anyway proves
nothing about this workaround) and are single-graph (static or dynamic: a generation record is indexed but
is not an export a probe re-runs): first one per (backend, mode) pair, then one per class, alphabetically,
so the few re-runs spread over backends, shape modes and model families.

Building, rendering and selecting take plain data; ``load_index`` reads the JSON twin. The commands
(``exportbot workarounds index`` and ``remove``) are ``bot.cli.workarounds``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.plan import Export, Subject, workaround_subject
from bot.outcome import PASS
from exporters.utils import Workaround

INDEX_SCHEMA = 1
DEFAULT_PROBE_LIMIT = 3  # exports re-run per workaround by `audit --workarounds` and `bisect`
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
DEFAULT_MARKDOWN = DOCS_DIR / "workaround-index.md"
DEFAULT_JSON = DOCS_DIR / "workaround-index.json"
INDEX_METADATA = ("kind", "backend", "upstream", "dependency")
_REPLAYABLE = ("static", "dynamic")  # modes a probe (bot.audit.plan.Export) re-runs; a generation export is not one


class WorkaroundIndexError(ValueError):
    """The index file cannot be used (missing, not JSON, another schema); the message names the file."""


@dataclass(frozen=True, order=True)
class FiredExport:
    """One sweep export in which a workaround fired, with how it ended and how often it fired."""

    model: str
    backend: str
    mode: str
    status: str
    hits: int

    @property
    def export(self) -> Export:
        return Export(self.model, self.backend, self.mode == "dynamic")


@dataclass(frozen=True)
class IndexRow:
    """One workaround: its registry metadata (None only for a row read from an index written before deleted
    workarounds were counted under ``removed``) and the exports it fired in."""

    name: str
    exports: tuple[FiredExport, ...]
    metadata: Mapping[str, Any] | None = None

    @property
    def passing(self) -> list[FiredExport]:
        return [e for e in self.exports if e.status == PASS]


@dataclass(frozen=True)
class WorkaroundIndex:
    """The whole index; :meth:`as_dict` is the JSON twin."""

    rows: tuple[IndexRow, ...]
    sources: tuple[str, ...] = ()
    versions: Mapping[str, list[str]] = field(default_factory=dict)
    # Fired in records made before the workaround was deleted from the source: name → how many exports.
    removed: Mapping[str, int] = field(default_factory=dict)

    def exports_of(self, name: str) -> tuple[FiredExport, ...]:
        return next((row.exports for row in self.rows if row.name == name), ())

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": INDEX_SCHEMA,
            "sources": list(self.sources),
            "versions": {name: list(found) for name, found in self.versions.items()},
            "removed": dict(self.removed),
            "workarounds": [
                {
                    "name": row.name,
                    "registered": row.metadata is not None,
                    **{key: (row.metadata or {}).get(key) for key in INDEX_METADATA},
                    "exports": [asdict(e) for e in row.exports],
                }
                for row in self.rows
            ],
        }


# ── Building and selecting (pure) ──
def build_index(
    records: Iterable[Mapping[str, Any]],
    registered: Mapping[str, Mapping[str, Any]],
    sources: Sequence[str] = (),
) -> WorkaroundIndex:
    """The index of ``records`` (sweep records, already merged: one per key), every registered workaround
    included even when it never fired (an empty row is worth seeing: dead or not covered by the sweep).

    A name that fired but is no longer registered was deleted after those records were made (removing
    workarounds is the point); it gets no row, only a count in ``removed``, so deleting one does not need
    the whole catalogue swept again before the index is current."""
    fired: dict[str, list[FiredExport]] = {}
    versions: dict[str, set[str]] = {}
    for record in records:
        for package, version in (record.get("versions") or {}).items():
            versions.setdefault(package, set()).add(str(version))
        for name, hits in (record.get("workarounds_fired") or {}).items():
            export = FiredExport(
                record["model"], record["backend"], record["mode"], record["status"], int(hits)
            )
            fired.setdefault(name, []).append(export)
    rows = tuple(IndexRow(n, tuple(sorted(fired.get(n, ()))), registered[n]) for n in sorted(registered))
    removed = {name: len(exports) for name, exports in sorted(fired.items()) if name not in registered}
    return WorkaroundIndex(rows, tuple(sources), {k: sorted(v) for k, v in sorted(versions.items())}, removed)


def select_probes(exports: Iterable[FiredExport], limit: int = DEFAULT_PROBE_LIMIT) -> list[Export]:
    """At most ``limit`` passing exports to re-run without the workaround, spread as the module says."""
    candidates = sorted(e for e in exports if e.status == PASS and e.mode in _REPLAYABLE)
    chosen: list[FiredExport] = []
    combos: set[tuple[str, str]] = set()
    models: set[str] = set()
    rules: list[Callable[[FiredExport], bool]] = [
        lambda e: (e.backend, e.mode) not in combos and e.model not in models,
        lambda e: e.model not in models,
        lambda e: True,
    ]
    for rule in rules:
        for export in candidates:
            if len(chosen) >= limit:
                break
            if export not in chosen and rule(export):
                chosen.append(export)
                combos.add((export.backend, export.mode))
                models.add(export.model)
    return [e.export for e in chosen]


def probe_subject(
    workaround: Workaround, index: WorkaroundIndex, limit: int = DEFAULT_PROBE_LIMIT
) -> Subject:
    """The workaround as an audit subject whose exports are its probes from ``index``."""
    return workaround_subject(workaround, select_probes(index.exports_of(workaround.name), limit))


_FLAT = re.compile(r"([{\[])\n([^{}\[\]]*?)\n\s*([}\]])")


def dump_index(index: WorkaroundIndex) -> str:
    """The JSON twin, indented, with every object or list of plain values on one line (one export per
    line keeps the file short and its diffs readable)."""
    text = json.dumps(index.as_dict(), indent=2)
    return _FLAT.sub(lambda m: m[1] + " ".join(p.strip() for p in m[2].splitlines()) + m[3], text) + "\n"


def index_from_dict(data: Any, source: str) -> WorkaroundIndex:
    """The index back from its JSON twin; ``WorkaroundIndexError`` names ``source`` when it does not fit."""
    if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
        raise WorkaroundIndexError(f"{source}: not a workaround index of schema {INDEX_SCHEMA}")
    try:
        rows = tuple(
            IndexRow(
                row["name"],
                tuple(FiredExport(**e) for e in row["exports"]),
                {key: row.get(key) for key in INDEX_METADATA} if row.get("registered") else None,
            )
            for row in data["workarounds"]
        )
    except (KeyError, TypeError) as error:
        raise WorkaroundIndexError(f"{source}: malformed workaround row ({error})") from None
    return WorkaroundIndex(rows, tuple(data.get("sources", ())), data.get("versions", {}), data.get("removed", {}))


def load_index(path: Path) -> WorkaroundIndex:
    """Read the JSON twin written by ``exportbot workarounds index``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise WorkaroundIndexError(
            f"{path}: cannot read ({error.strerror}); run `exportbot workarounds index`"
        ) from None
    except json.JSONDecodeError as error:
        raise WorkaroundIndexError(f"{path}: not JSON ({error.msg})") from None
    return index_from_dict(data, str(path))


# ── Rendering (pure) ──
def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _combos(exports: Iterable[FiredExport]) -> str:
    counts: dict[str, int] = {}
    for e in exports:
        counts[f"{e.backend}/{e.mode}"] = counts.get(f"{e.backend}/{e.mode}", 0) + 1
    return ", ".join(f"{combo} {n}" for combo, n in sorted(counts.items())) or "—"


def render_markdown(index: WorkaroundIndex, command: str, limit: int = DEFAULT_PROBE_LIMIT) -> str:
    """The reviewer's page: one summary table, then every export each workaround fired in."""
    versions = "; ".join(f"{k} {', '.join(v)}" for k, v in index.versions.items()) or "unknown"
    lines = [
        "# Workaround index",
        "",
        f"Generated by `{command}`; do not edit by hand. Sources: "
        + (", ".join(f"`{s}`" for s in index.sources) or "none")
        + f". Versions seen: {versions}.",
        "",
        "*fired in*: exports (class × backend × mode) in which the workaround took effect; *passing*: those "
        f"that passed with it. *probes*: the passing exports `exportbot audit --workarounds` re-runs without "
        f"it (at most {limit}, see bot/audit/workaround_index.py).",
        "",
        *(["Removed from the source since these records were made (fired in that many exports): "
           + ", ".join(f"`{name}` ({count})" for name, count in index.removed.items()) + ".", ""]
          if index.removed else []),
        "| workaround | kind | backend | upstream | dependency | fired in | passing | backend/mode | probes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in index.rows:
        meta = row.metadata or {}
        kind = meta.get("kind") or "**not registered**"
        probes = "<br>".join(f"{p.model} {p.backend}/{p.mode}" for p in select_probes(row.exports, limit))
        lines.append(
            f"| `{row.name}` | {kind} | {meta.get('backend') or '—'} | {_cell(meta.get('upstream') or '—')} | "
            f"{meta.get('dependency') or '—'} | {len(row.exports)} | {len(row.passing)} | "
            f"{_combos(row.exports)} | {probes or '—'} |"
        )
    for row in index.rows:
        lines += ["", f"## `{row.name}`", ""]
        if not row.exports:
            lines.append("Fired in no export of these results.")
            continue
        lines += ["| class | backend | mode | status | hits |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {e.model} | {e.backend} | {e.mode} | {e.status} | {e.hits} |" for e in row.exports]
    return "\n".join(lines) + "\n"
