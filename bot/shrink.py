"""``exportbot pr``: keep ONE rolling pull request that removes the ledger entries an audit found removable.

The repository is the database (no state file, no cache): the base branch's ledger, the head branch
``exportbot/shrink``, the open PR's body (one hidden block per proposed entry) and the bodies of PRs
closed unmerged are everything a run reads, so the scheduled job and a developer's dry run compute the
same plan. Each run:

1. reads that state (GET requests only), then plans without I/O (bot.prwriter): which entries, the
   edited ledger files (computed from the *base* branch's files), title, body, draft;
2. in a dry run (the default outside CI) prints the plan, the unified diff and the body, and stops;
3. with ``--apply`` (or ``CI=true`` and a token) writes only what differs, serially: a commit on the
   branch (git data API; parent = the branch tip, plus the base tip when the base moved, so the PR diff
   stays exactly the removals), the PR, its labels; reviewers when the PR is opened.

Why it is safe to run again after any failure: every step compares with what the repository already
holds, so a run that stopped after pushing the branch (PR creation failed, rate limit) is completed by
the next one, without a second PR or a second commit. A branch whose tip is a commit the bot did not
make (no ``Exportbot-Commit: true`` trailer) is never pushed to again; the PR gets one comment per such
commit instead, and ``--recreate`` hands the branch back. Rate limits are waited out when short and
otherwise end the run cleanly (exit 1), like any other refused request.

Exit codes: 0 done (or nothing to do); 1 GitHub refused a request or the base ledger is invalid (what
was done so far is printed; the next run completes it); 2 bad options, configuration or report.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import click
import requests
from github import Auth, Github, GithubException, InputGitTreeElement
from github.GitCommit import GitCommit
from github.GitRef import GitRef
from github.Issue import Issue
from github.PullRequest import PullRequest
from github.Repository import Repository
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.config import BotConfig, ConfigError, find_config, load_config, parse_config
from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.options import github_url_option, token_env_option
from bot.prwriter import (
    Proposal,
    ReportError,
    Selection,
    check_report,
    closed_body,
    commit_message,
    dashboard_body,
    git_blob_sha,
    has_human_comment,
    human_commit_comment,
    parse_pr_body,
    pr_body,
    pr_title,
    read_trailers,
    select_proposals,
    shrink_changes,
    unified_diff,
    workaround_changes,
    workaround_rows,
)
from bot.tracker import DEFAULT_API, _rate_limit_wait, _token_from_env
from bot.verdict import REMOVABLE
from bot.verification import VERIFIED_FILE, load_verification
from exporters.ledger import LIST_FILES, Ledger, load_ledger

T = TypeVar("T")
RATE_LIMIT_TRIES = 3
MAX_WAIT = 60.0  # seconds; a longer rate-limit wait ends the run (the next scheduled run continues)
# PyGithub's own pacing; GitHub asks for serial writes, about one per second (secondary rate limits).
SECONDS_BETWEEN_REQUESTS = 0.25
SECONDS_BETWEEN_WRITES = 1.0


class ShrinkStopped(Exception):
    """GitHub refused a request; ``done`` lists what this run had already written."""

    def __init__(self, message: str, done: list[str]) -> None:
        super().__init__(message)
        self.done = done


# ── What a run reads ──
@dataclass(frozen=True)
class PullInfo:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    url: str

    @functools.cached_property
    def proposals(self) -> list[Proposal]:
        """What this PR proposes, read back from its body's hidden blocks (once)."""
        return parse_pr_body(self.body)


@dataclass(frozen=True)
class Tip:
    """The head branch's last commit: whose it is, the base it recorded, the ledger files it holds."""

    sha: str
    is_bot: bool
    recorded_base: str | None
    blobs: Mapping[str, str]  # repository path → blob SHA of the files a PR may change (bot tips only)


@dataclass(frozen=True)
class RepoState:
    base_sha: str
    # repository path → text on the base branch of the files a PR may change: the ledger files and the
    # source files of the workarounds the report or the open PR proposes
    base_files: Mapping[str, str]
    verified_text: str | None  # <registry>/verified.toml on the base branch (read for the dashboard)
    tip: Tip | None  # None: the head branch does not exist
    open_pull: PullInfo | None
    closed: tuple[tuple[int, Proposal], ...]  # (PR number, entry) of PRs closed unmerged
    comments: tuple[str, ...] = ()  # the open PR's comments, read only when a foreign commit is the tip


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
    force: bool = False  # --recreate: the branch is reset, dropping commits the bot did not make
    open_pull: bool = False
    pull_edits: dict[str, str] = field(default_factory=dict)
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
            how = "reset" if self.force else "create" if self.create_branch else "move"
            steps.append(f"commit the removals (parents {', '.join(p[:12] for p in self.parents)}); "
                         f"{how} branch {self.branch}")  # fmt: skip
        if self.open_pull:
            steps.append(f"open a{' draft' if self.draft else ''} PR {self.branch} → {self.base_branch}")
        if self.pull_edits:
            steps.append(f"update the {' and '.join(sorted(self.pull_edits))} of #{self.pull_number}")
        if self.close_pull:
            steps.append(f"close #{self.pull_number}: nothing left to remove")
        if self.labels:
            steps.append(f"add labels {', '.join(self.labels)}")
        if self.reviewers:
            steps.append(f"request reviews from {', '.join(self.reviewers)}")
        return steps


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
    if recreate or not same_files:
        if tip is None or recreate or tip.sha == state.base_sha:
            plan.parents = (state.base_sha,)
        elif tip.recorded_base == state.base_sha:
            plan.parents = (tip.sha,)
        else:  # the base moved: a merge keeps the PR's diff to exactly the removals
            plan.parents = (tip.sha, state.base_sha)
        plan.create_branch = tip is None
        plan.force = recreate and tip is not None
    if pull is None:
        plan.open_pull = True
        plan.labels = config.labels
        plan.reviewers = config.reviewers
    else:
        plan.pull_edits = {
            k: v for k, v in (("title", plan.title), ("body", plan.body)) if getattr(pull, k) != v
        }
        plan.labels = tuple(label for label in config.labels if label not in pull.labels)
    return plan


def _repo_path(config: BotConfig, name: str) -> str:
    return f"{config.registry.strip('/')}/{name}"


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

    @property
    def diff(self) -> str:
        return unified_diff(self.plan.changes)


class _Session:
    """The GitHub half: reads state, writes a plan. Every call goes through :meth:`_call`."""

    def __init__(
        self, github: Github, config: BotConfig, sleep: Callable[[float], None], max_wait: float
    ) -> None:
        if not config.repository:
            raise ConfigError("no repository: set [tool.exportbot] repository or pass --repo OWNER/NAME")
        self.config = config
        self.github = github
        self.repo: Repository
        self.sleep = sleep
        self.max_wait = max_wait
        self.done: list[str] = []
        self._pull: PullRequest | None = None
        self._commits: dict[str, GitCommit] = {}
        self._dashboard: Issue | None = None

    def _call(self, what: str, fn: Callable[[], T], *, missing_ok: bool = False) -> T | None:
        """Run one request; wait out a short rate limit; turn any refusal into :class:`ShrinkStopped`."""
        for attempt in range(1, RATE_LIMIT_TRIES + 1):
            try:
                return fn()
            except GithubException as error:
                if missing_ok and error.status == 404:
                    return None
                wait = _rate_limit_wait(error)
                if wait is None:
                    message = error.data.get("message") if isinstance(error.data, dict) else None
                    raise ShrinkStopped(
                        f"{what}: GitHub answered HTTP {error.status}" + (f": {message}" if message else ""),
                        self.done,
                    ) from None
                if wait > self.max_wait or attempt == RATE_LIMIT_TRIES:
                    reset = datetime.fromtimestamp(math.ceil(time.time() + wait), UTC)
                    raise ShrinkStopped(
                        f"{what}: GitHub rate limit reached; it resets at {reset:%Y-%m-%dT%H:%M:%SZ}",
                        self.done,
                    ) from None
                self.sleep(wait)
            except requests.RequestException as error:
                raise ShrinkStopped(f"{what}: {type(error).__name__} talking to GitHub", self.done) from None
        raise AssertionError("unreachable")  # the loop returns or raises

    def _must(self, what: str, fn: Callable[[], T]) -> T:
        result = self._call(what, fn)
        assert result is not None
        return result

    def _text(self, path: str, ref: str) -> str | None:
        found = self._call(f"read {path}", lambda: self.repo.get_contents(path, ref=ref), missing_ok=True)
        if found is None or isinstance(found, list):
            return None
        return found.decoded_content.decode("utf-8")

    def _ref(self, branch: str) -> GitRef | None:
        return self._call(
            f"read branch {branch}", lambda: self.repo.get_git_ref(f"heads/{branch}"), missing_ok=True
        )

    def _blobs(self, ref: str, paths: Collection[str]) -> dict[str, str]:
        """Repository path → blob SHA of ``paths`` at ``ref``: one listing per folder, no file contents."""
        blobs = {}
        for directory in sorted({str(PurePosixPath(path).parent) for path in paths}):
            listing = self._call(
                f"list {directory}", lambda d=directory: self.repo.get_contents(d, ref=ref), missing_ok=True
            )
            found = listing if isinstance(listing, list) else []
            blobs |= {c.path: c.sha for c in found if c.path in paths}
        return blobs

    def _commit(self, sha: str) -> GitCommit:
        if sha not in self._commits:
            self._commits[sha] = self._must(f"read commit {sha[:12]}", lambda: self.repo.get_git_commit(sha))
        return self._commits[sha]

    def read_state(self, source_paths: Collection[str] = ()) -> RepoState:
        """Everything a plan needs; ``source_paths`` are the files of the workarounds the report found
        removable (the open PR's own workaround files are added once its body is read)."""
        config = self.config
        name = config.repository or ""
        self.repo = self._must(f"read repository {name}", lambda: self.github.get_repo(name))
        owner = name.split("/")[0]
        base_ref = self._ref(config.base_branch)
        if base_ref is None:
            raise ShrinkStopped(
                f"base branch {config.base_branch} not found in {config.repository}", self.done
            )
        base_sha = base_ref.object.sha
        base_files = {}
        for name in LIST_FILES.values():
            text = self._text(_repo_path(config, name), base_sha)
            if text is not None:
                base_files[_repo_path(config, name)] = text
        verified = self._text(_repo_path(config, VERIFIED_FILE), base_sha) if config.dashboard else None

        pulls = self._must("list pull requests", lambda: list(self.repo.get_pulls(
            state="all", head=f"{owner}:{config.branch}", base=config.base_branch)))  # fmt: skip
        open_pulls = sorted((p for p in pulls if p.state == "open"), key=lambda p: p.number)
        self._pull = open_pulls[0] if open_pulls else None
        open_pull = None
        if self._pull is not None:
            pull = self._pull
            labels = tuple(label.name for label in pull.labels)
            open_pull = PullInfo(pull.number, pull.title, pull.body or "", labels, pull.html_url)
        closed = tuple(
            (p.number, proposal)
            for p in pulls
            if p.state == "closed" and p.merged_at is None
            for proposal in parse_pr_body(p.body)
        )
        proposed = open_pull.proposals if open_pull else []
        sources = set(source_paths) | {p.source for p in proposed if p.is_workaround and p.source}
        for path in sorted(sources - set(base_files)):
            text = self._text(path, base_sha)
            if text is not None:
                base_files[path] = text

        ref = self._ref(config.branch)
        tip, comments = None, ()
        if ref is not None:
            sha = ref.object.sha
            is_bot, recorded = read_trailers(self._commit(sha).message)
            blobs: dict[str, str] = {}
            if is_bot or sha == base_sha:
                blobs = self._blobs(sha, set(base_files))
            elif self._pull is not None:
                pull = self._pull
                comments = tuple(
                    c.body for c in self._must("read comments", lambda: list(pull.get_issue_comments()))
                )
            tip = Tip(sha, is_bot, recorded, blobs)
        if config.dashboard:
            self._dashboard = self._find_dashboard()
        return RepoState(base_sha, base_files, verified, tip, open_pull, closed, comments)

    def _find_dashboard(self) -> Issue | None:
        config = self.config
        labels = list(config.labels[:1])
        issues = self._must("list issues", lambda: list(self.repo.get_issues(state="all", labels=labels)))
        titled = [i for i in issues if i.title == config.dashboard_title]
        mine = [i for i in titled if self._call("read issue", lambda i=i: i.pull_request) is None]
        return min(mine, key=lambda i: (i.state != "open", i.number), default=None)

    def apply(self, plan: ShrinkPlan, outcome: ShrinkOutcome) -> None:
        """Make the plan's writes, serially, recording each in ``outcome.done`` as it succeeds."""
        config, repo = self.config, self.repo
        pull = self._pull
        if plan.comment and pull is not None:
            text = plan.comment
            self._call("comment", lambda: pull.create_issue_comment(text))
            self.done.append(f"commented on #{pull.number}")
        if plan.parents:
            base = self._commit(plan.base_sha)
            elements = [
                InputGitTreeElement(path, "100644", "blob", content=new)
                for path, (old, new) in sorted(plan.changes.items())
                if old != new
            ]
            tree = self._must("create tree", lambda: repo.create_git_tree(elements, base.tree))
            parents = [self._commit(sha) for sha in plan.parents]
            commit = self._must("create commit", lambda: repo.create_git_commit(plan.message, tree, parents))
            if plan.create_branch:
                self._call(
                    "create branch", lambda: repo.create_git_ref(f"refs/heads/{config.branch}", commit.sha)
                )
            else:
                ref = self._must("read branch", lambda: repo.get_git_ref(f"heads/{config.branch}"))
                self._call("move branch", lambda: ref.edit(commit.sha, force=plan.force))
            self.done.append(f"pushed {commit.sha[:12]} to {config.branch}")
        if plan.open_pull:
            pull = self._must("open pull request", lambda: repo.create_pull(
                base=config.base_branch, head=config.branch, title=plan.title, body=plan.body,
                draft=plan.draft))  # fmt: skip
            self.done.append(f"opened #{pull.number}{' as a draft' if plan.draft else ''}")
        if pull is not None and (plan.pull_edits or plan.close_pull):
            edits = dict(plan.pull_edits) | ({"state": "closed"} if plan.close_pull else {})
            self._call("update pull request", lambda: pull.edit(**edits))
            self.done.append(f"{'closed' if plan.close_pull else 'updated'} #{pull.number}")
        if pull is not None and plan.labels:
            self._call("add labels", lambda: pull.add_to_labels(*plan.labels))
            self.done.append(f"labelled #{pull.number}: {', '.join(plan.labels)}")
        if pull is not None and plan.reviewers:
            try:
                self._call(
                    "request reviewers", lambda: pull.create_review_request(reviewers=list(plan.reviewers))
                )
                self.done.append(f"requested reviews from {', '.join(plan.reviewers)}")
            except ShrinkStopped as problem:  # the PR stands without them; a human can ask
                outcome.warnings.append(str(problem))
        if pull is not None and not plan.close_pull:
            outcome.pr_url = pull.html_url

    def dashboard(self, body: str, apply: bool) -> str:
        """Create the dashboard issue or edit it in place; returns what was (or would be) done."""
        config, issue = self.config, self._dashboard
        if issue is not None and (issue.body or "") == body:
            return f"dashboard #{issue.number} is up to date"
        if not apply:
            return (
                f"would {'update dashboard #' + str(issue.number) if issue else 'create the dashboard issue'}"
            )
        if issue is None:
            created = self._must("create dashboard", lambda: self.repo.create_issue(
                title=config.dashboard_title, body=body, labels=list(config.labels[:1])))  # fmt: skip
            self.done.append(f"created dashboard #{created.number}")
            return f"created dashboard #{created.number}"
        current = issue
        self._call("update dashboard", lambda: current.edit(body=body))
        self.done.append(f"updated dashboard #{current.number}")
        return f"updated dashboard #{current.number}"


def open_or_update_pr(
    report: Mapping[str, Any], config: BotConfig, github: Github, apply: bool, *, recreate: bool = False,
    sleep: Callable[[float], None] = time.sleep, max_wait: float = MAX_WAIT,
) -> ShrinkOutcome:  # fmt: skip
    """Bring the rolling PR (and the dashboard, when configured) in line with ``report``.

    ``report`` is an audit report as JSON data (``AuditReport.as_dict()`` or a saved ``--json`` file).
    With ``apply=False`` only GET requests are made. Raises :class:`ShrinkStopped` when GitHub refuses
    a request, :class:`ReportError` for an unusable report, ``LedgerError`` for an invalid base ledger.
    """
    report = check_report(report)
    session = _Session(github, config, sleep, max_wait)
    state = session.read_state(
        {row["source"] for row in workaround_rows(report) if row["verdict"] == REMOVABLE and row.get("source")}
    )
    with tempfile.TemporaryDirectory(prefix="exportbot-base-") as scratch:
        base_dir = Path(scratch)
        for name in LIST_FILES.values():
            text = state.base_files.get(_repo_path(config, name), "")
            (base_dir / name).write_bytes(text.encode("utf-8"))  # bytes: CRLF files stay CRLF
        if state.verified_text is not None:
            (base_dir / VERIFIED_FILE).write_text(state.verified_text, encoding="utf-8")
        ledger = load_ledger(base_dir)
        verification = load_verification(base_dir)
        plan = plan_shrink(report, state, ledger, base_dir, config, recreate=recreate)
    outcome = ShrinkOutcome(plan, apply, done=session.done)
    if apply:
        session.apply(plan, outcome)
    elif state.open_pull is not None and not plan.close_pull:
        outcome.pr_url = state.open_pull.url
    if config.dashboard:
        links = {p.id: outcome.pr_url or "(dry run: not opened)" for p in plan.selection.proposals}
        links |= {i: f"#{n} closed unmerged" for i, n in plan.selection.turned_down.items()}
        outcome.dashboard = dashboard_body(report, ledger, verification, links, plan.by_hand)
        outcome.dashboard_step = session.dashboard(outcome.dashboard, apply)
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


def print_outcome(outcome: ShrinkOutcome, console: Console) -> None:
    """The per-entry table, the steps, the diff and (dry run) the body, so a run is never silent."""
    plan = outcome.plan
    proposed = {p.id for p in plan.selection.proposals}
    table = Table(title=f"shrink PR: {len(proposed)} entr{'y' if len(proposed) == 1 else 'ies'} to remove")
    for column in ("entry", "in PR", "why"):
        table.add_column(column, overflow="fold")
    for entry_id, note in plan.selection.notes.items():
        table.add_row(escape(entry_id), "yes" if entry_id in proposed else "no", escape(note))
    console.print(table)
    steps = outcome.done if outcome.applied else [f"would {s}" for s in plan.steps()]
    if outcome.applied and plan.blocked:
        steps = [plan.blocked, *steps]
    click.echo("\n".join(steps) or "nothing to change: the repository already matches this report")
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
    if outcome.dashboard_step:
        click.echo(outcome.dashboard_step)
    if outcome.pr_url:
        click.echo(f"pull request: {outcome.pr_url}")
    click.echo(outcome.diff or "(no ledger change)")
    if not outcome.applied:
        click.echo(f"--- PR title: {plan.title}\n--- PR body:\n{plan.body}")
        if outcome.dashboard:
            click.echo(f"--- dashboard body:\n{outcome.dashboard}")


def run_pr(
    report: Mapping[str, Any], *, apply: bool | None, github_url: str | None = None,
    token_env: str | None = None, repository: str | None = None, config_file: Path | None = None,
    recreate: bool = False,
) -> int:  # fmt: skip
    """What ``exportbot pr`` (and ``audit --open-prs``) does after reading the report; the exit code."""
    try:
        config = load_config(config_file or find_config())
        repository = repository or config.repository or os.environ.get("GITHUB_REPOSITORY")
        if repository:
            checked = parse_config({"repository": repository}, "--repo / $GITHUB_REPOSITORY")
            config = dataclasses.replace(config, repository=checked.repository)
    except ConfigError as error:
        raise UsageProblem(str(error)) from None
    token = _token_from_env(token_env)
    apply_now = should_apply(apply, token is not None)
    console = Console()
    try:
        outcome = open_or_update_pr(
            report, config, make_github(github_url, token), apply_now, recreate=recreate
        )
    except (ConfigError, ReportError) as error:
        raise UsageProblem(str(error)) from None
    except ShrinkStopped as stop:
        click.echo("\n".join(stop.done))
        click.echo(f"stopped: {stop}; the next run completes the update", err=True)
        return EXIT_FAILED
    print_outcome(outcome, console)
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
    "--recreate",
    is_flag=True,
    help="Reset the branch to the base plus one fresh exportbot commit, dropping other commits.",
)
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
def pr_command(report_file: Path, apply: bool | None, recreate: bool, github_url: str | None,
               token_env: str | None, repository: str | None, config_file: Path | None) -> None:  # fmt: skip
    """Open or update the one rolling PR removing the ledger entries REPORT found removable.

    Dry run unless --apply (or CI=true with a token): prints the plan, the unified diff and the PR body.
    Exit 0 done or nothing to do, 1 GitHub refused a request (the next run completes it), 2 bad input.
    """
    try:
        report = check_report(json.loads(report_file.read_text(encoding="utf-8")))
    except ValueError as error:  # JSONDecodeError and ReportError
        raise UsageProblem(f"{report_file}: {error}") from None
    code = run_pr(report, apply=apply, github_url=github_url, token_env=token_env, repository=repository,
                  config_file=config_file, recreate=recreate)  # fmt: skip
    click.get_current_context().exit(code)
