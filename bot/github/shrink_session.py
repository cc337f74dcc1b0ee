"""The GitHub half of ``exportbot pr``: read the repository's state, then make a plan's writes.

Reads are not absence. The base commit's files are listed by ONE recursive tree read; a path that tree
lists is then read through the contents API, and a 404, a 5xx or a malformed answer for it is retried
(:data:`READ_TRIES` times) and, if it persists, stops the run before any write. Only a path the tree
does not list is absent. The same holds for the branch tip's tree, the base branch, the head branch
while an open PR uses it, the PR list and the dashboard look-up: any read that fails stops the run, so
a failed read can never shrink the PR's proposals, push a commit or open a second dashboard.

Writes are serial and never retried (a write that failed may still have happened); short rate-limit
waits are waited out. Every stop is a :class:`ShrinkStopped` naming the step, what this run had
already written, and whether a rerun completes it; for a 401/403 it names the token or permission that
is missing instead, since a rerun with the same token fails the same way.

The dashboard and the PR are found by their hidden markers: the open PR by its head branch (GitHub
allows one open PR per head and base) whatever its title and labels; closed PRs count as the bot's only
with the marker; the dashboard as an issue whose body has the dashboard marker, among the issues with
the first configured label and, when none there has it (a maintainer removed the label), through the
issue search for the dashboard's visible signature line.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urlsplit

import requests
from github import Github, GithubException, InputGitTreeElement
from github.GitCommit import GitCommit
from github.GitRef import GitRef
from github.Issue import Issue
from github.PullRequest import PullRequest
from github.Repository import Repository

from bot.config import BotConfig, ConfigError
from bot.github.dashboard import DASHBOARD_MARKER, DASHBOARD_SIGNATURE, LinkCheck
from bot.github.links import IssueFacts, LinkTarget, check_link, link_problem, parse_issue_url
from bot.github.prwriter import HELD_BLOCK, PR_MARKER, Proposal, parse_pr_body, read_trailers
from bot.github.shrink_plan import PullInfo, RepoState, ShrinkOutcome, ShrinkPlan, Tip
from bot.github.tracker import _rate_limit_wait

T = TypeVar("T")
RATE_LIMIT_TRIES = 3
READ_TRIES = 3  # a read that fails this often stops the run (nothing written by it)
READ_BACKOFF = 1.0  # seconds, times the attempt number, between tries of a read
MAX_WAIT = 60.0  # seconds; a longer rate-limit wait ends the run (the next scheduled run continues)

CONTENTS_READ, CONTENTS_WRITE = "contents: read", "contents: write"
PULLS_READ, PULLS_WRITE = "pull-requests: read", "pull-requests: write"
ISSUES_READ, ISSUES_WRITE = "issues: read", "issues: write"
# What GitHub's 422/409 answers mean for this bot: (pattern, what happened, advice, whether a rerun completes it).
_REFUSALS: list[tuple[re.Pattern[str], str, str, bool]] = [
    (re.compile(r"pull request already exists", re.I), "another run opened the PR meanwhile",
     "a rerun finds that PR and updates it", True),
    (re.compile(r"No commits between", re.I), "the branch holds no commit beyond the base (reset meanwhile?)",
     "a rerun pushes the removals again", True),
    (re.compile(r"Reference already exists", re.I), "the branch was created meanwhile",
     "a rerun reads it and continues from there", True),
    (re.compile(r"not a fast forward", re.I), "someone pushed to the branch meanwhile",
     "a rerun reads it (and leaves a branch ending in a commit exportbot did not make alone)", True),
    (re.compile(r"Reference does not exist", re.I), "the branch was deleted meanwhile",
     "a rerun reads what is left: GitHub closed the PR with its branch, and a PR closed unmerged counts as "
     "turned down until upstream or the pins move", True),
    (re.compile(r"Repository is empty", re.I), "the repository has no commits",
     "a rerun will not complete it: push a first commit holding the registry to the base branch", False),
]  # fmt: skip


class ShrinkStopped(Exception):
    """A run stopped at ``step``; ``done`` lists what it had already written (branch, commit, PR)."""

    def __init__(
        self, step: str, problem: str, done: list[str], *, rerun: bool = True, advice: str | None = None
    ) -> None:
        super().__init__(f"{step}: {problem}")
        self.step, self.problem, self.done, self.rerun = step, problem, done, rerun
        self.advice = advice or (
            "a rerun completes it (every step compares with what the repository already holds)"
            if rerun else "a rerun will not complete it"
        )  # fmt: skip

    def explain(self) -> str:
        """The one line a maintainer reads: the step, the answer, what was written, what to do."""
        written = ", ".join(self.done) or "nothing"
        return f"stopped at step '{self.step}': {self.problem}; already written: {written}; {self.advice}"


def _message(error: GithubException) -> str:
    data = error.data if isinstance(error.data, dict) else {}
    parts = [str(data.get("message") or "")]
    parts += [str(e.get("message", "")) for e in data.get("errors") or [] if isinstance(e, dict)]
    return "; ".join(p for p in parts if p)


def _refused(error: GithubException, permission: str, repository: str) -> tuple[str, bool, str | None]:
    """(what GitHub said, whether a rerun completes it, advice) for an answer that is not a rate limit."""
    message = _message(error)
    said = f"GitHub answered HTTP {error.status}" + (f": {message}" if message else "")
    if error.status == 401:
        return said, False, ("a rerun will not complete it: the token was refused (invalid or expired); set a "
                             "valid one in $GITHUB_TOKEN or $GH_TOKEN (or the variable --token-env names)")  # fmt: skip
    if error.status == 403 or (error.status == 404 and permission.endswith("write")):
        return said, False, (
            f"a rerun will not complete it: the token lacks '{permission}' on {repository} (audit.yml's publish "
            "job grants contents, pull-requests and issues: write; a GitHub App needs the same permissions)"
        )
    for pattern, meaning, advice, rerun in _REFUSALS:
        if error.status in (409, 422) and pattern.search(message):
            return f"{said} ({meaning})", rerun, advice
    return said, True, None


def _issue_facts(issue: Issue) -> IssueFacts:
    """What :func:`bot.github.links.check_link` needs of an issue (read here, inside the request's retry)."""
    owner, name, kind = urlsplit(issue.html_url).path.strip("/").split("/")[:3]
    return IssueFacts(f"{owner}/{name}", issue.number, issue.title, issue.state,
                      kind == "pull" or issue.pull_request is not None)  # fmt: skip


class GitHubSession:
    """Reads the state, writes a plan. Every request goes through :meth:`_call`."""

    def __init__(
        self, github: Github, config: BotConfig, sleep: Callable[[float], None], max_wait: float = MAX_WAIT
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

    def _stop(self, step: str, problem: str, *, rerun: bool = True, advice: str | None = None) -> ShrinkStopped:
        return ShrinkStopped(step, problem, self.done, rerun=rerun, advice=advice)

    def _call(
        self, what: str, fn: Callable[[], T], *, permission: str, missing_ok: bool = False
    ) -> T | None:
        """One request. Reads (``permission`` ending in read) are retried on 5xx, malformed JSON, a lost
        connection and a 404 (unless ``missing_ok``: then a 404 is None); writes never are. Short rate
        limits are waited out. Anything else becomes :class:`ShrinkStopped`."""
        read = permission.endswith("read")
        failures: list[str] = []
        limited = 0
        while True:
            try:
                return fn()
            except GithubException as error:
                wait = _rate_limit_wait(error)
                if wait is not None:
                    limited += 1
                    if wait > self.max_wait or limited == RATE_LIMIT_TRIES:
                        reset = datetime.fromtimestamp(math.ceil(time.time() + wait), UTC)
                        raise self._stop(
                            what, f"GitHub rate limit reached; it resets at {reset:%Y-%m-%dT%H:%M:%SZ}",
                            advice="a rerun after the reset completes it",
                        ) from None  # fmt: skip
                    self.sleep(wait)
                    continue
                if error.status == 404 and missing_ok:
                    return None
                if not (read and (error.status >= 500 or error.status == 404)):
                    said, rerun, advice = _refused(error, permission, self.config.repository or "")
                    raise self._stop(what, said, rerun=rerun, advice=advice) from None
                failures.append(f"HTTP {error.status}")
            except ValueError as error:  # PyGithub's json.loads of a truncated or garbled answer
                if not read:
                    raise self._stop(what, f"GitHub's answer was not JSON ({error}); the write may or may "
                                           "not have happened") from None  # fmt: skip
                failures.append("malformed JSON" if isinstance(error, json.JSONDecodeError) else str(error))
            except requests.RequestException as error:
                if not read:
                    raise self._stop(what, f"{type(error).__name__} talking to GitHub; the write may or may "
                                           "not have happened") from None  # fmt: skip
                failures.append(type(error).__name__)
            if len(failures) == READ_TRIES:
                advice = None
                if all(f.endswith(("Error", "Timeout")) for f in failures):
                    advice = (f"a rerun completes it once {self.github.requester.base_url} is reachable (--local "
                              "plans against the checkout without a network)")  # fmt: skip
                elif all(f == "HTTP 404" for f in failures):
                    advice = ("a rerun completes it if the 404s were transient; if they persist, check that it "
                              "exists and that the token can see it")  # fmt: skip
                raise self._stop(what, f"the read failed {READ_TRIES} times ({', '.join(failures)})",
                                 advice=advice) from None  # fmt: skip
            self.sleep(READ_BACKOFF * len(failures))

    def _must(self, what: str, fn: Callable[[], T], *, permission: str) -> T:
        result = self._call(what, fn, permission=permission)
        if result is None:  # pragma: no cover - PyGithub returns objects, never None, without missing_ok
            raise self._stop(what, "GitHub answered with nothing")
        return result

    # ── reads ──
    def _ref(self, branch: str, *, must_exist: bool) -> GitRef | None:
        return self._call(f"read branch {branch}", lambda: self.repo.get_git_ref(f"heads/{branch}"),
                          permission=CONTENTS_READ, missing_ok=not must_exist)  # fmt: skip

    def _commit(self, sha: str) -> GitCommit:
        if sha not in self._commits:
            self._commits[sha] = self._must(
                f"read commit {sha[:12]}", lambda: self.repo.get_git_commit(sha), permission=CONTENTS_READ
            )
        return self._commits[sha]

    def _tree(self, commit_sha: str) -> dict[str, str]:
        """Repository path → blob SHA of every file of a commit: ONE recursive tree read."""
        tree_sha = self._commit(commit_sha).tree.sha
        what = f"read the tree of {commit_sha[:12]}"
        tree = self._must(what, lambda: self.repo.get_git_tree(tree_sha, recursive=True), permission=CONTENTS_READ)
        if tree.raw_data.get("truncated"):
            raise self._stop(what, "GitHub truncated the recursive tree (the repository is too large for one "
                                   "read)", rerun=False)  # fmt: skip
        return {item.path: item.sha for item in tree.tree if item.type == "blob"}

    def _text(self, path: str, ref: str, blob_sha: str) -> str:
        """The text of a file the tree lists: a 404 or an answer for another blob is a failed read."""

        def read() -> str:
            found = self.repo.get_contents(path, ref=ref)
            if isinstance(found, list) or found.sha != blob_sha:
                raise ValueError(f"the contents API answered for another object than blob {blob_sha[:12]}")
            if found.encoding != "base64":  # over 1 MB: the contents API sends no content
                blob = self.repo.get_git_blob(blob_sha)  # pragma: no cover - no such file in the tests
                return base64.b64decode(blob.content).decode("utf-8")  # pragma: no cover
            return found.decoded_content.decode("utf-8")

        return self._must(f"read {path} at {ref[:12]}", read, permission=CONTENTS_READ)

    def read_state(
        self, wanted: Collection[str], sources: Callable[[list[Proposal]], Collection[str]],
        linked: Callable[[str | None], Collection[str]] = lambda body: (),
    ) -> RepoState:  # fmt: skip
        """Everything a plan needs. ``wanted``: repository paths of the files a PR may change; ``sources``
        adds the files of the workarounds the open PR proposes, once its body is read; ``linked`` those of the
        items whose links the dashboard asks for, once its body is read."""
        config = self.config
        name = config.repository or ""
        found = self._call(f"read repository {name}", lambda: self.github.get_repo(name), permission=CONTENTS_READ,
                           missing_ok=True)  # fmt: skip
        if found is None:
            raise self._stop(f"read repository {name}", "GitHub answered HTTP 404: Not Found", rerun=False,
                             advice="a rerun will not complete it: check --repo / [tool.exportbot] repository and "
                                    "that the token can see the repository")  # fmt: skip
        self.repo = found
        owner = name.split("/")[0]
        base_ref = self._ref(config.base_branch, must_exist=True)
        assert base_ref is not None
        base_sha = base_ref.object.sha

        pulls = self._must("list pull requests", lambda: list(self.repo.get_pulls(
            state="all", head=f"{owner}:{config.branch}", base=config.base_branch)), permission=PULLS_READ)  # fmt: skip
        open_pulls = sorted((p for p in pulls if p.state == "open"), key=lambda p: p.number)
        self._pull = open_pulls[0] if open_pulls else None
        open_pull = None
        if self._pull is not None:
            pull = self._pull
            labels = tuple(label.name for label in pull.labels)
            open_pull = PullInfo(pull.number, pull.title, pull.body or "", labels, pull.html_url, bool(pull.draft))
        rejected = [p for p in pulls if p.state == "closed" and p.merged_at is None]
        closed = tuple(
            (p.number, proposal)
            for p in rejected
            if PR_MARKER in (p.body or "")
            for proposal in parse_pr_body(p.body)
        )
        dashboard = None
        if config.dashboard:
            self._dashboard = self._find_dashboard()
            dashboard = (self._dashboard.body or "") if self._dashboard is not None else None
        listed = self._tree(base_sha)
        paths = set(wanted) | set(sources(open_pull.proposals if open_pull else [])) | set(linked(dashboard))
        base_files = {path: self._text(path, base_sha, listed[path]) for path in sorted(paths) if path in listed}

        # While an open PR uses the branch, the branch exists: a 404 for it is a failed read.
        ref = self._ref(config.branch, must_exist=open_pull is not None)
        tip, comments = None, ()
        if ref is not None:
            sha = ref.object.sha
            is_bot, recorded = read_trailers(self._commit(sha).message)
            blobs: dict[str, str] = {}
            if is_bot or sha == base_sha:
                blobs = {p: s for p, s in self._tree(sha).items() if p in base_files or p in paths}
            elif self._pull is not None:
                pull = self._pull
                comments = tuple(c.body for c in self._must(
                    "read comments", lambda: list(pull.get_issue_comments()), permission=ISSUES_READ))  # fmt: skip
            tip = Tip(sha, is_bot, recorded, blobs)
        # A PR a human closed still holds its blocks (entries, or a bump's moves); one exportbot closed has none.
        turned_down = frozenset(p.head.sha for p in rejected if HELD_BLOCK.search(p.body or ""))
        return RepoState(base_sha, base_files, tip, open_pull, closed, comments, dashboard, turned_down,
                         tuple((p.number, p.body or "") for p in rejected))  # fmt: skip

    def read_dashboard(self) -> Issue | None:
        """The dashboard issue alone (``exportbot upstream link``): the repository, then the issue."""
        name = self.config.repository or ""
        self.repo = self._must(f"read repository {name}", lambda: self.github.get_repo(name), permission=CONTENTS_READ)
        self._dashboard = self._find_dashboard()
        return self._dashboard

    def _find_dashboard(self) -> Issue | None:
        """The dashboard issue, by its hidden marker (never by title): labelled issues first, then search."""
        config = self.config

        def ours(issues: list[Issue]) -> list[Issue]:
            return [i for i in issues if DASHBOARD_MARKER in (i.body or "") and "/pull/" not in (i.html_url or "")]

        mine: list[Issue] = []
        if config.labels:
            labels = [config.labels[0]]
            mine = ours(self._must(f"list issues labelled {labels[0]}", lambda: list(
                self.repo.get_issues(state="all", labels=labels)), permission=ISSUES_READ))  # fmt: skip
        if not mine:
            query = f'repo:{config.repository} is:issue in:body "{DASHBOARD_SIGNATURE}"'
            mine = ours(self._must("search issues for the dashboard",
                                   lambda: list(self.github.search_issues(query)), permission=ISSUES_READ))  # fmt: skip
        return min(mine, key=lambda i: (i.state != "open", i.number), default=None)

    def check_links(self, requested: Iterable[tuple[str, str]], targets: Mapping[str, LinkTarget]) -> tuple[LinkCheck, ...]:
        """Each requested (item, URL) link judged (bot.github.links.check_link): one GET of the issue the URL names
        when nothing refuses it before (a 404 is "does not resolve"; another failed read stops the run)."""
        checks = []
        for item_id, url in requested:
            target, facts = targets.get(item_id), None
            if link_problem(item_id, url, target) is None:
                repository, number = parse_issue_url(url)
                facts = self._call(f"read {repository}#{number}", lambda r=repository, n=number: _issue_facts(
                    self.github.get_repo(r, lazy=True).get_issue(n)), permission=ISSUES_READ, missing_ok=True)  # fmt: skip
            checks.append(check_link(item_id, url, target, facts))
        return tuple(checks)

    # ── writes ──
    def apply(self, plan: ShrinkPlan, outcome: ShrinkOutcome) -> None:
        """Make the plan's writes, serially, recording each in ``outcome.done`` as it succeeds."""
        config, repo = self.config, self.repo
        pull = self._pull
        if plan.comment and pull is not None:
            text = plan.comment
            self._call("comment", lambda: pull.create_issue_comment(text), permission=ISSUES_WRITE)
            self.done.append(f"commented on #{pull.number}")
        if plan.parents:
            self._push(plan, outcome)
        if plan.open_pull:
            pull = self._must("open pull request", lambda: repo.create_pull(
                base=config.base_branch, head=config.branch, title=plan.title, body=plan.body,
                draft=plan.draft), permission=PULLS_WRITE)  # fmt: skip
            self.done.append(f"opened #{pull.number}{' as a draft' if plan.draft else ''}")
        if pull is not None and (plan.pull_edits or plan.close_pull):
            edits = dict(plan.pull_edits) | ({"state": "closed"} if plan.close_pull else {})
            self._call("update pull request", lambda: pull.edit(**edits), permission=PULLS_WRITE)
            self.done.append(f"{'closed' if plan.close_pull else 'updated'} #{pull.number}")
        if pull is not None and plan.ready_for_review:
            self._call("mark the pull request ready for review", lambda: pull.mark_ready_for_review(),
                       permission=PULLS_WRITE)  # fmt: skip
            self.done.append(f"marked #{pull.number} ready for review")
        if pull is not None and plan.labels:
            self._call("add labels", lambda: pull.add_to_labels(*plan.labels), permission=ISSUES_WRITE)
            self.done.append(f"labelled #{pull.number}: {', '.join(plan.labels)}")
        if pull is not None and plan.reviewers:
            try:
                self._call("request reviewers", lambda: pull.create_review_request(reviewers=list(plan.reviewers)),
                           permission=PULLS_WRITE)  # fmt: skip
                self.done.append(f"requested reviews from {', '.join(plan.reviewers)}")
            except ShrinkStopped as problem:  # the PR stands without them; a human can ask
                outcome.warnings.append(str(problem))
        if pull is not None and not plan.close_pull:
            outcome.pr_url = pull.html_url

    def _push(self, plan: ShrinkPlan, outcome: ShrinkOutcome) -> None:
        """One commit with the plan's files, unless its tree equals its first parent's (then nothing)."""
        config, repo = self.config, self.repo
        base = self._commit(plan.base_sha)
        elements = [
            InputGitTreeElement(path, "100644", "blob", content=new)
            for path, (old, new) in sorted(plan.changes.items())
            if old != new
        ]
        tree = self._must("create tree", lambda: repo.create_git_tree(elements, base.tree), permission=CONTENTS_WRITE)
        parents = [self._commit(sha) for sha in plan.parents]
        if tree.sha == parents[0].tree.sha:
            outcome.warnings.append(f"no commit pushed: its tree would equal that of {parents[0].sha[:12]}")
            return
        commit = self._must("create commit", lambda: repo.create_git_commit(plan.message, tree, parents),
                            permission=CONTENTS_WRITE)  # fmt: skip
        if plan.create_branch:
            self._call("create branch", lambda: repo.create_git_ref(f"refs/heads/{config.branch}", commit.sha),
                       permission=CONTENTS_WRITE)  # fmt: skip
        else:
            ref = self._must("read branch", lambda: repo.get_git_ref(f"heads/{config.branch}"), permission=CONTENTS_READ)
            self._call("move branch", lambda: ref.edit(commit.sha, force=plan.force), permission=CONTENTS_WRITE)
        self.done.append(f"pushed {commit.sha[:12]} to {config.branch}")

    def dashboard(self, body: str, apply: bool) -> str:
        """Create the dashboard issue or edit it in place; returns what was (or would be) done."""
        config, issue = self.config, self._dashboard
        if issue is not None and (issue.body or "") == body:
            return f"dashboard #{issue.number} is up to date"
        if not apply:
            return f"would {'update dashboard #' + str(issue.number) if issue else 'create the dashboard issue'}"
        if issue is None:
            created = self._must("create dashboard", lambda: self.repo.create_issue(
                title=config.dashboard_title, body=body, labels=list(config.labels[:1])), permission=ISSUES_WRITE)  # fmt: skip
            self.done.append(f"created dashboard #{created.number}")
            return f"created dashboard #{created.number}"
        current = issue
        self._call("update dashboard", lambda: current.edit(body=body), permission=ISSUES_WRITE)
        self.done.append(f"updated dashboard #{current.number}")
        return f"updated dashboard #{current.number}"
