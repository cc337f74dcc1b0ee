"""``exportbot watch``, the part that installs and runs: find new releases, build each group's candidate
environment, run its candidate audit. The decisions are pure (bot.audit.releases: what is proposed;
bot.audit.bump: what the bump PR changes); the GitHub side is bot.github.bump.

For each group with a candidate (bot.audit.releases.plan_watch):

1. **Environment** (bot.run.candidate.prepare_environment): layered on the pinned one when it can be, with
   every moved package of the group at its candidate. A release that cannot be installed beside the other
   pins (or that exportbot cannot import its exporters with) is one line in the result and is not tried.
2. **Candidate audit** (bot.run.audit_run.run_audit with ``candidate``): every ledger entry and registered
   workaround whose stack has a moved package (a workaround's stack includes its ``dependency``) is
   re-run there, whatever its verification says, then the regression sample (bot.run.candidate).

Timings and counts are kept per group (:class:`GroupRun`) for the report and ``benchmarks/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.pins import normalize_name
from bot.audit.plan import Subject, entry_subject
from bot.audit.releases import GroupCandidate
from bot.audit.report import audit_selection, report_identity
from bot.audit.upstream import UpstreamTracker
from bot.audit.verification import Verification
from bot.run.audit_run import AuditReport, budgets_of, subprocess_runners
from bot.run.candidate import CandidateEnvironment, prepare_environment, run_candidate_check
from bot.run.reruns import RunExport
from bot.run.venvs import DEFAULT_CACHE, REPO_ROOT
from exporters.ledger import Ledger
from exporters.utils import Workaround

# run_audit as the caller wants it run (the CLI adds a progress bar): (ledger, tracker, pins, verification,
# runners, **options) → report
AuditCall = Callable[..., AuditReport]


@dataclass
class GroupRun:
    """One group's candidate: its environment, its audit (None when it was not tried) and what it cost."""

    candidate: GroupCandidate
    environment: CandidateEnvironment
    report: AuditReport | None = None
    build_seconds: float = 0.0
    audit_seconds: float = 0.0
    reruns: int = 0  # export processes started (re-runs, probes and the regression sample)

    @property
    def problem(self) -> str | None:
        """Why the candidate was not tried (one line), or None."""
        return None if self.environment.python is not None else f"{self.environment.spec} {self.environment.problem}"


@dataclass
class WatchSettings:
    """What a watch run re-runs and where; the command line fills it from its options and [tool.exportbot]."""

    registry: Path
    pin_text: str
    timeout: float
    runs: int
    sample: int
    cache_dir: Path = DEFAULT_CACHE
    results: Sequence[Path] = ()
    classes_file: Path | None = None
    pinned_python: Path | None = None
    workarounds: Sequence[tuple[Workaround, Subject]] = field(default_factory=list)
    workaround_verification: Mapping[str, Verification] = field(default_factory=dict)


def moved_subjects(candidate: GroupCandidate, ledger: Ledger, workarounds: Sequence[tuple[Workaround, Subject]]
                   ) -> tuple[list[str], list[tuple[Workaround, Subject]]]:  # fmt: skip
    """The ledger entries and workarounds whose stack has a moved package: what the candidate audit re-runs."""
    moved = {normalize_name(name) for name in candidate.moves}

    def touched(subject: Subject) -> bool:
        return bool(moved & {normalize_name(name) for name in subject.stack})

    entries = [e.id for e in ledger.entries if touched(entry_subject(e))]
    return entries, [(w, s) for w, s in workarounds if touched(s)]


def run_group(
    candidate: GroupCandidate, ledger: Ledger, tracker: UpstreamTracker, pins: Mapping[str, str],
    verification: Mapping[str, Verification], settings: WatchSettings, audit: AuditCall,
    progress: Callable[[str], None] = lambda line: None,
) -> GroupRun:  # fmt: skip
    """Build the candidate's environment and run its audit; an uninstallable candidate is returned untried."""
    started = time.perf_counter()
    progress(f"{candidate.group}: preparing an environment with {', '.join(candidate.specs)}")
    environment = prepare_environment(",".join(candidate.specs), settings.pin_text, pins, settings.cache_dir)
    run = GroupRun(candidate, environment, build_seconds=round(time.perf_counter() - started, 1))
    if environment.python is None:
        return run
    entries, workarounds = moved_subjects(candidate, ledger, settings.workarounds)
    runners = subprocess_runners(settings.timeout, settings.registry, budgets_of(ledger), python=environment.python,
                                 pythonpath=REPO_ROOT).wrapped(_counting(run))  # fmt: skip
    started = time.perf_counter()
    report = (
        audit(ledger, tracker, pins, verification, runners, entry_ids=[*entries, *(w.name for w, _ in workarounds)],
              candidate=environment.spec, runs=settings.runs, workarounds=workarounds,
              workaround_verification=settings.workaround_verification)
        if entries or workarounds
        else AuditReport([], dict(pins), "", settings.runs, environment.spec)
    )  # fmt: skip
    known = {e.id for e in ledger.entries}
    report.identity = report_identity(settings.registry, audit_selection(entries, known, [w.name for w, _ in workarounds]))
    progress(f"{candidate.group}: regression sample (at most {settings.sample} exports)")
    report.candidate_check = run_candidate_check(
        environment, report.candidate_removable(), settings.results, pins, settings.sample, settings.timeout,
        progress=lambda e: progress(f"{candidate.group}: regression check {e.model} {e.backend}/{e.mode}"),
        registry=settings.registry, classes_file=settings.classes_file, pinned_python=settings.pinned_python,
    )  # fmt: skip
    run.reruns += len(report.candidate_check.rows) + sum(1 for row in report.candidate_check.rows if row.pinned)
    run.report = report
    run.audit_seconds = round(time.perf_counter() - started, 1)
    return run


def _counting(run: GroupRun) -> Callable[[RunExport], RunExport]:
    def wrap(export: RunExport) -> RunExport:
        def counted(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
            run.reruns += 1
            return export(model, backend, dynamic)

        return counted

    return wrap
