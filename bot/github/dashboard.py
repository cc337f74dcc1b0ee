"""The optional dashboard issue, computed without touching GitHub (pure), like bot.github.prwriter's PR text.

Every audited entry (and, with ``audit --workarounds``, registered workaround) has one row: what upstream
says, when it was last re-run, the verdict and the shrink PR. Above the table: what needs a human,
including the reverse direction (entries whose upstream closed as fixed but which still fail at our
pins). The rows also sit in a hidden block (``<!-- exportbot:dashboard-rows [...] -->``), so a report that
covers only some entries (``audit --entry ID``, bot.audit.report's ``selection``) replaces only their rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.audit.pins import BACKEND_STACK, normalize_name
from bot.audit.report import covers, is_complete
from bot.audit.verdict import NEEDS_HUMAN, NOT_DUE, STILL_NEEDED, UNKNOWN
from bot.audit.verification import Verification
from bot.github.prwriter import _cell, _versions, ledger_rows, workaround_rows
from exporters.ledger import Ledger

DASHBOARD_MARKER = "<!-- exportbot:dashboard -->"
# Visible text of every dashboard body: what the issue search looks for (search may not index the
# hidden marker); the marker then decides.
DASHBOARD_SIGNATURE = "Updated in place by exportbot"
FIXED_STATES = ("closed:completed", "merged")  # bot.audit.plan.describe_state words for "closed as fixed"
ATTENTION_VERDICTS = NEEDS_HUMAN  # verdicts listed under "Needs a human": changed, human, not-reproduced
_ROWS_BLOCK = re.compile(r"<!-- exportbot:dashboard-rows (\[.*?\]) -->")
# The bump PRs' section (bot.github.bump writes one row per group; the shrink run keeps the section as it is).
BUMPS_START, BUMPS_END = "<!-- exportbot:bumps -->", "<!-- exportbot:bumps-end -->"
_BUMP_ROW = "<!-- exportbot:bump-row {group} -->"


def _normalized(versions: Mapping[str, str | None]) -> dict[str, str | None]:
    return {normalize_name(name): version for name, version in versions.items()}


def reverse_flags(
    report: Mapping[str, Any], ledger: Ledger, verification: Mapping[str, Verification]
) -> dict[str, str]:
    """Entry id → warning for entries whose upstream closed as fixed but which still fail at our pins."""
    dependencies = {e.id: e.dependency for e in ledger.entries}
    flags = {}
    for row in ledger_rows(report):
        if row["upstream_state"].get("summary") not in FIXED_STATES:
            continue
        record = verification.get(row["id"])
        if row["verdict"] == STILL_NEEDED:
            versions, when = _normalized(report["pins"]), str(report.get("generated_at", ""))[:10]
        elif row["verdict"] == NOT_DUE and record is not None and record.verdict == STILL_NEEDED:
            versions, when = _normalized(record.versions), str(record.verified_on)
        else:
            continue
        dependency = dependencies.get(row["id"])
        version = versions.get(normalize_name(dependency)) if dependency else None
        stack = [
            f"{n} {versions.get(normalize_name(n)) or '(unpinned)'}" for n in BACKEND_STACK[row["backend"]]
        ]
        where = f"{dependency} {version}" if dependency and version else ", ".join(stack)
        flags[row["id"]] = f"closed upstream, still failing at {where} (checked {when})"
    return flags


def _last_verification(row: Mapping[str, Any], report: Mapping[str, Any], record: Verification | None) -> str:
    if row.get("evidence"):
        pins = _normalized(report["pins"])
        stack = ", ".join(f"{n} {pins.get(normalize_name(n)) or '?'}" for n in BACKEND_STACK[row["backend"]])
        return f"{str(report.get('generated_at', ''))[:10]} ({stack})"
    if record is not None:
        return f"{record.verified_on} ({_versions(record.versions)})"
    return "never"


@dataclass(frozen=True)
class DashboardRow:
    """One row of the dashboard, with the "needs a human" lines it contributes.

    Rows round-trip through the dashboard's hidden block, so a report that covers only some entries
    (``audit --entry ID``) replaces only their rows and the others stay as the last audit left them.
    """

    id: str
    kind: str  # "entries" or "workarounds" (the report's key)
    cells: tuple[str, ...]  # every column but the first (id) and the last (shrink PR)
    attention: tuple[str, ...] = ()
    by_hand: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "cells": list(self.cells), "attention": list(self.attention),
                "by_hand": self.by_hand}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DashboardRow:
        cells, attention = data["cells"], data.get("attention", [])
        if data["kind"] not in ("entries", "workarounds") or not all(isinstance(c, str) for c in [*cells, *attention]):
            raise ValueError("not a dashboard row")
        return cls(str(data["id"]), data["kind"], tuple(cells), tuple(attention), bool(data.get("by_hand")))


def _verdict_attention(row: Mapping[str, Any]) -> list[str]:
    """A row's "needs a human" line when its verdict asks for one (with its first reason)."""
    if row["verdict"] not in ATTENTION_VERDICTS:
        return []
    return [f"- `{row['id']}`: {row['verdict']}: {_cell((row.get('reasons') or [''])[0])}"]


def _upstream_cell(row: Mapping[str, Any]) -> str:
    state = row["upstream_state"].get("summary", UNKNOWN)
    return f"[{state}]({row['upstream']})" if row["upstream"] else state


def dashboard_rows(
    report: Mapping[str, Any], ledger: Ledger, verification: Mapping[str, Verification],
    by_hand: Mapping[str, str] | None = None,
) -> list[DashboardRow]:  # fmt: skip
    """The report's rows as the dashboard shows them (pure)."""
    by_hand = by_hand or {}
    flags = reverse_flags(report, ledger, verification)
    rows = []
    for row in ledger_rows(report):
        attention = [f"- `{row['id']}`: {flags[row['id']]}"] if row["id"] in flags else []
        attention += _verdict_attention(row)
        cells = (
            _cell(", ".join(row["models"])), _upstream_cell(row),
            _last_verification(row, report, verification.get(row["id"])),
            row["verdict"] + (" ⚠️" if row["id"] in flags else ""),
        )  # fmt: skip
        rows.append(DashboardRow(row["id"], "entries", cells, tuple(attention)))
    for row in workaround_rows(report):
        attention = _verdict_attention(row)
        if row["id"] in by_hand:
            attention.append(
                f"- `{row['id']}`: removable, ready to delete by hand ({_cell(by_hand[row['id']])}); evidence: "
                f"{_cell('; '.join(row.get('reasons') or ['see the audit report']))}"
            )
        probes = ", ".join(f"{e['model']} ({e['mode']})" for e in row["exports"]) or "no export hit it"
        cells = (row["backend"], _upstream_cell(row), _cell(probes), row["verdict"])
        rows.append(DashboardRow(row["id"], "workarounds", cells, tuple(attention), row["id"] in by_hand))
    return rows


def parse_dashboard_rows(body: str | None) -> list[DashboardRow]:
    """The rows recorded in a dashboard body; nothing when the block is missing or not ours."""
    match = _ROWS_BLOCK.search(body or "")
    if match is None:
        return []
    try:
        return [DashboardRow.from_json(item) for item in json.loads(match.group(1))]
    except (ValueError, KeyError, TypeError):
        return []


def _unchecked(report: Mapping[str, Any]) -> set[str]:
    """Rows a rate-limited audit never got to (unknown, nothing re-run): they keep their earlier row."""
    if not report.get("partial"):
        return set()
    return {
        row["id"] for row in [*ledger_rows(report), *workaround_rows(report)]
        if row["verdict"] == UNKNOWN and not row.get("evidence")
    }  # fmt: skip


def merge_dashboard_rows(
    report: Mapping[str, Any], fresh: Sequence[DashboardRow], previous: Sequence[DashboardRow], ledger: Ledger
) -> list[DashboardRow]:
    """The dashboard's rows after this report: its own rows, plus the earlier rows it does not cover.

    A complete report (``selection`` ``complete``) replaces every row of its kind; a partial one only
    its own, and never removes another (except entries the base branch's ledger no longer has). A
    rate-limited row that was never checked keeps its earlier row.
    """
    earlier = {(r.kind, r.id): r for r in previous}
    unchecked = _unchecked(report)
    rows = {(r.kind, r.id): earlier.get((r.kind, r.id), r) if r.id in unchecked else r for r in fresh}
    for key, row in earlier.items():
        if key not in rows and not covers(report, row.kind, row.id):
            rows[key] = row
    in_ledger = [e.id for e in ledger.entries]
    entries = [rows["entries", i] for i in in_ledger if ("entries", i) in rows]
    workarounds = [r for (kind, _), r in rows.items() if kind == "workarounds"]
    return [*entries, *workarounds]


def dashboard_body(
    report: Mapping[str, Any],
    ledger: Ledger,
    verification: Mapping[str, Verification],
    pr_links: Mapping[str, str],
    by_hand: Mapping[str, str] | None = None,
    previous_body: str | None = None,
) -> str:
    """The dashboard issue: every audited entry, what upstream says, when it was last re-run, the verdict
    and the shrink PR; above the table, what needs a human (reverse direction, changed, human, and
    removable workarounds that must be deleted by hand). ``by_hand``: workaround id → why.
    ``previous_body``: the dashboard as it stands, whose rows this report does not cover are kept."""
    fresh = dashboard_rows(report, ledger, verification, by_hand)
    rows = merge_dashboard_rows(report, fresh, parse_dashboard_rows(previous_body), ledger)
    entries = [r for r in rows if r.kind == "entries"]
    workarounds = [r for r in rows if r.kind == "workarounds"]
    attention = [line for r in rows for line in r.attention]
    partial = " (partial: rate limited)" if report.get("partial") else ""
    when = report.get("generated_at", "unknown")
    if is_complete(report, "entries"):
        source = f"Ledger state from the audit of {when}{partial}"
    else:
        covered = ", ".join(f"`{i}`" for i in report["selection"]["entries"]) or "no entry"
        source = f"Rows of {covered} from the audit of {when}{partial}; the other rows are from earlier audits"
    lines = [
        DASHBOARD_MARKER,
        f"{source}, {len(entries)} entries. {DASHBOARD_SIGNATURE}.",
        "",
        "## Needs a human",
        "",
        *(attention or ["Nothing."]),
        "",
        "## Entries",
        "",
        "| entry | models | upstream | last verification | verdict | shrink PR |",
        "| --- | --- | --- | --- | --- | --- |",
        *(f"| `{r.id}` | {' | '.join(r.cells)} | {pr_links.get(r.id, '—')} |" for r in entries),
    ]
    if workarounds:
        lines += [
            "",
            "## Registered workarounds",
            "",
            "| workaround | backend | upstream | probed on | verdict | shrink PR |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
    for row in workarounds:
        link = pr_links.get(row.id) or ("delete by hand" if row.by_hand else "—")
        lines.append(f"| `{row.id}` | {' | '.join(row.cells)} | {link} |")
    block = json.dumps([r.as_json() for r in rows], sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    safe = block.replace("<", "\\u003c").replace(">", "\\u003e")
    lines += [*bump_section(previous_body), "", f"<!-- exportbot:dashboard-rows {safe} -->"]
    return "\n".join(lines) + "\n"


def bump_section(body: str | None) -> list[str]:
    """The dependency-bump section of a dashboard body (blank line first), or [] when it has none."""
    text = body or ""
    start, end = text.find(BUMPS_START), text.find(BUMPS_END)
    if start == -1 or end < start:
        return []
    return ["", *text[start : end + len(BUMPS_END)].splitlines()]


def with_bump_row(body: str, group: str, line: str | None) -> str:
    """``body`` with the dependency-bump row of ``group`` set to ``line`` (None: removed), the other groups'
    rows and every other byte kept; the section is added before the hidden rows block when missing."""
    marker = _BUMP_ROW.format(group=group)
    section = bump_section(body)
    rows = [row for row in section[3:-1] if row.strip() and marker not in row]
    if line is not None:
        rows = sorted([*rows, f"- {marker} {line}"])
    new = ["", BUMPS_START, "## Dependency bumps", "", *rows, BUMPS_END] if rows else []
    if section:
        old = "\n".join(section)
        return body.replace(old, "\n".join(new), 1)
    at = body.find("<!-- exportbot:dashboard-rows ")
    head, tail = (body[:at].rstrip("\n"), "\n\n" + body[at:]) if at != -1 else (body.rstrip("\n"), "\n")
    return head + "\n" + "\n".join(new) + tail
