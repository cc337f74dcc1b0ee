"""``exportbot audit``: is each workaround in the ledger (and, with ``--workarounds``, in the registry) still needed?

Data flows one way: ledger → upstream state (one request per distinct issue) → plan (bot.plan, pure)
→ re-run of the due entries without their workaround (bot.rerun, isolated subprocesses) → verdicts
(bot.verdict, pure) → report (terminal table, JSON, Markdown job summary) and optionally
``registry/verified.toml`` (bot.verification).

Every entry appears in every report, with why it is or is not eligible, so a bot that stops proposing
removals says why instead of going quiet. When GitHub's rate limit runs out mid-run (reset later than
the tracker will wait), querying stops and the report is marked ``partial``: the entries not yet asked
get verdict ``unknown`` ("rate limited until ...") and are not re-run.

With ``--workarounds`` every registered workaround that carries ``upstream`` or ``dependency`` metadata
(or is named by ``--entry``) is audited the same way, as a :class:`bot.plan.Subject`: same triggers,
same verdicts, re-run in isolated processes with ``--without NAME`` (only that workaround disabled) on at
most ``--probes`` exports it fired in, taken from the workaround index (bot/workaround_index.py). A
workaround records no failure regex: any failure without it means still needed, and the error is shown.
Its rows go to ``workarounds`` in the JSON report (``entries`` stays ledger-only, so a consumer that
edits the ledger never sees them) and its verifications to ``registry/verified-workarounds.toml``.

With ``--candidate PKG==VER`` the re-runs happen in an isolated environment holding that release, and
a sample of exports that pass at the pins is re-run there too (bot.candidate): the report says what the
release would make removable and what it would break.

Exit codes: 0 nothing removable and nothing needs attention (``not-due``, ``still-needed``,
``unknown`` only); 3 some entry is removable (or ``superseded``); 4 some entry is ``changed``, ``not-reproduced`` or needs a
``human`` (this wins over 3: a human should look before a removal is proposed from the same run); 5 the candidate
breaks an export that passes at the pins (wins over 3 and 4); 1 errors (bad ledger, pins,
verification file or snapshot; export harness crash; a candidate that cannot be installed); 2 bad
options, or an interpreter for the re-runs that does not hold the pinned versions of an entry's stack.

Before the re-runs of any entry, the interpreter that runs them is asked for its versions of the entry's
stack (bot.environment); they must be the pins (or, with ``--candidate``, the isolated environment
bot.venvs built from the pins is used). Outcomes record the versions they ran with, and
``verified.toml`` records those, never the pin file's word.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.candidate import (
    CandidateCheck,
    describe_row,
    prepare_environment,
    run_candidate_check,
)
from bot.environment import EnvironmentCheck
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.json_output import emit_json, json_file_option, on_stdout
from bot.options import (
    github_url_option,
    index_option,
    pins_option,
    probes_option,
    registry_option,
    token_env_option,
    venv_cache_option,
)
from bot.pins import find_pin_file, read_pins
from bot.plan import Plan, Subject, describe_state, entry_subject, parse_candidate, plan_entry
from bot.progress import CountedProgress
from bot.regression_sample import DEFAULT_SAMPLE
from bot.report import REPORT_SCHEMA, ReportIdentity, audit_selection, report_identity
from bot.rerun import (
    DEFAULT_RUNS,
    DEFAULT_SUPERSESSION_PROBES,
    DEFAULT_TIMEOUT,
    ProbeRunner,
    RunExport,
    SupersessionRunner,
    probe_superseders,
    rerun_subject,
    subprocess_runner,
)
from bot.tracker import (
    RateLimited,
    SnapshotError,
    Tracker,
    UpstreamState,
    UpstreamTracker,
    write_snapshot,
)
from bot.venvs import DEFAULT_CACHE
from bot.verdict import (
    NEEDS_HUMAN,
    NOT_REPRODUCED,
    REMOVABLE,
    REMOVAL_VERDICTS,
    RERUN_VERDICTS,
    UNKNOWN,
    VERDICTS,
    Verdict,
    verdict,
)
from bot.verification import (
    WORKAROUNDS_VERIFIED_FILE,
    Verification,
    exporter_version,
    load_verification,
    save_verification,
)
from bot.workaround_index import (
    DEFAULT_JSON,
    DEFAULT_PROBE_LIMIT,
    WorkaroundIndexError,
    load_index,
    probe_subject,
)
from bot.workaround_removal import REPO_ROOT, defining_file, removal_blocker
from exporters.ledger import Ledger, LedgerEntry, default_registry_dir, load_ledger
from exporters.utils import Workaround

EXIT_NOTHING = 0
EXIT_REMOVABLE = 3
EXIT_ATTENTION = 4
EXIT_REGRESSION = 5


@dataclass(frozen=True)
class EntryReport:
    """One entry's row: what upstream said, the plan, the verdict and its evidence."""

    entry: LedgerEntry
    state: UpstreamState | None
    plan: Plan | None  # None when the entry was never planned (rate limited before its turn)
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.entry.id,
            "list": self.entry.list_name,
            "models": list(self.entry.models),
            "backend": self.entry.backend,
            "scope": self.entry.scope,
            "upstream": self.entry.upstream,
            **_checked_dict(self.state, self.plan, self.verdict),
        }


@dataclass(frozen=True)
class WorkaroundReport:
    """One registered workaround's row: as :class:`EntryReport`, with the exports it was probed on."""

    workaround: Workaround
    subject: Subject
    state: UpstreamState | None
    plan: Plan | None
    verdict: Verdict
    removal: str | None = None  # removable but not self-contained: why the shrink PR cannot delete it

    @property
    def source(self) -> str:
        """Repository path of the defining file, as the shrink PR addresses it on the base branch."""
        path = defining_file(self.workaround.func)
        return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.workaround.name,
            "kind": self.workaround.kind,
            "backend": self.workaround.backend,
            "source": self.source,
            "removal": self.removal,
            "exports": [
                {"model": e.model, "backend": e.backend, "mode": e.mode} for e in self.subject.exports
            ],
            "upstream": self.workaround.upstream,
            "dependency": self.workaround.dependency,
            **_checked_dict(self.state, self.plan, self.verdict),
        }


def _checked_dict(state: UpstreamState | None, plan: Plan | None, verdict_: Verdict) -> dict[str, Any]:
    """The report fields shared by ledger entries and workarounds: upstream, plan, verdict, evidence."""
    return {
        "upstream_state": {
            "summary": describe_state(state) if plan else UNKNOWN,
            "state": state.state if state else None,
            "state_reason": state.state_reason if state else None,
            "merged": state.merged if state else None,
            "closed_at": state.closed_at if state else None,
            "reachable": state.reachable if state else None,
            "error": state.error if state else None,
        },
        "due": bool(plan and plan.due),
        "due_reasons": list(plan.reasons) if plan else [],
        "moved_pins": {k: list(v) for k, v in plan.moved_pins.items()} if plan else {},
        "verdict": verdict_.verdict,
        "reasons": list(verdict_.reasons),
        "evidence": list(verdict_.evidence),
        "superseded_by": list(verdict_.superseded_by),
        "supersession": list(verdict_.supersession),
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
    workarounds: list[WorkaroundReport] = field(default_factory=list)
    candidate_check: CandidateCheck | None = None
    identity: ReportIdentity | None = None  # repository, base commit, registry digest, selection (bot.report)
    generated_at: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )

    @property
    def partial(self) -> bool:
        return self.rate_limited_until is not None

    def counts(self) -> dict[str, int]:
        """Verdicts of the ledger entries."""
        return _count(self.entries)

    def workaround_counts(self) -> dict[str, int]:
        return _count(self.workarounds)

    def exit_code(self) -> int:
        """From the ledger entries and the workarounds together."""
        counts = Counter(self.counts()) + Counter(self.workaround_counts())
        if self.candidate_check is not None and self.candidate_check.regressions:
            return EXIT_REGRESSION
        if any(counts[name] for name in NEEDS_HUMAN):
            return EXIT_ATTENTION
        return EXIT_REMOVABLE if any(counts[name] for name in REMOVAL_VERDICTS) else EXIT_NOTHING

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
            "workaround_counts": self.workaround_counts(),
            "workarounds": [w.as_dict() for w in self.workarounds],
            "candidate_check": self.candidate_check.as_dict() if self.candidate_check else None,
        } | (self.identity.as_dict() if self.identity else {})

    def candidate_removable(self) -> list[str]:
        """Entries and workarounds removable when re-run at the candidate."""
        return [
            row.verdict.entry_id
            for row in [*self.entries, *self.workarounds]
            if row.plan is not None and row.plan.candidate and row.verdict.verdict == REMOVABLE
        ]


def _count(rows: Sequence[EntryReport | WorkaroundReport]) -> dict[str, int]:
    found = Counter(row.verdict.verdict for row in rows)
    return {name: found.get(name, 0) for name in VERDICTS}


Checked = tuple[UpstreamState | None, Plan | None, Verdict]


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
    workarounds: Sequence[tuple[Workaround, Subject]] = (),
    workaround_verification: Mapping[str, Verification] | None = None,
    probe_runner: ProbeRunner | None = None,
    entry_runner: Callable[[str], RunExport] | None = None,
    check_environment: Callable[[Subject], Mapping[str, str]] | None = None,
    on_rerun: Callable[[str, int], None] = lambda _subject_id, _exports: None,
    supersession_runner: SupersessionRunner | None = None,
    supersession_probes: int = DEFAULT_SUPERSESSION_PROBES,
) -> AuditReport:
    """Audit the ledger, then ``workarounds`` (each with its subject, probed by ``probe_runner(name)``).

    ``entry_runner(entry_id)`` gives the runner re-running one ledger entry (its reproducer: the command
    line passes ``--repro ENTRY_ID``); without it ``run_export`` re-runs every entry.
    ``check_environment(subject)`` runs before a subject's re-runs: it raises when the interpreter does not
    hold the stack's pins and returns the versions it holds, which outcomes that recorded none (a timeout
    kills the child before it writes) take as the versions they ran with.
    ``entry_ids`` (ledger ids and workaround names) restricts the audit to those, which are then forced.
    ``on_rerun(subject_id, count)`` is told before a subject's ``count`` re-run exports start (progress).
    ``supersession_runner(entry_id, names)`` re-runs an entry's reproducer with those workarounds disabled:
    an entry whose every run passed with nothing moved (``not-reproduced``) gets up to
    ``supersession_probes`` of them (bot.rerun.probe_superseders), and ``superseded`` when they prove that
    registered workarounds took its job over.
    Never raises for a rate limit: once limited, every later entry and workaround is ``unknown``.
    """
    selected = set(entry_ids)
    unknown = selected - {e.id for e in ledger.entries} - {w.name for w, _ in workarounds}
    if unknown:
        raise KeyError(", ".join(sorted(unknown)))
    entries = [e for e in ledger.entries if e.id in selected] if selected else list(ledger.entries)
    chosen = [(w, s) for w, s in workarounds if w.name in selected] if selected else list(workarounds)
    if chosen and probe_runner is None:
        raise ValueError("auditing workarounds needs a probe_runner")
    limited: RateLimited | None = None

    def check(
        subject: Subject, records: Mapping[str, Verification], runner: Callable[[], RunExport]
    ) -> Checked:
        nonlocal limited
        if limited is None:
            try:
                state = tracker.state(subject.upstream) if subject.upstream else None
            except RateLimited as error:
                limited = error
        if limited is not None:
            reason = f"rate limited until {limited.reset_at:%Y-%m-%dT%H:%M:%SZ}; not checked in this run"
            return None, None, Verdict(subject.id, UNKNOWN, [reason])
        force = force_all or bool(selected)
        plan = plan_entry(subject, state, pins, records, force=force, candidate=candidate)
        if plan.due and not subject.exports:
            reason = (
                "due, but it fired in no passing export of the workaround index: nothing to re-run "
                "(sweep a class it fires in, then `exportbot workarounds index`)"
            )
            return state, plan, Verdict(subject.id, UNKNOWN, [*plan.reasons, reason])
        outcomes = []
        if plan.due:
            checked = check_environment(subject) if check_environment is not None else {}
            on_rerun(subject.id, len(subject.exports) * runs)
            outcomes = [
                o if o.get("versions") or not checked else o | {"versions": dict(checked)}
                for o in rerun_subject(subject, runner(), runs)
            ]
        result = verdict(subject, plan, state, outcomes)
        if result.verdict == NOT_REPRODUCED and supersession_runner is not None and supersession_probes:
            on_rerun(subject.id, supersession_probes)  # at most that many; the bar may end short of its total
            probes = probe_superseders(
                subject, outcomes, lambda names: supersession_runner(subject.id, names), supersession_probes
            )
            result = verdict(subject, plan, state, outcomes, probes)
        return state, plan, result

    def entry_run(entry_id: str) -> RunExport:
        return entry_runner(entry_id) if entry_runner is not None else run_export

    rows = [
        EntryReport(e, *check(entry_subject(e), verification, lambda e=e: entry_run(e.id))) for e in entries
    ]
    probed = []
    for w, s in chosen:
        checked = check(s, workaround_verification or {}, lambda w=w: probe_runner(w.name))
        blocker = removal_blocker(w.func, w.name) if checked[2].verdict == REMOVABLE else None
        probed.append(WorkaroundReport(w, s, *checked, removal=blocker))
    until = f"{limited.reset_at:%Y-%m-%dT%H:%M:%SZ}" if limited else None
    return AuditReport(rows, dict(pins), exporter_version(), runs, candidate, until, probed)


def verification_records(
    report: AuditReport, today: datetime.date, *, workarounds: bool = False
) -> list[Verification]:
    """What to remember: entries (or workarounds) whose verdict came from a re-run, with the versions of
    their stack the re-runs recorded (what ran, not what the pin file says)."""
    rows: Sequence[EntryReport | WorkaroundReport] = report.workarounds if workarounds else report.entries
    return [
        Verification(
            entry_id=row.verdict.entry_id,
            verified_on=today,
            versions=ran_with(row.plan, row.verdict),
            exporter_version=report.exporter_version,
            verdict=row.verdict.verdict,
            upstream_state=describe_state(row.state),
        )
        for row in rows
        if row.plan is not None and row.verdict.verdict in RERUN_VERDICTS
    ]


def ran_with(plan: Plan, verdict_: Verdict) -> dict[str, str]:
    """The stack's versions as the re-runs recorded them: the first run that recorded each package."""
    versions: dict[str, str] = {}
    for run in verdict_.evidence:
        for name, version in (run.get("versions") or {}).items():
            if name in plan.versions and version:
                versions.setdefault(name, version)
    return {name: versions[name] for name in plan.versions if name in versions}


# ── Rendering ──
def _due_text(row: EntryReport | WorkaroundReport) -> str:
    if row.plan is None:
        return "—"
    return ("due: " if row.plan.due else "not due: ") + "; ".join(row.plan.reasons)


def render_table(report: AuditReport) -> Table:
    """One row per entry: id and models; verdict, upstream (owner/repo#N) and why, each said once."""
    from bot.terminal import compact_table

    title = f"audit of {len(report.entries)} ledger entries" + (
        " (PARTIAL: rate limited)" if report.partial else ""
    )
    table = compact_table("entry (models)", "verdict · upstream: why", title=title)
    table.columns[0].width = min(46, max((len(r.entry.id) for r in report.entries), default=5))
    for row in report.entries:
        table.add_row(f"{row.entry.id}\n[dim]{escape(', '.join(row.entry.models))}[/dim]",
                      _verdict_cell(row, row.entry.upstream))
    return table


def _verdict_cell(row: EntryReport | WorkaroundReport, url: str | None) -> str:
    """``verdict · state owner/repo#N`` over the reasons of the plan and of the verdict, without repeats."""
    from bot.terminal import short_link

    upstream = describe_state(row.state) if row.plan else UNKNOWN
    reasons = list(dict.fromkeys([*(row.plan.reasons if row.plan else []), *row.verdict.reasons]))
    link = f" {short_link(url)}" if url else ""
    return f"[bold]{row.verdict.verdict}[/bold] · {upstream}{link}\n" + escape("; ".join(reasons))  # [brackets]


def _probes_text(row: WorkaroundReport) -> str:
    return "\n".join(f"{e.model} {e.backend}/{e.mode}" for e in row.subject.exports) or "none indexed"


def render_workaround_table(report: AuditReport) -> Table:
    from bot.terminal import compact_table

    table = compact_table(
        "workaround (probes)", "verdict · upstream: why",
        title=f"audit of {len(report.workarounds)} registered workarounds (re-run with only it disabled)",
    )  # fmt: skip
    for row in report.workarounds:
        table.add_row(
            f"{row.workaround.name}\n[dim]{row.workaround.kind}, {row.workaround.backend}\n"
            f"{escape(_probes_text(row))}[/dim]",
            _verdict_cell(row, row.workaround.upstream),
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

    def link(row: EntryReport | WorkaroundReport, url: str | None) -> str:
        upstream = describe_state(row.state) if row.plan else UNKNOWN
        return f"[{upstream}]({url})" if url else upstream

    def verdict_text(row: EntryReport | WorkaroundReport) -> str:
        return f"**{row.verdict.verdict}**: " + "; ".join(row.verdict.reasons)

    for row in report.entries:
        lines.append(
            f"| {cell(row.entry.id)} | {cell(', '.join(row.entry.models))} | {link(row, row.entry.upstream)} | "
            f"{cell(_due_text(row))} | {cell(verdict_text(row))} |"
        )
    attention = [row for row in [*report.entries, *report.workarounds] if row.verdict.verdict in NEEDS_HUMAN]
    if attention:
        lines += ["", "### Needs a human", ""]
        lines += [
            f"- `{row.verdict.entry_id}`: **{row.verdict.verdict}**: {'; '.join(row.verdict.reasons)}"
            for row in attention
        ]
    if report.workarounds:
        counts = ", ".join(f"{n} {v}" for v, n in report.workaround_counts().items() if n)
        lines += [
            "",
            f"### Registered workarounds (re-run with only it disabled): {counts}",
            "",
            "| workaround | probes | upstream | due / why | verdict |",
            "| --- | --- | --- | --- | --- |",
        ]
        for w in report.workarounds:
            lines.append(
                f"| `{w.workaround.name}` | {cell(_probes_text(w))} | {link(w, w.workaround.upstream)} | "
                f"{cell(_due_text(w))} | {cell(verdict_text(w))} |"
            )
    check = report.candidate_check
    if check is not None:
        removable = ", ".join(f"`{i}`" for i in check.removable) or "nothing"
        lines += [
            "",
            f"### Candidate {check.environment.spec}",
            "",
            f"Removable once the pin moves: {removable}. Exports that pass at the pins, re-run with the "
            f"candidate: {len(check.rows)}, regressions: **{len(check.regressions)}**.",
            "",
            "| model | backend | mode | chosen because | with the candidate |",
            "| --- | --- | --- | --- | --- |",
            *(
                f"| {r.export.model} | {r.export.backend} | {r.export.mode} | {cell('; '.join(r.sampled.reasons))} "
                f"| {cell(describe_row(r))} |"
                for r in check.rows
            ),
            *(["", "Left out of the sample: " + "; ".join(check.left_out) + "."] if check.left_out else []),
        ]
    return "\n".join(lines) + "\n"


def render_candidate_table(check: CandidateCheck) -> Table:
    table = Table(title=f"candidate {check.environment.spec}: exports that pass at the pins, re-run with it")
    for column in ("model", "backend / mode", "chosen because", "result", "detail"):
        table.add_column(column, overflow="fold")
    for row in check.rows:
        table.add_row(row.export.model, f"{row.export.backend}/{row.export.mode}", "; ".join(row.sampled.reasons),
                      row.result, describe_row(row))  # fmt: skip
    return table


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
@registry_option
@pins_option
@click.option(
    "--tracker",
    "tracker_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Answer upstream questions from this snapshot, offline (e.g. registry/upstream-snapshot.json).",
)
@github_url_option
@click.option(
    "--web-host",
    default=None,
    metavar="HOST",
    help="Web host whose issue URLs that API answers for [default: derived from --github-url].",
)
@token_env_option
@click.option("--all", "force_all", is_flag=True, help="Re-run every entry, due or not.")
@click.option(
    "--entry",
    "entry_ids",
    multiple=True,
    metavar="ID",
    help="Audit (and re-run) only this entry (or, with --workarounds, this workaround); repeatable.",
)
@click.option(
    "--workarounds",
    "with_workarounds",
    is_flag=True,
    help="Also audit every registered workaround with upstream/dependency metadata: re-run exports it fired in "
    "with only it disabled (--without NAME).",
)
@index_option(DEFAULT_JSON, "Workaround index (JSON) saying which exports each workaround fired in.")
@probes_option(DEFAULT_PROBE_LIMIT, "Exports re-run per workaround (passing exports it fired in, spread over backends and modes).")
@click.option(
    "--candidate",
    default=None,
    metavar="PKG==VER",
    help="Try an unpinned release: re-run the entries and workarounds whose stack has PKG in an isolated "
    "environment with PKG==VER, and re-run a sample of exports that pass at the pins to catch regressions.",
)
@venv_cache_option
@click.option(
    "--regression-results",
    "regression_files",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    multiple=True,
    help="Sweep results to draw the --candidate regression sample from (repeatable) "
    "[default: sweeps/*.jsonl].",
)
@click.option(
    "--regression-sample",
    type=click.IntRange(0),
    default=DEFAULT_SAMPLE,
    show_default=True,
    help="Fastest passing exports to fill the --candidate regression sample up to (0: none); the ledger's "
    "reproducers, exports firing a workaround with dependency = PKG and --regression-classes always run.",
)
@click.option(
    "--regression-classes",
    "classes_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Also re-run these with --candidate: one 'CLASS [BACKEND[/static|dynamic]]' a line "
    "[default backend: every one whose stack has PKG; mode: static].",
)
@click.option(
    "--supersession-probes",
    type=click.IntRange(0),
    default=DEFAULT_SUPERSESSION_PROBES,
    show_default=True,
    help="Re-runs allowed per entry whose reproducer passes with nothing moved, each with workarounds that "
    "fired in it disabled (--without), to show which registered workaround took over (verdict superseded; "
    "0: none, such entries stay not-reproduced).",
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
@json_file_option("the report", "docs/audit-report.md")
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
@click.option(
    "--open-prs",
    is_flag=True,
    help="Then open or update the rolling shrink PR from this report (see `exportbot pr`); a dry run printing "
    "the diff and body unless CI=true and a token is set.",
)
@report_errors
def audit_command(
    registry_dir: Path | None, pin_file: Path | None, tracker_file: Path | None, github_url: str | None,
    web_host: str | None, token_env: str | None, force_all: bool, entry_ids: tuple[str, ...],
    with_workarounds: bool, index_file: Path, probes: int, candidate: str | None, cache_dir: Path | None,
    regression_files: tuple[Path, ...], regression_sample: int, classes_file: Path | None,
    supersession_probes: int, runs: int, timeout: float,
    json_file: Path | None, markdown_file: Path | None, update_verification: bool, snapshot_file: Path | None,
    open_prs: bool,
) -> None:  # fmt: skip
    """Check every ledger entry: upstream state, pins moved, re-run without the workaround, verdict.

    With --workarounds, registered workarounds too (see docs/workaround-index.md for their probes).
    Exit 0 nothing to do, 3 some entry (or workaround) removable or superseded, 4 some changed,
    not-reproduced or needs a human, 1 errors, 2 bad options or an interpreter without the pinned versions.
    """
    registry_dir = registry_dir or default_registry_dir()
    if candidate is not None:
        try:
            parse_candidate(candidate)
        except ValueError as error:
            raise UsageProblem(str(error)) from None
        if update_verification or open_prs:
            flag = "--update-verification" if update_verification else "--open-prs"
            raise UsageProblem(f"{flag} cannot go with --candidate: the candidate is not pinned yet")
    ledger = load_ledger(registry_dir)
    workarounds = _workaround_subjects(index_file, probes, entry_ids) if with_workarounds else []
    known = {e.id for e in ledger.entries} | {w.name for w, _ in workarounds}
    unknown_ids = [i for i in entry_ids if i not in known]
    if unknown_ids:
        also = " or registered workaround" if with_workarounds else " (a workaround name needs --workarounds)"
        raise UsageProblem(f"no ledger entry{also} {', '.join(map(repr, unknown_ids))} in {registry_dir}")
    pin_path = pin_file or find_pin_file(registry_dir)
    pins = read_pins(pin_path)
    verification = load_verification(registry_dir)
    previous = snapshot_file if snapshot_file is not None and snapshot_file.is_file() else None
    try:
        tracker = _make_tracker(tracker_file, github_url, token_env, web_host, previous)
    except SnapshotError as error:
        raise UsageProblem(str(error)) from None
    run_export, probe_runner = subprocess_runner(timeout), lambda name: subprocess_runner(timeout, without=(name,))
    entry_runner = lambda entry_id: subprocess_runner(timeout, repro=entry_id, registry=registry_dir)  # noqa: E731
    supersession_runner = lambda entry_id, names: subprocess_runner(  # noqa: E731
        timeout, repro=entry_id, without=names, registry=registry_dir
    )
    # The re-runs use this interpreter; with --candidate, the environment bot.venvs built from the pins.
    check_environment: EnvironmentCheck | None = EnvironmentCheck(sys.executable, pins)
    environment = None
    if candidate is not None:
        click.echo(f"preparing an isolated environment with {candidate} ...", err=True)
        environment = prepare_environment(
            candidate, pin_path.read_text(encoding="utf-8"), pins, cache_dir or DEFAULT_CACHE
        )
        if environment.python is None:
            click.echo(f"error: candidate {candidate} {environment.problem}", err=True)
            raise SystemExit(EXIT_FAILED)
        env = environment
        run_export, probe_runner = env.runner(timeout), lambda name: env.runner(timeout, without=(name,))
        entry_runner = lambda entry_id: env.runner(timeout, repro=entry_id, registry=registry_dir)  # noqa: E731
        supersession_runner = lambda entry_id, names: env.runner(  # noqa: E731
            timeout, repro=entry_id, without=names, registry=registry_dir
        )
        check_environment = None
    with CountedProgress(Console(stderr=True), "re-run") as progress:
        current = {"subject": ""}

        def on_rerun(subject_id: str, count: int) -> None:
            current["subject"] = subject_id
            progress.add(count)

        def announced(run: RunExport) -> RunExport:
            def run_one(model: str, backend: str, dynamic: bool) -> dict:
                progress.step(f"{current['subject']}: {model} {backend}/{'dynamic' if dynamic else 'static'}")
                return run(model, backend, dynamic)

            return run_one

        plain_probe_runner, plain_entry_runner, plain_supersession = probe_runner, entry_runner, supersession_runner
        report = run_audit(
            ledger, tracker, pins, verification, announced(run_export),
            entry_ids=entry_ids, force_all=force_all, candidate=candidate, runs=runs, workarounds=workarounds,
            workaround_verification=load_verification(registry_dir, WORKAROUNDS_VERIFIED_FILE),
            probe_runner=lambda name: announced(plain_probe_runner(name)),
            entry_runner=lambda entry_id: announced(plain_entry_runner(entry_id)),
            check_environment=check_environment, on_rerun=on_rerun,
            supersession_runner=lambda entry_id, names: announced(plain_supersession(entry_id, names)),
            supersession_probes=supersession_probes,
        )  # fmt: skip
    selection = audit_selection(entry_ids, known - {w.name for w, _ in workarounds},
                                [w.name for w, _ in workarounds] if with_workarounds else None)  # fmt: skip
    report.identity = report_identity(registry_dir, selection)
    if environment is not None:
        report.candidate_check = run_candidate_check(
            environment, report.candidate_removable(), regression_files, pins,
            regression_sample, timeout,
            progress=lambda e: click.echo(f"regression check: {e.model} {e.backend}/{e.mode}", err=True),
            registry=registry_dir, classes_file=classes_file,
        )  # fmt: skip

    to_stdout = on_stdout(json_file)  # --json -: the JSON report is the result; tables go to stderr
    console = Console(stderr=to_stdout)
    console.print(render_table(report))
    if with_workarounds:
        console.print(render_workaround_table(report))
    if report.candidate_check is not None:
        console.print(render_candidate_table(report.candidate_check))
        check = report.candidate_check
        click.echo(
            f"candidate {candidate}: removable once pinned: {', '.join(check.removable) or 'nothing'}; "
            f"regressions: {len(check.regressions)} of {len(check.rows)} sampled exports", err=to_stdout
        )
    if json_file is not None:
        emit_json(report.as_dict(), json_file)
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
        if with_workarounds:
            save_verification(
                registry_dir, verification_records(report, today, workarounds=True),
                keep_ids=_registered_names(), filename=WORKAROUNDS_VERIFIED_FILE,
            )  # fmt: skip
    code = report.exit_code()
    if open_prs:
        from bot.shrink import run_pr

        if run_pr(report.as_dict(), apply=None, github_url=github_url, token_env=token_env,
                  text_to_stderr=to_stdout) != 0:
            code = EXIT_FAILED
    click.get_current_context().exit(code)


def _registered_names() -> set[str]:
    from exporters.utils import all_workarounds

    return {w.name for w in all_workarounds()}


def _workaround_subjects(
    index_file: Path, probes: int, entry_ids: Sequence[str]
) -> list[tuple[Workaround, Subject]]:
    """Registered workarounds with lifecycle metadata (or named by ``--entry``), each with its probes."""
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    try:
        index = load_index(index_file)
    except WorkaroundIndexError as error:
        raise UsageProblem(str(error)) from None
    return [
        (w, probe_subject(w, index, probes))
        for w in all_workarounds()
        if w.upstream or w.dependency or w.name in entry_ids
    ]
