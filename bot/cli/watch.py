"""``exportbot watch``: find new releases of the pinned stack, audit each group's candidate, keep one rolling
bump PR per group that moves the pins and carries the removals the release allows.

Data flows one way: the package index (bot.run.index: ``pip index versions``, upload times) → what is proposed
(bot.audit.releases: final releases newer than the pin, old enough, coupled packages together) → per group the
GitHub state of its bump PR (GET only: an open PR already proposing these versions, or a human having closed
one, ends the group there with no audit and no write) → the candidate environment and audit (bot.run.watch) →
what the PR proposes (bot.audit.bump) → the PR (bot.github.bump). A dry run unless ``--apply`` (or ``CI=true``
with a token); ``--local`` plans against the checkout with no GitHub at all; ``--list`` stops after the index.

Exit codes: 0 done (whatever was found, regressions included: they are the PR's content); 1 the index or
GitHub could not be read or written (one line says which step); 2 bad options or configuration.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.audit.bump import decide_bump
from bot.audit.pins import find_pin_file, normalize_name, read_pins
from bot.audit.releases import GroupCandidate, WatchPlan, plan_watch, watched_packages
from bot.audit.verification import WORKAROUNDS_VERIFIED_FILE, Verification, load_verification
from bot.audit.workaround_index import DEFAULT_JSON
from bot.cli.audit import _make_tracker, _workaround_subjects, audit_with_progress
from bot.cli.json_output import emit_json, json_file_option
from bot.cli.options import (
    github_url_option,
    pins_option,
    registry_option,
    token_env_option,
    venv_cache_option,
)
from bot.cli.pr import _load, make_github, print_outcome, should_apply
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.github.bump import checked_lines, propose_bump, read_bump
from bot.github.pin_check import PinCheckSession, ResultError, check_result, comment_body, result_of
from bot.github.shrink_session import ShrinkStopped
from bot.github.tracker import SnapshotError, _token_from_env
from bot.run.audit_run import verification_records
from bot.run.index import IndexFailure, IndexSession
from bot.run.venvs import DEFAULT_CACHE, EnvironmentFailure, Uninstallable, pinned_environment
from bot.run.watch import GroupRun, WatchSettings, run_group
from exporters.ledger import default_registry_dir, load_ledger


def watch_settings(
    registry_dir: Path, pin_text: str, pins: dict[str, str], where: str, cache_dir: Path | None, timeout: float,
    runs: int, sample: int, results: Sequence[Path], classes_file: Path | None, probes: int | None,
) -> WatchSettings:  # fmt: skip
    """What a candidate audit re-runs and where (``probes`` None: no workarounds), with the interpreter holding
    ``pins`` (built when this one does not: regressions are re-checked there); exit 1 when it cannot be built."""
    cache = cache_dir or DEFAULT_CACHE
    try:
        pinned_python = pinned_environment(pin_text, pins, cache)
    except (Uninstallable, EnvironmentFailure) as error:
        click.echo(f"error: cannot build an environment at the pins of {where}: {error}", err=True)
        raise SystemExit(EXIT_FAILED) from None
    return WatchSettings(
        registry_dir, pin_text, timeout, runs, sample, cache, results, classes_file, pinned_python,
        _workaround_subjects(DEFAULT_JSON, probes, ()) if probes is not None else [],
        load_verification(registry_dir, WORKAROUNDS_VERIFIED_FILE),
    )  # fmt: skip


def find_releases(pins: dict[str, str], index: IndexSession, coupled: Any, min_age: float,
                  now: datetime.datetime) -> WatchPlan:  # fmt: skip
    """Ask the index about every pinned package of the stack and decide what to propose."""
    packages = [name for name in watched_packages() if normalize_name(name) in pins]
    try:
        offered = {name: index.releases(name) for name in packages}
    except IndexFailure as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(EXIT_FAILED) from None
    return plan_watch(pins, offered, coupled, now, min_age, packages)


def render_plan(plan: WatchPlan, min_age: float) -> Table:
    table = Table(title=f"new releases of the pinned stack (minimum age {min_age:g} days)")
    for column in ("group", "moves", "not proposed yet"):
        table.add_column(column, overflow="fold")
    for candidate in plan.candidates:
        table.add_row(candidate.group, escape(candidate.describe()), escape("; ".join(candidate.waiting) or "—"))
    for group, why in plan.quiet.items():
        table.add_row(group, "—", escape(why))
    return table


def _group_record(run: GroupRun | None, group: str, moves: dict, skipped: str | None = None,
                  outcome: Any = None, records: Sequence[Verification] = (), checked: Sequence[str] = ()
                  ) -> dict[str, Any]:  # fmt: skip
    """One group's line of ``watch --json``: what ``watch --publish`` needs to write its PR without auditing again
    (the report, the verification records at the new versions, the checked lines) and what it cost."""
    record: dict[str, Any] = {"group": group, "moves": {k: list(v) for k, v in moves.items()}, "skipped": skipped}
    if run is not None:
        report = run.report.as_dict() if run.report else None
        record |= {"problem": run.problem, "environment_seconds": run.build_seconds, "audit_seconds": run.audit_seconds,
                   "export_processes": run.reruns, "report": report, "checked": list(checked),
                   "records": [{"entry_id": r.entry_id, "verified_on": r.verified_on.isoformat(), "versions": r.versions,
                                "exporter_version": r.exporter_version, "verdict": r.verdict,
                                "upstream_state": r.upstream_state} for r in records]}  # fmt: skip
    if outcome is not None:
        plan = outcome.plan
        record |= {"pr": {"title": plan.title, "draft": plan.draft, "steps": outcome.done if outcome.applied else
                          plan.steps(), "url": outcome.pr_url, "diff": outcome.diff, "body": plan.body,
                          "removals": [p.id for p in plan.selection.proposals]}}  # fmt: skip
    return record


def candidate_audit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a candidate audit, shared by ``watch`` and ``pin-check run`` (they run the same audit)."""
    options = [
        registry_option, pins_option,
        click.option("--tracker", "tracker_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     default=None, help="Upstream issue states from this snapshot, offline "
                     "(registry/upstream-snapshot.json)."),
        click.option("--workarounds/--no-workarounds", "with_workarounds", default=True, show_default=True,
                     help="Also re-run the registered workarounds whose stack or dependency has a moved package."),
        click.option("--probes", type=click.IntRange(1), default=1, show_default=True,
                     help="Exports re-run per workaround (from the workaround index)."),
        click.option("--runs", type=click.IntRange(1), default=None, help="Re-runs per export [default: [tool.exportbot] runs]."),
        click.option("--timeout", type=click.FloatRange(min=1), default=None,
                     help="Seconds before one export is killed [default: [tool.exportbot] timeout]."),
        click.option("--regression-sample", type=click.IntRange(0), default=8, show_default=True,
                     help="Exports in each candidate's regression sample (0: none)."),
        click.option("--regression-classes", "classes_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     default=None, help="Also re-run these: one 'CLASS [BACKEND[/static|dynamic]]' a line."),
        venv_cache_option,
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def github_write_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--apply/--dry-run``, ``--github-url``, ``--token-env``, ``--repo``, ``--config``: where and whether a
    command writes (``watch`` and ``pin-check publish``)."""
    options = [
        click.option("--apply/--dry-run", "apply", default=None,
                     help=f"Write {what}, or only print them [default: write only when CI=true and a token is set]."),
        github_url_option, token_env_option,
        click.option("--repo", "repository", default=None, metavar="OWNER/NAME",
                     help="Repository to write to [default: [tool.exportbot] repository, then $GITHUB_REPOSITORY]."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     default=None, help="pyproject.toml with [tool.exportbot] [default: the nearest one]."),
    ]  # fmt: skip

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


@click.command("watch")
@click.option("--list", "list_only", is_flag=True, help="Print the candidates the index offers and stop.")
@click.option("--group", "groups", multiple=True, metavar="NAME",
              help="Only this package group (its first package's name, e.g. torch); repeatable.")  # fmt: skip
@click.option("--min-age", type=click.FloatRange(0), default=None, metavar="DAYS",
              help="Minimum release age in days [default: [tool.exportbot] min_release_age_days, 3].")  # fmt: skip
@candidate_audit_options
@click.option("--regression-results", "regression_files", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              multiple=True, help="Sweep results to draw the sample from [default: the committed records].")  # fmt: skip
@github_write_options("the bump PRs")
@click.option("--local", is_flag=True,
              help="Plan against the local checkout: print the exact diff and PR body, no GitHub, no token.")  # fmt: skip
@click.option("--publish", "publish_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Write the PRs of a recorded run (watch --json FILE) without auditing again: the workflow's job "
                   "that may write never installs a new release.")  # fmt: skip
@json_file_option("the watch run (per group: moves, environment, audit report, PR)", "docs/github-actions.md")
@report_errors
def watch_command(
    list_only: bool, groups: tuple[str, ...], min_age: float | None, registry_dir: Path | None, pin_file: Path | None,
    tracker_file: Path | None, with_workarounds: bool, probes: int, runs: int | None, timeout: float | None,
    regression_sample: int, regression_files: tuple[Path, ...], classes_file: Path | None, cache_dir: Path | None,
    apply: bool | None, local: bool, github_url: str | None, token_env: str | None, repository: str | None,
    config_file: Path | None, publish_file: Path | None, json_file: Path | None,
) -> None:  # fmt: skip
    """Propose new releases of the pinned stack as one rolling bump PR per package group.

    For each group (coupled packages together: executorch and torchao move with torch) the newest final
    release past the minimum age is installed in an isolated environment; every ledger entry and workaround
    whose stack has a moved package is re-run there, plus a regression sample; the PR moves the pin and
    removes what the release makes unnecessary, or stays a draft naming each regression.

    Examples:
      exportbot watch --list
      exportbot watch --local --tracker registry/upstream-snapshot.json
      exportbot watch --group onnxscript --no-workarounds --regression-sample 2
      exportbot watch --apply --repo me/exportbot
    """
    config, root = _load(config_file, repository)
    if local and apply:
        raise UsageProblem("--local only plans (no GitHub): it cannot go with --apply")
    if publish_file is not None:
        token = None if local else _token_from_env(token_env)
        apply_now = False if local else should_apply(apply, token is not None)
        github = None if local or config.repository is None else make_github(github_url, token)
        code = publish_recorded(publish_file, config, github, root, apply_now, Console())
        click.get_current_context().exit(code)
    registry_dir = registry_dir or (root / config.registry if (root / config.registry).is_dir() else default_registry_dir())
    pin_path = pin_file or find_pin_file(registry_dir)
    pins, pin_text = read_pins(pin_path), pin_path.read_text(encoding="utf-8")
    minimum = config.min_release_age_days if min_age is None else min_age
    index = IndexSession()
    plan = find_releases(pins, index, config.coupled, minimum, datetime.datetime.now(datetime.UTC))
    unknown = [g for g in groups if g not in {c.group for c in plan.candidates} | set(plan.quiet)]
    if unknown:
        raise UsageProblem(f"no package group {', '.join(map(repr, unknown))} (groups: "
                           f"{', '.join([*(c.group for c in plan.candidates), *plan.quiet])})")  # fmt: skip
    console = Console(stderr=json_file is not None and str(json_file) == "-")
    console.print(render_plan(plan, minimum))
    record: dict[str, Any] = {"index": {"pip_runs": index.pip_runs, "http_requests": index.http_requests,
                                        "index_url": index.index_url}, "groups": []}  # fmt: skip
    if list_only:
        if json_file is not None:
            emit_json(record | {"candidates": [{"group": c.group, "moves": c.moves, "waiting": c.waiting}
                                               for c in plan.candidates], "quiet": plan.quiet}, json_file)  # fmt: skip
        return
    token = None if local else _token_from_env(token_env)
    apply_now = False if local else should_apply(apply, token is not None)
    github = None if local or config.repository is None else make_github(github_url, token)
    ledger = load_ledger(registry_dir)
    try:
        tracker = _make_tracker(tracker_file, github_url, token_env, None, None)
    except SnapshotError as error:
        raise UsageProblem(str(error)) from None
    settings = watch_settings(registry_dir, pin_text, pins, str(pin_path), cache_dir, timeout or config.timeout,
                              runs or config.runs, regression_sample, regression_files, classes_file,
                              probes if with_workarounds else None)  # fmt: skip
    verification = load_verification(registry_dir)
    code = 0
    for candidate in plan.candidates:
        if groups and candidate.group not in groups:
            continue
        try:
            code = max(code, _watch_group(candidate, config, github, root, ledger, tracker, pins, verification,
                                          settings, apply_now, console, record))  # fmt: skip
        except ShrinkStopped as stop:
            click.echo(f"{candidate.group}: {stop.explain()}", err=True)
            code = EXIT_FAILED
    record["index"] |= {"pip_runs": index.pip_runs, "http_requests": index.http_requests}
    if json_file is not None:
        emit_json(record, json_file)
    click.get_current_context().exit(code)


def _watch_group(candidate: Any, config: Any, github: Any, root: Path, ledger: Any, tracker: Any, pins: dict,
                 verification: dict, settings: WatchSettings, apply_now: bool, console: Console,
                 record: dict[str, Any]) -> int:  # fmt: skip
    """One group: skip what is already proposed or turned down, else audit the candidate and plan its PR."""
    group, moves = candidate.group, dict(candidate.moves)
    bump = read_bump(config, group, github, root)
    skipped = bump.skip_reason(moves, group)
    if skipped is not None:
        click.echo(f"{group}: {candidate.describe()}: {skipped}", err=True)
        record["groups"].append(_group_record(None, group, moves, skipped))
        return 0
    started = time.perf_counter()
    run = run_group(candidate, ledger, tracker, pins, verification, settings, audit_with_progress,
                    progress=lambda line: click.echo(line, err=True))  # fmt: skip
    if run.problem is not None or run.report is None:
        click.echo(f"{group}: not tried: {run.problem}", err=True)
        record["groups"].append(_group_record(run, group, moves))
        return 0
    report = run.report.as_dict()
    decision = decide_bump(group, moves, report)
    today = datetime.datetime.now(datetime.UTC).date()
    records = [dataclasses.replace(r, candidate="") for r in verification_records(run.report, today)]
    checked = checked_lines(report, run.build_seconds, run.audit_seconds, run.reruns)
    outcome = propose_bump(bump, decision, report, records, checked, apply_now)
    print_outcome(outcome, console, err=console.stderr)
    click.echo(f"{group}: {decision.title} ({time.perf_counter() - started:.0f} s)", err=True)
    record["groups"].append(_group_record(run, group, moves, outcome=outcome, records=records, checked=checked))
    return 0


def publish_recorded(path: Path, config: Any, github: Any, root: Path, apply_now: bool, console: Console) -> int:
    """``watch --publish FILE``: the PRs of a ``watch --json`` record, planned against the repository as it is now
    and written, with no environment and no audit (the job that may write never runs a new release's code)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        groups = [g for g in data["groups"] if g.get("report")]
        for group in groups:
            group["records"] = [Verification(r["entry_id"], datetime.date.fromisoformat(r["verified_on"]), r["versions"],
                                             r["exporter_version"], r["verdict"], r["upstream_state"])
                                for r in group["records"]]  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageProblem(f"{path}: not a watch record ({error})") from None
    code = 0
    for group in groups:
        name, moves = group["group"], {k: (v[0], v[1]) for k, v in group["moves"].items()}
        try:
            bump = read_bump(config, name, github, root)
            skipped = bump.skip_reason(moves, name)
            if skipped is not None:
                click.echo(f"{name}: {skipped}", err=True)
                continue
            decision = decide_bump(name, moves, group["report"])
            outcome = propose_bump(bump, decision, group["report"], group["records"], group["checked"], apply_now)
        except ShrinkStopped as stop:
            click.echo(f"{name}: {stop.explain()}", err=True)
            code = EXIT_FAILED
            continue
        print_outcome(outcome, console, err=console.stderr)
    return code


# ── exportbot pin-check: someone else's pin move ──
@click.group("pin-check")
def pin_check_group() -> None:
    """Check a pull request that moves pins (Dependabot, Renovate, a person) as the watch checks a release.

    `run` (in the PR's checkout, read-only: it runs the PR's code) audits the PR's pins against the base's and
    writes a result file; `publish` (a trusted job of the base branch that never runs the PR's code) reads that
    file as untrusted input and writes one sticky comment and one check run on the PR (regressions fail it).
    See docs/github-actions.md for the workflow and its trust model.
    """


@pin_check_group.command("run")
@click.option("--base-pins", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True,
              help="The base branch's constraints.txt (git show origin/main:constraints.txt > base.txt).")  # fmt: skip
@candidate_audit_options
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="pyproject.toml with [tool.exportbot] [default: the nearest one].")  # fmt: skip
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the result (the artifact pin-check publish reads).")  # fmt: skip
@report_errors
def pin_check_run(
    base_pins: Path, registry_dir: Path | None, pin_file: Path | None, tracker_file: Path | None,
    with_workarounds: bool, probes: int, runs: int | None, timeout: float | None, regression_sample: int,
    classes_file: Path | None, cache_dir: Path | None, config_file: Path | None, out_file: Path,
) -> None:  # fmt: skip
    """Audit this checkout's pins against the base's: removals allowed, regressions brought.

    Examples:
      exportbot pin-check run --base-pins base-constraints.txt --out pin-check.json
      exportbot pin-check run --base-pins base.txt --no-workarounds --regression-sample 2 --out pin-check.json
    """
    config, root = _load(config_file, None)
    registry_dir = registry_dir or (root / config.registry if (root / config.registry).is_dir() else default_registry_dir())
    pin_path = pin_file or find_pin_file(registry_dir)
    base_text = base_pins.read_text(encoding="utf-8")
    base, head = read_pins(base_pins), read_pins(pin_path)
    stack = [name for name in watched_packages() if normalize_name(name) in base or normalize_name(name) in head]
    moves = {name: (base.get(normalize_name(name), "(unpinned)"), head[normalize_name(name)]) for name in stack
             if normalize_name(name) in head and base.get(normalize_name(name)) != head[normalize_name(name)]}  # fmt: skip
    if not moves:
        click.echo("no package of the pinned stack moved: nothing to check", err=True)
        emit_json(result_of({}, None, ["no package of the pinned stack moved"], {}, "").as_dict(), out_file)
        return
    candidate = GroupCandidate("pull-request", tuple(moves), moves)
    settings = watch_settings(registry_dir, base_text, base, "the base", cache_dir, timeout or config.timeout,
                              runs or config.runs, regression_sample, (), classes_file,
                              probes if with_workarounds else None)  # fmt: skip
    ledger = load_ledger(registry_dir)
    try:
        tracker = _make_tracker(tracker_file, None, None, None, None)
    except SnapshotError as error:
        raise UsageProblem(str(error)) from None
    run = run_group(candidate, ledger, tracker, base, load_verification(registry_dir), settings, audit_with_progress,
                    progress=lambda line: click.echo(line, err=True))  # fmt: skip
    if run.problem is not None or run.report is None:
        emit_json(result_of(moves, None, [], {}, "", problem=run.problem).as_dict(), out_file)
        click.echo(f"not tried: {run.problem}", err=True)
        return
    report = run.report.as_dict()
    decision = decide_bump(candidate.group, moves, report)
    today = datetime.datetime.now(datetime.UTC).date()
    records = [dataclasses.replace(r, candidate="") for r in verification_records(run.report, today)]
    checked = checked_lines(report, run.build_seconds, run.audit_seconds, run.reruns)
    local = propose_bump(read_bump(config, candidate.group, None, root), decision, report, records, checked, False)
    result = result_of(moves, decision, checked, local.plan.changes, local.diff)
    emit_json(result.as_dict(), out_file)
    click.echo(f"pin check of {candidate.describe()}: {len(decision.regressions)} regression(s), "
               f"{len(decision.removals)} removal(s) allowed; written to {out_file}", err=True)  # fmt: skip


@pin_check_group.command("publish")
@click.option("--result", "result_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True,
              help="The file pin-check run wrote (an artifact of an untrusted job: checked field by field).")  # fmt: skip
@click.option("--pr", "number", type=click.IntRange(1), required=True, help="The pull request's number.")
@click.option("--head-sha", required=True, metavar="SHA", help="The commit the check run belongs to (the PR's head).")
@click.option("--push", is_flag=True,
              help="Also commit the removals onto the PR's branch when it is in this repository (never a fork's).")  # fmt: skip
@github_write_options("the comment and the check run")
@report_errors
def pin_check_publish(
    result_file: Path, number: int, head_sha: str, push: bool, apply: bool | None, github_url: str | None,
    token_env: str | None, repository: str | None, config_file: Path | None,
) -> None:  # fmt: skip
    """Write the sticky comment and the check run of a pin check on its pull request.

    Examples:
      exportbot pin-check publish --result pin-check.json --pr 42 --head-sha 0123456789abcdef0123456789abcdef01234567 --dry-run
      exportbot pin-check publish --result pin-check.json --pr 42 --head-sha 0123456789abcdef0123456789abcdef01234567 --apply --push
    """
    if not re.fullmatch(r"[0-9a-f]{40}", head_sha):
        raise UsageProblem(f"--head-sha must be a 40-digit commit SHA, got {head_sha!r}")
    try:
        result = check_result(json.loads(result_file.read_text(encoding="utf-8")))
    except (ValueError, ResultError) as error:
        raise UsageProblem(f"{result_file}: {error}") from None
    config, _ = _load(config_file, repository)
    if config.repository is None:
        raise UsageProblem("no repository: set [tool.exportbot] repository, --repo or $GITHUB_REPOSITORY")
    token = _token_from_env(token_env)
    apply_now = should_apply(apply, token is not None)
    session = PinCheckSession(make_github(github_url, token), config, time.sleep)
    try:
        steps = session.publish(number, head_sha, result, apply_now, push)
    except ShrinkStopped as stop:
        click.echo(stop.explain(), err=True)
        raise SystemExit(EXIT_FAILED) from None
    prefix = "" if apply_now else "would "
    click.echo("\n".join(f"{prefix}{step}" for step in steps) or "nothing to change: the PR already shows this check")
    if not apply_now:
        click.echo(f"--- comment:\n{comment_body(result)}")
