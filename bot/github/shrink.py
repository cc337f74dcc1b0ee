"""``exportbot pr``: keep ONE rolling pull request that removes the ledger entries an audit found removable.

The repository is the database (no state file, no cache): the base branch's ledger, the head branch
``exportbot/shrink``, the open PR's body (one hidden block per proposed entry), the bodies of PRs
closed unmerged and the dashboard's hidden row block are everything a run reads, so the scheduled job
and a developer's dry run compute the same plan. Each run:

1. checks the report field by field and refuses one audited in another repository (bot.audit.report; exit 2,
   before any request);
2. reads that state (GET requests only, bot.github.shrink_session: a failed read stops the run, it is never
   taken for a missing file), then plans without I/O (bot.github.prwriter): which entries, the edited ledger
   and verification files (computed from the *base* branch's files), title, body, draft;
3. in a dry run (the default outside CI) prints the plan, the unified diff and the body, and stops;
   ``--local`` (or a dry run with no repository configured) plans against the local checkout instead,
   with no network and no token;
4. with ``--apply`` (or ``CI=true`` and a token) writes only what differs, serially: a commit on the
   branch (git data API; parent = the branch tip, plus the base tip when the base moved, so the PR diff
   stays exactly the removals; rebuilt from the base when an entry the PR proposed drops out, so the diff
   and the commit message hold exactly the remaining removals), the PR, ready for review once its
   evidence is complete, its labels; reviewers when the PR is opened; the dashboard.

Why it is safe to run again after any failure: every step compares with what the repository already
holds, so a run that stopped after pushing the branch (PR creation failed, rate limit) is completed by
the next one, without a second PR or a second commit. A branch whose tip is a commit the bot did not
make (no ``Exportbot-Commit: true`` trailer) is never pushed to again; the PR gets one comment per such
commit instead, and ``--recreate`` hands the branch back.

Exit codes: 0 done (or nothing to do); 1 stopped: GitHub refused a request, a read kept failing or the
base ledger is invalid (the one line says at which step, what was already written and whether a rerun
completes it); 2 bad options, configuration or report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from github import Auth, Github
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.audit.report import ReportError, check_report, check_repository, checkout_root, head_commit
from bot.audit.verdict import REMOVABLE
from bot.audit.verification import VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE, load_verification
from bot.cli.json_output import emit_json, json_flag
from bot.cli.options import github_url_option, token_env_option
from bot.config import BotConfig, ConfigError, find_config, load_config, parse_config
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.github.dashboard import dashboard_body
from bot.github.prwriter import (
    Proposal,
    Selection,
    closed_body,
    commit_message,
    drop_records,
    git_blob_sha,
    has_human_comment,
    human_commit_comment,
    pr_body,
    pr_title,
    select_proposals,
    shrink_changes,
    unified_diff,
    workaround_changes,
    workaround_rows,
)
from bot.github.shrink_session import MAX_WAIT, GitHubSession, RepoState, ShrinkStopped
from bot.github.tracker import DEFAULT_API, _token_from_env
from exporters.ledger import LIST_FILES, Ledger, LedgerError, load_ledger

# PyGithub's own pacing; GitHub asks for serial writes, about one per second (secondary rate limits).
SECONDS_BETWEEN_REQUESTS = 0.25
SECONDS_BETWEEN_WRITES = 1.0
NO_COMMIT = "0" * 40  # --local outside a git checkout: the base has no commit to name


# ── What a run does (pure) ──
@dataclass
class ShrinkPlan:
    """Every write a run would make; empty fields mean the repository already says the same."""

    selection: Selection
    changes: dict[str, tuple[str, str]]  # repository path → (text on base, text on the branch)
    title: str
    body: str
    draft: bool
    branch: str
    base_branch: str
    base_sha: str
    parents: tuple[str, ...] = ()  # a new commit with these parents; () for no commit
    create_branch: bool = False
    force: bool = False  # the branch is reset to this commit (--recreate, or rebuilt from the base)
    rebuild: bool = False  # an entry the PR proposed dropped out: one fresh commit on the base
    open_pull: bool = False
    pull_edits: dict[str, str] = field(default_factory=dict)
    ready_for_review: bool = False  # the open PR is a draft and its evidence is now complete
    close_pull: bool = False
    labels: tuple[str, ...] = ()
    reviewers: tuple[str, ...] = ()
    comment: str | None = None
    blocked: str | None = None
    pull_number: int | None = None
    by_hand: dict[str, str] = field(default_factory=dict)  # removable workaround → why not deleted here

    @property
    def message(self) -> str:
        return commit_message(self.selection.proposals, self.base_sha) if self.parents else ""

    def steps(self) -> list[str]:
        """The writes, in the order they happen, as one line each."""
        steps = [self.blocked] if self.blocked else []
        if self.comment:
            steps.append(f"comment on #{self.pull_number} about the commit exportbot did not make")
        if self.parents:
            how = ("rebuild" if self.rebuild else "reset") if self.force else "create" if self.create_branch else "move"
            steps.append(f"commit the removals (parents {', '.join(p[:12] for p in self.parents)}); "
                         f"{how} branch {self.branch}")  # fmt: skip
        if self.open_pull:
            steps.append(f"open a{' draft' if self.draft else ''} PR {self.branch} → {self.base_branch}")
        if self.pull_edits:
            steps.append(f"update the {' and '.join(sorted(self.pull_edits))} of #{self.pull_number}")
        if self.ready_for_review:
            steps.append(f"mark #{self.pull_number} ready for review: the evidence is complete")
        if self.close_pull:
            steps.append(f"close #{self.pull_number}: nothing left to remove")
        if self.labels:
            steps.append(f"add labels {', '.join(self.labels)}")
        if self.reviewers:
            steps.append(f"request reviews from {', '.join(self.reviewers)}")
        return steps


def _verification_changes(
    base_files: Mapping[str, str], config: BotConfig, proposals: tuple[Proposal, ...], by_hand: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """The verification files without the records of the entries (and deleted workarounds) this PR
    removes, so ``verified.toml`` never outlives its entries."""
    removed = {
        VERIFIED_FILE: [p.id for p in proposals if not p.is_workaround],
        WORKAROUNDS_VERIFIED_FILE: [p.id for p in proposals if p.is_workaround and p.id not in by_hand],
    }
    changes = {}
    for name, ids in removed.items():
        path = _repo_path(config, name)
        text = base_files.get(path)
        if text is not None and ids and (new := drop_records(text, ids)) != text:
            changes[path] = (text, new)
    return changes


def plan_shrink(
    report: Mapping[str, Any], state: RepoState, ledger: Ledger, base_dir: Path, config: BotConfig,
    *, recreate: bool = False,
) -> ShrinkPlan:  # fmt: skip
    """The plan for this report and repository state; ``base_dir`` holds the base's ledger files."""
    pull = state.open_pull
    previous = pull.proposals if pull else []
    selection = select_proposals(
        report, ledger, previous, state.closed, config.runs, base_sources=state.base_files
    )
    sources, by_hand = workaround_changes(state.base_files, selection.proposals)
    if all(p.id in by_hand for p in selection.proposals):  # nothing to commit: the dashboard lists them
        notes = selection.notes | {i: "removable; delete by hand (not self-contained)" for i in by_hand}
        selection = dataclasses.replace(selection, proposals=(), notes=notes)
    proposals = selection.proposals
    ledger_ids = [p.id for p in proposals if not p.is_workaround]
    changes = {
        _repo_path(config, path.name): (state.base_files.get(_repo_path(config, path.name), ""), text)
        for path, text in shrink_changes(base_dir, ledger_ids).items()
    } | {path: (state.base_files[path], text) for path, text in sources.items()}
    changes |= _verification_changes(state.base_files, config, proposals, by_hand)
    plan = ShrinkPlan(
        selection, changes, pr_title(proposals), pr_body(proposals, config.runs, config.branch, by_hand),
        draft=any(p.shortfall(config.runs) for p in proposals), branch=config.branch,
        base_branch=config.base_branch, base_sha=state.base_sha, pull_number=pull.number if pull else None,
        by_hand=by_hand,
    )  # fmt: skip
    tip = state.tip
    if tip is not None and not tip.is_bot and tip.sha != state.base_sha and not recreate:
        plan.blocked = (
            f"leave {config.branch} alone: its tip {tip.sha[:12]} is not an exportbot commit "
            "(--recreate takes the branch back)"
        )
        if pull is not None and not has_human_comment(state.comments, tip.sha):
            plan.comment = human_commit_comment(tip.sha, config.branch)
        return plan
    if not proposals:
        if pull is not None:
            plan.close_pull = True
            plan.pull_edits = {"body": closed_body({p.id: selection.notes[p.id] for p in previous})}
        return plan

    desired = {path: new for path, (_, new) in changes.items()}
    desired = {path: desired.get(path, text) for path, text in state.base_files.items()} | desired
    same_files = tip is not None and dict(tip.blobs) == {p: git_blob_sha(t) for p, t in desired.items()}
    # An entry the PR proposed (and its branch removed) dropped out: merging or adding a commit would
    # leave its removal in the PR's diff, so the branch starts again from the base.
    dropped = {p.id for p in previous if not p.removal} - {p.id for p in proposals}
    plan.rebuild = bool(dropped) and tip is not None and tip.sha != state.base_sha
    if recreate or plan.rebuild or not same_files:
        if tip is None or recreate or plan.rebuild or tip.sha == state.base_sha:
            plan.parents = (state.base_sha,)
        elif tip.recorded_base == state.base_sha:
            plan.parents = (tip.sha,)
        else:  # the base moved: a merge keeps the PR's diff to exactly the removals
            plan.parents = (tip.sha, state.base_sha)
        plan.create_branch = tip is None
        plan.force = (recreate or plan.rebuild) and tip is not None
    if pull is None:
        plan.open_pull = True
        plan.labels = config.labels
        plan.reviewers = config.reviewers
    else:
        plan.pull_edits = {
            k: v for k, v in (("title", plan.title), ("body", plan.body)) if getattr(pull, k) != v
        }
        plan.ready_for_review = pull.draft and not plan.draft
        plan.labels = tuple(label for label in config.labels if label not in pull.labels)
    return plan


def _repo_path(config: BotConfig, name: str) -> str:
    return f"{config.registry.strip('/')}/{name}"


def wanted_paths(config: BotConfig, report: Mapping[str, Any]) -> set[str]:
    """The files a PR may change: ledger and verification files, and the removable workarounds' sources."""
    names = [*LIST_FILES.values(), VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE]
    sources = {row["source"] for row in workaround_rows(report) if row["verdict"] == REMOVABLE and row.get("source")}
    return {_repo_path(config, name) for name in names} | sources


def proposed_sources(proposals: list[Proposal]) -> set[str]:
    return {p.source for p in proposals if p.is_workaround and p.source}


# ── The run ──
@dataclass
class ShrinkOutcome:
    """What a run planned and, when applied, did; printed by :func:`print_outcome`."""

    plan: ShrinkPlan
    applied: bool
    done: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pr_url: str | None = None
    dashboard_step: str | None = None
    dashboard: str | None = None
    against: str | None = None  # --local: the checkout the plan was computed against

    @property
    def diff(self) -> str:
        return unified_diff(self.plan.changes)


def _plan(
    report: Mapping[str, Any], state: RepoState, config: BotConfig, recreate: bool
) -> tuple[ShrinkPlan, Ledger, dict]:
    """Plan against the base files of ``state`` (written to a scratch registry for the ledger code)."""
    with tempfile.TemporaryDirectory(prefix="exportbot-base-") as scratch:
        base_dir = Path(scratch)
        for name in [*LIST_FILES.values(), VERIFIED_FILE]:
            text = state.base_files.get(_repo_path(config, name))
            if text is not None or name in LIST_FILES.values():
                (base_dir / name).write_bytes((text or "").encode("utf-8"))  # bytes: CRLF files stay CRLF
        try:
            ledger = load_ledger(base_dir)
        except LedgerError as error:
            raise ShrinkStopped(
                f"read the ledger of {config.base_branch}", str(error).splitlines()[0], [], rerun=False,
                advice=f"a rerun will not complete it: fix the ledger on {config.base_branch} first",
            ) from None  # fmt: skip
        verification = load_verification(base_dir)
        return plan_shrink(report, state, ledger, base_dir, config, recreate=recreate), ledger, verification


def _dashboard(outcome: ShrinkOutcome, report: Mapping[str, Any], ledger: Ledger, verification: dict,
               previous: str | None) -> str:  # fmt: skip
    plan = outcome.plan
    links = {p.id: outcome.pr_url or "(dry run: not opened)" for p in plan.selection.proposals}
    links |= {i: f"#{n} closed unmerged" for i, n in plan.selection.turned_down.items()}
    return dashboard_body(report, ledger, verification, links, plan.by_hand, previous)


def open_or_update_pr(
    report: Mapping[str, Any], config: BotConfig, github: Github, apply: bool, *, recreate: bool = False,
    sleep: Callable[[float], None] = time.sleep, max_wait: float = MAX_WAIT,
) -> ShrinkOutcome:  # fmt: skip
    """Bring the rolling PR (and the dashboard, when configured) in line with ``report``.

    ``report`` is an audit report as JSON data (``AuditReport.as_dict()`` or a saved ``--json`` file).
    With ``apply=False`` only GET requests are made. Raises :class:`ReportError` for an unusable or
    foreign report (before any request) and :class:`ShrinkStopped` when a step cannot be done.
    """
    report = check_report(report)
    check_repository(report, config.repository)
    session = GitHubSession(github, config, sleep, max_wait)
    state = session.read_state(wanted_paths(config, report), proposed_sources)
    plan, ledger, verification = _plan(report, state, config, recreate)
    outcome = ShrinkOutcome(plan, apply, done=session.done)
    if apply:
        session.apply(plan, outcome)
    elif state.open_pull is not None and not plan.close_pull:
        outcome.pr_url = state.open_pull.url
    if config.dashboard:
        outcome.dashboard = _dashboard(outcome, report, ledger, verification, state.dashboard_body)
        outcome.dashboard_step = session.dashboard(outcome.dashboard, apply)
    return outcome


def local_state(root: Path, paths: Collection[str]) -> RepoState:
    """The repository state of a checkout that has no PR yet: its files as the base, ``HEAD`` as base."""
    files = {p: (root / p).read_bytes().decode("utf-8") for p in sorted(paths) if (root / p).is_file()}
    return RepoState(head_commit(root) or NO_COMMIT, files, None, None, ())


def plan_locally(report: Mapping[str, Any], config: BotConfig, root: Path) -> ShrinkOutcome:
    """``exportbot pr --local``: the diff and the PR body against the checkout at ``root``; no network."""
    report = check_report(report)
    check_repository(report, config.repository)
    state = local_state(root, wanted_paths(config, report))
    plan, ledger, verification = _plan(report, state, config, recreate=False)
    outcome = ShrinkOutcome(plan, applied=False, against=f"{root} at {state.base_sha[:12]}")
    if config.dashboard:
        outcome.dashboard = _dashboard(outcome, report, ledger, verification, None)
    return outcome


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
    if outcome.dashboard_step:
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
            outcome = plan_locally(report, config, root)
        else:
            outcome = open_or_update_pr(report, config, make_github(github_url, token), apply_now, recreate=recreate)
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
