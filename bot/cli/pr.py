"""``exportbot pr``: the command that keeps the rolling shrink PR (``bot.github.shrink``) and its dashboard.

Exit codes: 0 done (or nothing to do); 1 stopped: GitHub refused a request, a read kept failing or the
base ledger is invalid (the one line says at which step, what was already written and whether a rerun
completes it); 2 bad options, configuration or report.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from github import Auth, Github
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.audit.report import ReportError, check_report, checkout_root
from bot.audit.upstream import DEFAULT_API
from bot.cli.json_output import emit_json, json_flag
from bot.cli.options import github_url_option, token_env_option
from bot.config import BotConfig, ConfigError, find_config, load_config, parse_config
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.github.shrink import open_or_update_pr, plan_locally
from bot.github.shrink_plan import ShrinkOutcome
from bot.github.shrink_session import ShrinkStopped
from bot.github.tracker import _token_from_env

# PyGithub's own pacing; GitHub asks for serial writes, about one per second (secondary rate limits).
SECONDS_BETWEEN_REQUESTS = 0.25
SECONDS_BETWEEN_WRITES = 1.0


# ── Command line ──
def make_github(github_url: str | None, token: str | None) -> Github:
    """A client that never retries on its own (a failed write must stop the run, not repeat)."""
    return Github(
        base_url=github_url or DEFAULT_API,
        auth=Auth.Token(token) if token else None,
        retry=None,
        timeout=30,
        seconds_between_requests=SECONDS_BETWEEN_REQUESTS,
        seconds_between_writes=SECONDS_BETWEEN_WRITES,
    )


def should_apply(flag: bool | None, has_token: bool) -> bool:
    """``--apply``/``--dry-run`` when given; otherwise post only in CI (``CI=true``) with a token."""
    if flag is None:
        return os.environ.get("CI") == "true" and has_token
    if flag and not has_token:
        raise UsageProblem(
            "--apply needs a token in $GITHUB_TOKEN or $GH_TOKEN (or the variable --token-env names)"
        )
    return flag


def _steps(outcome: ShrinkOutcome) -> list[str]:
    """What was written (applied: the block first, if any) or what would be (a dry run), one line each."""
    plan = outcome.plan
    if not outcome.applied:
        return plan.steps()
    return [plan.blocked, *outcome.done] if plan.blocked else list(outcome.done)


def print_outcome(outcome: ShrinkOutcome, console: Console, err: bool = False) -> None:
    """The per-entry table, the steps, the diff and (dry run) the body, so a run is never silent.

    ``err``: all of it on stderr (``audit --json - --open-prs``, whose stdout is the report)."""
    plan = outcome.plan
    proposed = {p.id for p in plan.selection.proposals}
    table = Table(title=f"shrink PR: {len(proposed)} entr{'y' if len(proposed) == 1 else 'ies'} to remove")
    for column in ("entry", "in PR", "why"):
        table.add_column(column, overflow="fold")
    for entry_id, note in plan.selection.notes.items():
        table.add_row(escape(entry_id), "yes" if entry_id in proposed else "no", escape(note))
    console.print(table)
    if outcome.against:
        click.echo(f"planned against the local checkout {outcome.against} (no network, no token)", err=err)
    steps = _steps(outcome) if outcome.applied else [f"would {s}" for s in _steps(outcome)]
    click.echo("\n".join(steps) or "nothing to change: the repository already matches this report", err=err)
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
    if outcome.dashboard_step and outcome.dashboard_step not in steps:  # a dashboard write is one of the steps
        click.echo(outcome.dashboard_step, err=err)
    if outcome.pr_url:
        click.echo(f"pull request: {outcome.pr_url}", err=err)
    click.echo(outcome.diff or "(no ledger change)", err=err)
    if not outcome.applied:
        if plan.parents:
            click.echo(f"--- commit message:\n{plan.message}", err=err)
        click.echo(f"--- PR title: {plan.title}\n--- PR body:\n{plan.body}", err=err)
        if outcome.dashboard:
            click.echo(f"--- dashboard body:\n{outcome.dashboard}", err=err)


PR_JSON_KEYS = ("status", "against", "entries", "steps", "warnings", "pr_url", "dashboard_step", "files", "diff",
                "commit_message", "title", "body", "dashboard", "stopped")  # fmt: skip


def outcome_json(outcome: ShrinkOutcome) -> dict[str, Any]:
    """``exportbot pr --json``: the facts :func:`print_outcome` prints (docs/audit-report.md, "exportbot pr --json")."""
    plan = outcome.plan
    proposed = {p.id for p in plan.selection.proposals}
    return {
        "status": "applied" if outcome.applied else "planned",
        "against": outcome.against,
        "entries": [{"id": entry_id, "in_pr": entry_id in proposed, "why": note}
                    for entry_id, note in plan.selection.notes.items()],
        "steps": _steps(outcome),
        "warnings": list(outcome.warnings),
        "pr_url": outcome.pr_url,
        "dashboard_step": outcome.dashboard_step,
        "files": sorted(path for path, (base, branch) in plan.changes.items() if base != branch),
        "diff": outcome.diff,
        "commit_message": plan.message or None,
        "title": plan.title,
        "body": plan.body,
        "dashboard": outcome.dashboard,
        "stopped": None,
    }  # fmt: skip


def stopped_json(stop: ShrinkStopped) -> dict[str, Any]:
    """``exportbot pr --json`` after a stop (exit 1): ``status`` and ``stopped``; nothing was planned, so every
    other key of :func:`outcome_json` is null."""
    return dict.fromkeys(PR_JSON_KEYS) | {
        "status": "stopped",
        "stopped": {"step": stop.step, "problem": stop.problem, "written": list(stop.done),
                    "rerun_completes": stop.rerun, "message": stop.explain()},
    }  # fmt: skip


def _load(config_file: Path | None, repository: str | None) -> tuple[BotConfig, Path]:
    """The config (with --repo / $GITHUB_REPOSITORY applied) and the checkout root it belongs to."""
    path = config_file or find_config()
    try:
        config = load_config(path)
        repository = repository or config.repository or os.environ.get("GITHUB_REPOSITORY")
        if repository:
            checked = parse_config({"repository": repository}, "--repo / $GITHUB_REPOSITORY")
            config = dataclasses.replace(config, repository=checked.repository)
    except ConfigError as error:
        raise UsageProblem(str(error)) from None
    root = path.parent if path is not None else checkout_root(Path.cwd()) or Path.cwd()
    return config, root


def _upstream_inputs(config: BotConfig) -> Any:
    """The checkout's items for the dashboard's upstream section and the links ticked there (only with a
    dashboard: that is where links are asked for)."""
    if not config.dashboard:
        return None
    from bot.run.tracking import upstream_inputs

    return upstream_inputs(config.registry)


def run_pr(
    report: Mapping[str, Any], *, apply: bool | None, github_url: str | None = None,
    token_env: str | None = None, repository: str | None = None, config_file: Path | None = None,
    recreate: bool = False, local: bool = False, as_json: bool = False, text_to_stderr: bool = False,
) -> int:  # fmt: skip
    """What ``exportbot pr`` (and ``audit --open-prs``) does after reading the report; the exit code.

    ``as_json``: the outcome as JSON on stdout instead of the text; ``text_to_stderr``: the text on stderr."""
    config, root = _load(config_file, repository)
    if local and apply:
        raise UsageProblem("--local only plans (no network): it cannot go with --apply")
    token = None if local else _token_from_env(token_env)
    apply_now = False if local else should_apply(apply, token is not None)
    try:
        if local or (not apply_now and config.repository is None):
            outcome = plan_locally(report, config, root, _upstream_inputs(config))
        else:
            outcome = open_or_update_pr(report, config, make_github(github_url, token), apply_now, recreate=recreate,
                                        upstream=_upstream_inputs(config))  # fmt: skip
    except (ConfigError, ReportError) as error:
        raise UsageProblem(str(error)) from None
    except ShrinkStopped as stop:
        click.echo(stop.explain(), err=True)
        if as_json:
            emit_json(stopped_json(stop))
        return EXIT_FAILED
    if as_json:
        for warning in outcome.warnings:
            click.echo(f"warning: {warning}", err=True)
        emit_json(outcome_json(outcome))
    else:
        print_outcome(outcome, Console(stderr=text_to_stderr), err=text_to_stderr)
    return 0


@click.command("pr")
@click.option(
    "--report",
    "report_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="A saved audit report (exportbot audit --json FILE).",
)
@click.option(
    "--apply/--dry-run",
    "apply",
    default=None,
    help="Post to GitHub, or only print the diff and body [default: post only when CI=true and a "
    "token is set].",
)
@click.option(
    "--local",
    is_flag=True,
    help="Plan against the local checkout instead of GitHub: print the exact diff, commit message and PR "
    "body with no network and no token (also what a dry run with no repository configured does).",
)
@click.option(
    "--recreate",
    is_flag=True,
    help="Reset the branch to the base plus one fresh exportbot commit, dropping other commits.",
)
@json_flag("the plan (a dry run) or what was written", 'docs/audit-report.md, "exportbot pr --json"')
@github_url_option
@token_env_option
@click.option(
    "--repo",
    "repository",
    default=None,
    metavar="OWNER/NAME",
    help="Repository of the PR [default: [tool.exportbot] repository, then $GITHUB_REPOSITORY].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="pyproject.toml with [tool.exportbot] [default: the nearest one].",
)
@report_errors
def pr_command(report_file: Path, apply: bool | None, local: bool, recreate: bool, as_json: bool,
               github_url: str | None, token_env: str | None, repository: str | None,
               config_file: Path | None) -> None:  # fmt: skip
    """Open or update the one rolling PR removing the ledger entries REPORT found removable.

    Dry run unless --apply (or CI=true with a token): prints the plan, the unified diff and the PR body.
    --local does the same against this checkout, offline. Exit 0 done or nothing to do, 1 stopped (the
    line says at which step, what was written and whether a rerun completes it), 2 bad input.
    """
    try:
        report = check_report(json.loads(report_file.read_text(encoding="utf-8")))
    except ValueError as error:  # JSONDecodeError and ReportError
        raise UsageProblem(f"{report_file}: {error}") from None
    code = run_pr(report, apply=apply, github_url=github_url, token_env=token_env, repository=repository,
                  config_file=config_file, recreate=recreate, local=local, as_json=as_json)  # fmt: skip
    click.get_current_context().exit(code)
