"""``exportbot audit``: is each workaround in the ledger (and, with ``--workarounds``, in the registry) still needed?

Data flows one way: ledger → upstream state (one request per distinct issue) → plan (bot.audit.plan, pure)
→ re-run of the due entries without their workaround (bot.run.reruns, isolated subprocesses) → verdicts
(bot.audit.verdict, pure) → report (terminal table, JSON, Markdown job summary) and optionally
``registry/verified.toml`` (bot.audit.verification).

Every entry appears in every report, with why it is or is not eligible, so a bot that stops proposing
removals says why instead of going quiet. When GitHub's rate limit runs out mid-run (reset later than
the tracker will wait), querying stops and the report is marked ``partial``: the entries not yet asked
get verdict ``unknown`` ("rate limited until ...") and are not re-run.

With ``--workarounds`` every registered workaround that carries ``upstream`` or ``dependency`` metadata
(or is named by ``--entry``) is audited the same way, as a :class:`bot.audit.plan.Subject`: same triggers,
same verdicts, re-run in isolated processes with ``--without NAME`` (only that workaround disabled) on at
most ``--probes`` exports it fired in, taken from the workaround index (bot/audit/workaround_index.py). A
workaround records no failure regex: any failure without it means still needed, and the error is shown.
Its rows go to ``workarounds`` in the JSON report (``entries`` stays ledger-only, so a consumer that
edits the ledger never sees them) and its verifications to ``registry/verified-workarounds.toml``.

With ``--candidate PKG==VER`` the re-runs happen in an isolated environment holding that release, and
a sample of exports that pass at the pins is re-run there too (bot.run.candidate): the report says what the
release would make removable and what it would break.

Exit codes: 0 nothing removable and nothing needs attention (``not-due``, ``still-needed``,
``unknown`` only); 3 some entry is removable (or ``superseded``); 4 some entry is ``changed``, ``not-reproduced`` or needs a
``human`` (this wins over 3: a human should look before a removal is proposed from the same run); 5 the candidate
breaks an export that passes at the pins (wins over 3 and 4); 1 errors (bad ledger, pins,
verification file or snapshot; export harness crash; a candidate that cannot be installed); 2 bad
options, or an interpreter for the re-runs that does not hold the pinned versions of an entry's stack.

Before the re-runs of any entry, the interpreter that runs them is asked for its versions of the entry's
stack (bot.run.environment); they must be the pins (or, with ``--candidate``, the isolated environment
bot.run.venvs built from the pins is used). Outcomes record the versions they ran with, and
``verified.toml`` records those, never the pin file's word.

This module is the command (options, runners, progress, and where the report goes): the I/O layer around
``bot.run.audit_run.run_audit`` (records, the loop) and ``bot.cli.audit_render`` (tables, Markdown).
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from bot.audit.pins import find_pin_file, read_pins
from bot.audit.plan import Subject, parse_candidate
from bot.audit.regression_sample import DEFAULT_SAMPLE
from bot.audit.report import audit_selection, report_identity
from bot.audit.upstream import UpstreamTracker
from bot.audit.verification import (
    WORKAROUNDS_VERIFIED_FILE,
    Verification,
    load_verification,
    save_verification,
)
from bot.audit.workaround_index import (
    DEFAULT_JSON,
    DEFAULT_PROBE_LIMIT,
    WorkaroundIndexError,
    load_index,
    probe_subject,
)
from bot.cli.audit_render import (
    render_candidate_table,
    render_markdown,
    render_table,
    render_workaround_table,
)
from bot.cli.json_output import emit_json, json_file_option, on_stdout
from bot.cli.options import (
    github_url_option,
    index_option,
    pins_option,
    probes_option,
    registry_option,
    token_env_option,
    venv_cache_option,
)
from bot.cli.progress import CountedProgress
from bot.config import DEFAULT_RUNS, DEFAULT_TIMEOUT
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.github.tracker import SnapshotError, Tracker, write_snapshot
from bot.run.audit_run import (
    AuditReport,
    Runners,
    budgets_of,
    run_audit,
    subprocess_runners,
    verification_records,
)
from bot.run.candidate import prepare_environment, run_candidate_check
from bot.run.environment import EnvironmentCheck
from bot.run.reruns import DEFAULT_SUPERSESSION_PROBES, RunExport
from bot.run.venvs import DEFAULT_CACHE, REPO_ROOT
from exporters.ledger import Ledger, default_registry_dir, load_ledger
from exporters.utils import Workaround


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
    "candidates",
    multiple=True,
    metavar="PKG==VER",
    help="Try an unpinned release: re-run the entries and workarounds whose stack has PKG in an isolated "
    "environment with PKG==VER, and re-run a sample of exports that pass at the pins to catch regressions. "
    "Repeatable: coupled packages move together (--candidate torch==2.14.0 --candidate executorch==1.6.0).",
)
@venv_cache_option
@click.option(
    "--regression-results",
    "regression_files",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    multiple=True,
    help="Sweep results to draw the --candidate regression sample from (repeatable) "
    "[default: the committed records, sweeps/catalogue and sweeps/generation].",
)
@click.option(
    "--regression-sample",
    type=click.IntRange(0),
    default=DEFAULT_SAMPLE,
    show_default=True,
    help="Size of the --candidate regression sample (0: none): the ledger's reproducers, exports firing a "
    "workaround with dependency = PKG and --regression-classes first, then the fastest passing exports; what "
    "the budget leaves out is listed in the report.",
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
    help="Record re-run verdicts and versions in <registry>/verified.toml; with --candidate, at the candidate's "
    "stack, marked as recorded at a non-pinned stack (how a bug is recorded at the release it belongs to).",
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
    with_workarounds: bool, index_file: Path, probes: int, candidates: tuple[str, ...], cache_dir: Path | None,
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
    candidate = ",".join(candidates) or None
    if candidate is not None:
        try:
            parse_candidate(candidate)
        except ValueError as error:
            raise UsageProblem(str(error)) from None
        if open_prs:
            raise UsageProblem("--open-prs cannot go with --candidate: the candidate is not pinned yet")
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
    budgets = budgets_of(ledger)  # a slowness entry's re-runs stop at its own budget_s, whatever --timeout
    runners = subprocess_runners(timeout, registry_dir, budgets)
    # The re-runs use this interpreter; with --candidate, the environment bot.run.venvs built from the pins.
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
        runners = subprocess_runners(timeout, registry_dir, budgets, python=environment.python, pythonpath=REPO_ROOT)
        check_environment = None
    report = audit_with_progress(
        ledger, tracker, pins, verification, runners,
        entry_ids=entry_ids, force_all=force_all, candidate=candidate, runs=runs, workarounds=workarounds,
        workaround_verification=load_verification(registry_dir, WORKAROUNDS_VERIFIED_FILE),
        check_environment=check_environment, supersession_probes=supersession_probes,
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
        from bot.cli.pr import run_pr

        if run_pr(report.as_dict(), apply=None, github_url=github_url, token_env=token_env,
                  text_to_stderr=to_stdout) != 0:
            code = EXIT_FAILED
    click.get_current_context().exit(code)


def audit_with_progress(
    ledger: Ledger, tracker: UpstreamTracker, pins: Mapping[str, str], verification: Mapping[str, Verification],
    runners: Runners, **options: Any,
) -> AuditReport:  # fmt: skip
    """``run_audit`` with a progress bar on stderr naming each re-run as it starts (``options``: run_audit's)."""
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

        shown = runners.wrapped(announced)
        return run_audit(ledger, tracker, pins, verification, shown.run_export, probe_runner=shown.probe,
                         entry_runner=shown.entry, supersession_runner=shown.supersession, on_rerun=on_rerun,
                         **options)  # fmt: skip


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
