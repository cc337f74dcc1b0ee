"""``exportbot audit``: is each workaround in the ledger still needed?

Data flows one way: ledger → upstream state (one request per distinct issue) → plan (bot.plan, pure)
→ re-run of the due entries without their workaround (bot.rerun, isolated subprocesses) → verdicts
(bot.verdict, pure) → report (terminal table, JSON, Markdown job summary) and optionally
``registry/verified.toml`` (bot.verification).

Every entry appears in every report, with why it is or is not eligible, so a bot that stops proposing
removals says why instead of going quiet. When GitHub's rate limit runs out mid-run (reset later than
the tracker will wait), querying stops and the report is marked ``partial``: the entries not yet asked
get verdict ``unknown`` ("rate limited until ...") and are not re-run.

Exit codes: 0 nothing removable and nothing needs attention (``not-due``, ``still-needed``,
``unknown`` only); 3 some entry is removable; 4 some entry is ``changed`` or needs a ``human`` (this
wins over 3: a human should look before a removal is proposed from the same run); 1 errors (bad
ledger, pins, verification file or snapshot; export harness crash); 2 bad options.
"""

from __future__ import annotations

import datetime
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bot.errors import UsageProblem, report_errors
from bot.pins import find_pin_file, read_pins
from bot.plan import Plan, describe_state, parse_candidate, plan_entry
from bot.rerun import DEFAULT_RUNS, DEFAULT_TIMEOUT, RunExport, rerun_entry, subprocess_runner
from bot.tracker import (
    RateLimited,
    SnapshotError,
    Tracker,
    UpstreamState,
    UpstreamTracker,
    write_snapshot,
)
from bot.verdict import CHANGED, HUMAN, REMOVABLE, RERUN_VERDICTS, UNKNOWN, VERDICTS, Verdict, verdict
from bot.verification import Verification, exporter_version, load_verification, save_verification
from exporters.ledger import Ledger, LedgerEntry, default_registry_dir, load_ledger

REPORT_SCHEMA = 1
EXIT_NOTHING = 0
EXIT_REMOVABLE = 3
EXIT_ATTENTION = 4


@dataclass(frozen=True)
class EntryReport:
    """One entry's row: what upstream said, the plan, the verdict and its evidence."""

    entry: LedgerEntry
    state: UpstreamState | None
    plan: Plan | None  # None when the entry was never planned (rate limited before its turn)
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        state = self.state
        return {
            "id": self.entry.id,
            "list": self.entry.list_name,
            "models": list(self.entry.models),
            "backend": self.entry.backend,
            "scope": self.entry.scope,
            "upstream": self.entry.upstream,
            "upstream_state": {
                "summary": describe_state(state) if self.plan else UNKNOWN,
                "state": state.state if state else None,
                "state_reason": state.state_reason if state else None,
                "merged": state.merged if state else None,
                "closed_at": state.closed_at if state else None,
                "reachable": state.reachable if state else None,
                "error": state.error if state else None,
            },
            "due": bool(self.plan and self.plan.due),
            "due_reasons": list(self.plan.reasons) if self.plan else [],
            "moved_pins": {k: list(v) for k, v in self.plan.moved_pins.items()} if self.plan else {},
            "verdict": self.verdict.verdict,
            "reasons": list(self.verdict.reasons),
            "evidence": list(self.verdict.evidence),
        }


@dataclass
class AuditReport:
    """The whole run; :meth:`as_dict` is the JSON artifact (schema in docs/audit-report.md)."""

    entries: list[EntryReport]
    pins: dict[str, str]
    exporter_version: str
    runs: int
    candidate: str | None = None
    rate_limited_until: str | None = None
    generated_at: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )

    @property
    def partial(self) -> bool:
        return self.rate_limited_until is not None

    def counts(self) -> dict[str, int]:
        found = Counter(e.verdict.verdict for e in self.entries)
        return {name: found.get(name, 0) for name in VERDICTS}

    def exit_code(self) -> int:
        counts = self.counts()
        if counts[CHANGED] or counts[HUMAN]:
            return EXIT_ATTENTION
        return EXIT_REMOVABLE if counts[REMOVABLE] else EXIT_NOTHING

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "generated_at": self.generated_at,
            "partial": self.partial,
            "rate_limited_until": self.rate_limited_until,
            "exporter_version": self.exporter_version,
            "pins": self.pins,
            "candidate": self.candidate,
            "runs": self.runs,
            "counts": self.counts(),
            "exit_code": self.exit_code(),
            "entries": [e.as_dict() for e in self.entries],
        }


def run_audit(
    ledger: Ledger,
    tracker: UpstreamTracker,
    pins: Mapping[str, str],
    verification: Mapping[str, Verification],
    run_export: RunExport,
    *,
    entry_ids: Sequence[str] = (),
    force_all: bool = False,
    candidate: str | None = None,
    runs: int = DEFAULT_RUNS,
) -> AuditReport:
    """Audit the ledger (or only ``entry_ids``, which are then forced); never raises for a rate limit."""
    entries = [ledger.by_id(i) for i in entry_ids] if entry_ids else list(ledger.entries)
    rows: list[EntryReport] = []
    limited: RateLimited | None = None
    for entry in entries:
        if limited is not None:
            reason = f"rate limited until {limited.reset_at:%Y-%m-%dT%H:%M:%SZ}; not checked in this run"
            rows.append(EntryReport(entry, None, None, Verdict(entry.id, UNKNOWN, [reason])))
            continue
        try:
            state = tracker.state(entry.upstream) if entry.upstream else None
        except RateLimited as error:
            limited = error
            reason = f"rate limited until {error.reset_at:%Y-%m-%dT%H:%M:%SZ}; not checked in this run"
            rows.append(EntryReport(entry, None, None, Verdict(entry.id, UNKNOWN, [reason])))
            continue
        force = force_all or bool(entry_ids)
        plan = plan_entry(entry, state, pins, verification, force=force, candidate=candidate)
        outcomes = rerun_entry(entry, run_export, runs) if plan.due else []
        rows.append(EntryReport(entry, state, plan, verdict(entry, plan, state, outcomes)))
    until = f"{limited.reset_at:%Y-%m-%dT%H:%M:%SZ}" if limited else None
    return AuditReport(rows, dict(pins), exporter_version(), runs, candidate, until)


def verification_records(report: AuditReport, today: datetime.date) -> list[Verification]:
    """What to remember: entries whose verdict came from a re-run, with the stack they ran against."""
    return [
        Verification(
            entry_id=row.entry.id,
            verified_on=today,
            versions={k: v for k, v in row.plan.versions.items() if v is not None},
            exporter_version=report.exporter_version,
            verdict=row.verdict.verdict,
            upstream_state=describe_state(row.state),
        )
        for row in report.entries
        if row.plan is not None and row.verdict.verdict in RERUN_VERDICTS
    ]


# ── Rendering ──
def _due_text(row: EntryReport) -> str:
    if row.plan is None:
        return "—"
    return ("due: " if row.plan.due else "not due: ") + "; ".join(row.plan.reasons)


def render_table(report: AuditReport) -> Table:
    title = f"audit of {len(report.entries)} ledger entries" + (
        " (PARTIAL: rate limited)" if report.partial else ""
    )
    table = Table(title=title)
    for column in ("entry", "models", "upstream", "due / why", "verdict"):
        table.add_column(column, overflow="fold")
    for row in report.entries:
        upstream = describe_state(row.state) if row.plan else UNKNOWN
        table.add_row(
            row.entry.id,
            "\n".join(row.entry.models),
            f"{upstream}\n{row.entry.upstream or ''}".strip(),
            _due_text(row),
            f"{row.verdict.verdict}\n" + "\n".join(row.verdict.reasons),
        )
    return table


def render_markdown(report: AuditReport) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items() if n)
    lines = [
        "## exportbot audit"
        + (
            " (partial: rate limited until " + report.rate_limited_until + ")"
            if report.rate_limited_until
            else ""
        ),
        "",
        f"{len(report.entries)} entries: {counts or 'none'}.",
        "",
        "| entry | models | upstream | due / why | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    for row in report.entries:
        upstream = describe_state(row.state) if row.plan else UNKNOWN
        link = f"[{upstream}]({row.entry.upstream})" if row.entry.upstream else upstream
        verdict_text = f"**{row.verdict.verdict}**: " + "; ".join(row.verdict.reasons)
        lines.append(
            f"| {cell(row.entry.id)} | {cell(', '.join(row.entry.models))} | {link} | "
            f"{cell(_due_text(row))} | {cell(verdict_text)} |"
        )
    return "\n".join(lines) + "\n"


# ── Command ──
def _make_tracker(
    tracker_file: Path | None, github_url: str | None, token_env: str | None, web_host: str | None,
    previous: Path | None,
) -> UpstreamTracker:  # fmt: skip
    if tracker_file is not None:
        return Tracker.from_snapshot(tracker_file)
    return Tracker.from_env(
        base_url=github_url, token_env=token_env, web_host=web_host, previous_snapshot=previous
    )


@click.command("audit")
@click.option(
    "--registry",
    "registry_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Ledger directory [default: $EXPORTBOT_REGISTRY, else registry/].",
)
@click.option(
    "--pins",
    "pin_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Pin file [default: constraints.txt next to the registry or above it].",
)
@click.option(
    "--tracker",
    "tracker_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Answer upstream questions from this snapshot, offline (e.g. registry/upstream-snapshot.json).",
)
@click.option(
    "--github-url",
    default=None,
    metavar="URL",
    help="GitHub API base URL (Enterprise: https://HOST/api/v3) [default: api.github.com].",
)
@click.option(
    "--web-host",
    default=None,
    metavar="HOST",
    help="Web host whose issue URLs that API answers for [default: derived from --github-url].",
)
@click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help="Environment variable holding the token [default: GITHUB_TOKEN, then GH_TOKEN].",
)
@click.option("--all", "force_all", is_flag=True, help="Re-run every entry, due or not.")
@click.option("--entry", "entry_ids", multiple=True, metavar="ID", help="Audit (and re-run) only this entry.")
@click.option(
    "--candidate",
    default=None,
    metavar="PKG==VER",
    help="Treat entries whose stack has PKG as due and record the candidate in the report.",
)
@click.option(
    "--runs",
    type=click.IntRange(1),
    default=DEFAULT_RUNS,
    show_default=True,
    help="Re-runs per model class and shape mode.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds before one re-run export is killed (status timeout).",
)
@click.option(
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the JSON report (docs/audit-report.md) here.",
)
@click.option(
    "--markdown",
    "markdown_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the Markdown summary here (always appended to $GITHUB_STEP_SUMMARY when set).",
)
@click.option(
    "--update-verification",
    is_flag=True,
    help="Record re-run verdicts and versions in <registry>/verified.toml.",
)
@click.option(
    "--write-snapshot",
    "snapshot_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the upstream states looked up to this snapshot file (reuses its ETags if present).",
)
@report_errors
def audit_command(
    registry_dir: Path | None, pin_file: Path | None, tracker_file: Path | None, github_url: str | None,
    web_host: str | None, token_env: str | None, force_all: bool, entry_ids: tuple[str, ...],
    candidate: str | None, runs: int, timeout: float, json_file: Path | None, markdown_file: Path | None,
    update_verification: bool, snapshot_file: Path | None,
) -> None:  # fmt: skip
    """Check every ledger entry: upstream state, pins moved, re-run without the workaround, verdict.

    Exit 0 nothing to do, 3 some entry removable, 4 some entry changed or needs a human, 1 errors.
    """
    registry_dir = registry_dir or default_registry_dir()
    if candidate is not None:
        try:
            parse_candidate(candidate)
        except ValueError as error:
            raise UsageProblem(str(error)) from None
    ledger = load_ledger(registry_dir)
    unknown_ids = [i for i in entry_ids if i not in {e.id for e in ledger.entries}]
    if unknown_ids:
        raise UsageProblem(f"no ledger entry {', '.join(map(repr, unknown_ids))} in {registry_dir}")
    pins = read_pins(pin_file or find_pin_file(registry_dir))
    verification = load_verification(registry_dir)
    previous = snapshot_file if snapshot_file is not None and snapshot_file.is_file() else None
    try:
        tracker = _make_tracker(tracker_file, github_url, token_env, web_host, previous)
    except SnapshotError as error:
        raise UsageProblem(str(error)) from None
    report = run_audit(
        ledger, tracker, pins, verification, subprocess_runner(timeout),
        entry_ids=entry_ids, force_all=force_all, candidate=candidate, runs=runs,
    )  # fmt: skip

    Console().print(render_table(report))
    if candidate is not None:
        click.echo(f"note: candidate {candidate} is recorded only; re-runs used the pinned versions.")
    if json_file is not None:
        json_file.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    if markdown_file is not None:
        markdown_file.write_text(markdown, encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as handle:
            handle.write(markdown)
    if snapshot_file is not None:
        write_snapshot(tracker, snapshot_file)
    if update_verification:
        today = datetime.datetime.now(datetime.UTC).date()
        keep = {e.id for e in ledger.entries}
        save_verification(registry_dir, verification_records(report, today), keep_ids=keep)
    click.get_current_context().exit(report.exit_code())
