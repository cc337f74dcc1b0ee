"""Running the audit: the report's records and ``run_audit``, the loop from ledger to verdicts.

Split out of ``bot.audit`` (which re-exports these names) so the rendering (``bot.cli.audit_render``) and the
command (``bot.cli.audit``) build on the records without importing each other: data flows
ledger → upstream state → plan → re-run → verdicts → these records → tables, Markdown and JSON.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.pins import normalize_name
from bot.audit.plan import (
    Plan,
    Subject,
    describe_state,
    entry_subject,
    parse_candidate,
    plan_entry,
    same_version,
)
from bot.audit.report import REPORT_SCHEMA, ReportIdentity
from bot.audit.upstream import RateLimited, UpstreamState, UpstreamTracker
from bot.audit.verdict import (
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
from bot.audit.verification import Verification, exporter_version
from bot.audit.workaround_removal import REPO_ROOT, defining_file, removal_blocker
from bot.config import DEFAULT_RUNS
from bot.run.candidate import CandidateCheck
from bot.run.reruns import (
    DEFAULT_SUPERSESSION_PROBES,
    ProbeRunner,
    RunExport,
    SupersessionRunner,
    probe_superseders,
    rerun_subject,
    subprocess_runner,
)
from exporters.ledger import Ledger, LedgerEntry
from exporters.utils import Workaround


@dataclass(frozen=True)
class Runners:
    """How each kind of re-run is made in one interpreter (the pinned one, or a candidate's environment):
    the plain export, a workaround's necessity probe, a ledger entry's reproducer, a supersession probe."""

    run_export: RunExport
    probe: ProbeRunner
    entry: Callable[[str], RunExport]
    supersession: SupersessionRunner

    def wrapped(self, wrap: Callable[[RunExport], RunExport]) -> Runners:
        """The same runners, each export going through ``wrap`` (progress lines)."""
        return Runners(wrap(self.run_export), lambda name: wrap(self.probe(name)),
                       lambda entry_id: wrap(self.entry(entry_id)),
                       lambda entry_id, names: wrap(self.supersession(entry_id, names)))  # fmt: skip


def budgets_of(ledger: Ledger) -> dict[str, float | None]:
    """Entry id → its ``[entry.repro] budget_s``: a slowness entry's re-runs stop there, whatever ``--timeout``."""
    return {e.id: e.repro.budget_s for e in ledger.entries if e.repro is not None}


def subprocess_runners(
    timeout: float, registry: Path, budgets: Mapping[str, float | None], *, python: Path | None = None,
    pythonpath: Path | None = None,
) -> Runners:  # fmt: skip
    """Re-runs in fresh ``python -m bot export`` processes (bot.run.reruns) of ``python`` (default: this
    interpreter; a candidate's environment runs this repository's code through ``pythonpath``). An entry with
    a ``budget_s`` (``budgets``) is judged by it, whatever ``timeout`` says."""
    where: dict[str, Any] = {"python": python, "pythonpath": pythonpath} if python is not None else {}
    return Runners(
        subprocess_runner(timeout, **where),
        lambda name: subprocess_runner(timeout, without=(name,), **where),
        lambda entry_id: subprocess_runner(timeout, repro=entry_id, registry=registry, budget_s=budgets.get(entry_id),
                                           **where),
        lambda entry_id, names: subprocess_runner(timeout, repro=entry_id, without=names, registry=registry,
                                                  budget_s=budgets.get(entry_id), **where),
    )  # fmt: skip


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
    identity: ReportIdentity | None = None  # repository, base commit, registry digest, selection (bot.audit.report)
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
    ``supersession_probes`` of them (bot.run.reruns.probe_superseders), and ``superseded`` when they prove that
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
    their stack the re-runs recorded (what ran, not what the pin file says). Re-run at a ``--candidate``, the
    record says so: it was verified at a stack that is not the pinned one, and the next audit at the pins
    sees that stack move."""
    rows: Sequence[EntryReport | WorkaroundReport] = report.workarounds if workarounds else report.entries
    return [
        Verification(
            entry_id=row.verdict.entry_id,
            verified_on=today,
            versions=ran_with(row.plan, row.verdict),
            exporter_version=report.exporter_version,
            verdict=row.verdict.verdict,
            upstream_state=describe_state(row.state),
            candidate=_off_pins(row.plan.candidate, report.pins),
        )
        for row in rows
        if row.plan is not None and row.verdict.verdict in RERUN_VERDICTS
    ]


def _off_pins(candidate: str | None, pins: Mapping[str, str]) -> str:
    """The marker of a record made at a candidate: its specs when some differ from the pins, else ""."""
    specs = parse_candidate(candidate) if candidate else []
    off = any(not same_version(version, pins.get(normalize_name(name))) for name, version in specs)
    return candidate or "" if off else ""


def ran_with(plan: Plan, verdict_: Verdict) -> dict[str, str]:
    """The stack's versions as the re-runs recorded them: the first run that recorded each package."""
    versions: dict[str, str] = {}
    for run in verdict_.evidence:
        for name, version in (run.get("versions") or {}).items():
            if name in plan.versions and version:
                versions.setdefault(name, version)
    return {name: versions[name] for name in plan.versions if name in versions}
