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

from bot.audit.candidates import Candidate
from bot.audit.drafts import LINKED, STATUSES, new_issue_url
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
    tracking: TrackingView | None = None,
) -> str:
    """The dashboard issue: every audited entry, what upstream says, when it was last re-run, the verdict
    and the shrink PR; above the table, what needs a human (reverse direction, changed, human, and
    removable workarounds that must be deleted by hand). ``by_hand``: workaround id → why.
    ``previous_body``: the dashboard as it stands, whose rows this report does not cover are kept.
    ``tracking``: the items without an upstream issue (None: that section stays as it stands)."""
    fresh = dashboard_rows(report, ledger, verification, by_hand)
    rows = merge_dashboard_rows(report, fresh, parse_dashboard_rows(previous_body), ledger)
    entries = [r for r in rows if r.kind == "entries"]
    workarounds = [r for r in rows if r.kind == "workarounds"]
    attention = [line for r in rows for line in r.attention]
    if tracking is not None:
        attention += [f"- `{r.id}`: stale upstream draft: {_cell(r.reason)}" for r in tracking.rows if r.status == "stale"]
        attention += [f"- `{c.id}`: ticked link {c.url} not proposed: {_cell(c.note)}" for c in tracking.checks
                      if not c.accepted]  # fmt: skip
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
    section = (previous_upstream_section(previous_body) if tracking is None else
               upstream_section(tracking.rows, previous_body, tracking.repository, tracking.branch, tracking.checks))  # fmt: skip
    lines += [*section, *bump_section(previous_body), "", f"<!-- exportbot:dashboard-rows {safe} -->"]
    return "\n".join(lines) + "\n"


def kept_section(body: str | None, start_marker: str, end_marker: str) -> list[str]:
    """The section of a dashboard body between two markers, as it stands (blank line first), or [] when it has
    none: what a run that does not rewrite that section keeps."""
    text = body or ""
    start, end = text.find(start_marker), text.find(end_marker)
    if start == -1 or end < start:
        return []
    return ["", *text[start : end + len(end_marker)].splitlines()]


def bump_section(body: str | None) -> list[str]:
    """The dependency-bump section of a dashboard body (blank line first), or [] when it has none."""
    return kept_section(body, BUMPS_START, BUMPS_END)


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


# ── Items not tracked upstream: drafts, one-click filing, candidates to tick ──
UPSTREAM_START, UPSTREAM_END = "<!-- exportbot:upstream -->", "<!-- exportbot:upstream-end -->"
_LINK_LINE = re.compile(r"^[ \t]*- \[([ xX])\] <!-- exportbot:link (\S+) (\S+) -->", re.MULTILINE)
URL_BUDGET = 30_000  # characters of prefilled new-issue URLs in one dashboard (GitHub caps a body at 65,536)


@dataclass(frozen=True)
class TrackingRow:
    """One item without an upstream issue, as the dashboard shows it (built by bot.cli.upstream.tracking_rows)."""

    id: str
    kind: str  # "entry" | "workaround"
    detail: str
    status: str  # bot.audit.drafts: verified, internal, unverified, stale, nothing
    reason: str
    repository: str | None
    draft: str | None = None  # repository path of the draft page
    title: str | None = None
    body: str | None = None  # the issue body a prefilled new-issue URL carries
    candidates: tuple[Candidate, ...] = ()


@dataclass(frozen=True)
class TrackingView:
    """What the dashboard's upstream section shows: the rows, this run's link checks, where drafts are linked."""

    rows: tuple[TrackingRow, ...]
    repository: str | None  # owner/name the draft links point into
    branch: str
    checks: tuple[LinkCheck, ...] = ()


@dataclass(frozen=True)
class LinkCheck:
    """A link a maintainer asked for (a ticked candidate, ``exportbot upstream link``) and what GitHub said."""

    id: str
    url: str
    accepted: bool
    note: str  # accepted: "open issue: TITLE"; refused: why
    title: str = ""
    state: str = ""
    kind: str = ""  # "issue" | "pull"


def ticked_links(body: str | None) -> list[tuple[str, str]]:
    """(item id, URL) of every ticked link line of a dashboard body, in order, each once."""
    found = [(m.group(2), m.group(3)) for m in _LINK_LINE.finditer(body or "") if m.group(1) in "xX"]
    return list(dict.fromkeys(found))


def with_link_request(body: str, item_id: str, url: str, note: str) -> str:
    """``body`` with the link line of (item, URL) ticked, added under the upstream section when missing (``exportbot
    upstream link``): the next run of ``exportbot pr`` checks and proposes it. Every other byte kept."""
    for match in _LINK_LINE.finditer(body):
        if (match.group(2), match.group(3)) == (item_id, url):
            start = match.start(1)
            return body[:start] + "x" + body[start + 1 :]
    line = f"- [x] <!-- exportbot:link {item_id} {url} --> `{item_id}` → {url} ({note})"
    end = body.find(UPSTREAM_END)
    if end == -1:
        at = body.find("<!-- exportbot:dashboard-rows ")
        head, tail = (body[:at].rstrip("\n"), "\n\n" + body[at:]) if at != -1 else (body.rstrip("\n"), "\n")
        return f"{head}\n\n{UPSTREAM_START}\n## Not tracked upstream\n\n{line}\n{UPSTREAM_END}{tail}"
    return body[:end] + line + "\n" + body[end:]


def _draft_link(row: TrackingRow, repository: str | None, branch: str) -> str:
    if row.draft is None:
        return ""
    where = f"https://github.com/{repository}/blob/{branch}/{row.draft}" if repository else row.draft
    return f"[{row.draft.rsplit('/', 1)[-1]}]({where})"


def upstream_section(
    rows: Sequence[TrackingRow], previous_body: str | None, repository: str | None, branch: str,
    checks: Sequence[LinkCheck] = (),
) -> list[str]:  # fmt: skip
    """The dashboard's "Not tracked upstream" section: per item its status, its draft, a one-click new-issue link
    for a verified draft (title and body prefilled while the URLs stay within :data:`URL_BUDGET` and GitHub's
    URL limit; past that, the link is the draft file) and the candidates ``find`` saw, each with a checkbox.
    Ticks and requested links of ``previous_body`` are kept; what this run did with each is said beside it."""
    ticked = set(ticked_links(previous_body))
    by_link = {(c.id, c.url): c for c in checks}
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES if status != LINKED}
    lines = [
        "", UPSTREAM_START, "## Not tracked upstream", "",
        f"{len(rows)} items have no upstream issue: " + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". Tick a candidate to link it (the next run checks that it is an issue or pull request of the expected "
          "repository and proposes `upstream = URL` in the shrink PR), or run `exportbot upstream link ID URL`.",
        "",
    ]  # fmt: skip
    budget = URL_BUDGET
    for row in rows:
        draft = _draft_link(row, repository, branch)
        parts = [f"**{row.status}**" + (f" draft {draft}" if draft else "")]
        if row.status == "verified" and row.repository and row.title and row.body is not None:
            url = new_issue_url(row.repository, row.title, row.body)
            if url is not None and len(url) <= budget:
                budget -= len(url)
                parts.append(f"[file it in {row.repository}]({url})")
            elif draft:
                parts.append(f"file it in {row.repository}: too long for a prefilled link, copy {draft}")
        if row.status != "verified":
            parts.append(_cell(row.reason))
        lines.append(f"- **`{row.id}`** ({row.kind}, {_cell(row.detail)}): " + " · ".join(parts))
        shown = set()
        for candidate in row.candidates:
            key = (row.id, candidate.url)
            shown.add(key)
            box = "x" if key in ticked else " "
            lines.append(f"  - [{box}] <!-- exportbot:link {row.id} {candidate.url} --> [{candidate.short}]"
                         f"({candidate.url}) ({candidate.state}, score {candidate.score:.2f}): {_cell(candidate.title)}"
                         + _check_note(by_link.get(key)))  # fmt: skip
        for item_id, url in sorted(ticked):
            if item_id == row.id and (item_id, url) not in shown:
                lines.append(f"  - [x] <!-- exportbot:link {item_id} {url} --> {url} (requested)"
                             + _check_note(by_link.get((item_id, url))))  # fmt: skip
    return [*lines, UPSTREAM_END]


def _check_note(check: LinkCheck | None) -> str:
    if check is None:
        return ""
    return f" — {'proposed in the shrink PR' if check.accepted else 'not linked: ' + _cell(check.note)}"


def previous_upstream_section(body: str | None) -> list[str]:
    """The upstream section of a dashboard body as it stands (blank line first), or [] when it has none."""
    return kept_section(body, UPSTREAM_START, UPSTREAM_END)
