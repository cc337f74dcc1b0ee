"""A fake GitHub REST API for tests: real HTTP on 127.0.0.1, real JSON, in-memory state.

Why a server and not mocks: the bot talks to GitHub through PyGithub, and mocking PyGithub would only
test our guesses about it. Here the real client sends real requests over a socket, so retries,
timeouts, ETags, rate-limit headers and error mapping are exercised exactly as in production.

The responses carry the fields and types of GitHub's published OpenAPI schemas
(``tests/data/github-rest-openapi-subset.json``, vendored; ``tests/test_tracker.py`` checks them). URLs in
payloads that the client follows (``url``, ``*_url`` API links) point back at this server; web links
(``html_url``) use ``web_url``, ``https://github.com`` by default.

What it models:

* repositories with issues, pull requests (which are issues too, as on GitHub), labels, comments;
* a small git object store per repository (blobs, trees, commits by real git SHA-1, refs), with the
  git data API and the contents API on top, so a test can read a file back at a branch;
* ``ETag`` on every successful GET and ``304 Not Modified`` for a matching ``If-None-Match``; a 304
  does not count against the modelled rate limit, as on GitHub;
* ``x-ratelimit-*`` headers on every response and a ``403`` once the modelled budget is spent;
* a request log (method, path, query, headers without ``Authorization``) for counting requests;
* fault injection per path pattern: status codes, delays, malformed bodies (see :class:`Fault`);
* races: :meth:`FakeGitHub.before` runs a callback just before a matching request is answered (another
  actor acting between the client's read and its write), so the client meets GitHub's real 409/422
  answers from the state, not injected ones;
* issue search (``GET /search/issues``: ``repo:``, ``is:issue``/``is:pr``, ``in:title``/``in:body``,
  ``label:``, ``state:``, words and quoted phrases, matched case-insensitively), with its own budget as on
  GitHub (``search_limit`` requests per ``search_window`` seconds, 30 a minute by default): past it, a ``403``
  with ``retry-after`` (the seconds until the window frees a request) and ``x-ratelimit-resource: search``;
* GraphQL (``POST /graphql``): the ``markPullRequestReadyForReview`` and ``convertPullRequestToDraft``
  mutations PyGithub sends, with GitHub's ``errors`` answers for unknown nodes and mutations;
* empty repositories (``add_repo(..., files={}, empty=True)``): git data reads answer 409 "Git Repository
  is empty." as GitHub does.

Not modelled: forks, merging through the API, branch protection, the rest of GraphQL, pagination beyond
``per_page``/``page`` with a ``Link`` header, separate budgets for anonymous and authenticated calls.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import itertools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest

API_VERSION = "2022-11-28"
STATE_REASONS = ("completed", "not_planned", "duplicate", "reopened")
_DOCS = "https://docs.github.com/rest"
_PRIMARY_LIMIT_MESSAGE = (
    "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, "
    "please include the request ID."
)
_SECONDARY_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)
_DEFAULT_ERROR_MESSAGES = {
    401: "Requires authentication",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    422: "Validation Failed",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
}


def _iso(timestamp: float | None = None) -> str:
    """GitHub's timestamp format: UTC, whole seconds, trailing ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if timestamp is None else timestamp))


def _git_sha(kind: str, payload: bytes) -> str:
    """The SHA-1 git itself would give the object, so SHAs look and behave like real ones."""
    return hashlib.sha1(f"{kind} {len(payload)}\0".encode() + payload).hexdigest()


def _stable_id(text: str) -> int:
    """A deterministic positive int64-sized id for names (users) that have no counter."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def _node_id(prefix: str, number: int) -> str:
    return f"{prefix}_" + base64.b64encode(str(number).encode()).decode().rstrip("=")


def _b64_lines(data: bytes) -> str:
    """Base64 the way the contents API sends it: wrapped at 60 characters."""
    encoded = base64.b64encode(data).decode()
    return "".join(encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60))


# --------------------------------------------------------------------------------------------------
# Faults and the request log: the two things tests use to steer and observe the server.


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour for one request.

    ``delay`` seconds pass before anything else happens (use it to trip client timeouts). Then, if
    ``status`` is set, the server answers with that status, ``headers`` and a GitHub-style error body
    (or ``body`` when given); if only ``body`` is set, it answers 200 with that raw text.
    """

    status: int | None = None
    delay: float = 0.0
    body: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, status: int, message: str | None = None) -> Fault:
        """A plain HTTP error such as 404, 500 or 502 with GitHub's JSON error body."""
        text = message or _DEFAULT_ERROR_MESSAGES.get(status, "Error")
        return cls(status=status, body=json.dumps({"message": text, "documentation_url": _DOCS}))

    @classmethod
    def rate_limited(cls, reset_in: float) -> Fault:
        """GitHub's primary rate limit: 403, ``x-ratelimit-remaining: 0``, reset ``reset_in`` s from now."""
        reset = math.ceil(time.time() + reset_in)
        body = json.dumps({"message": _PRIMARY_LIMIT_MESSAGE, "documentation_url": _DOCS})
        return cls(
            status=403, body=body, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
        )

    @classmethod
    def too_many_requests(cls, retry_after: int, status: int = 429) -> Fault:
        """GitHub's secondary rate limit: 429 (or 403) with ``retry-after`` in seconds."""
        body = json.dumps({"message": _SECONDARY_LIMIT_MESSAGE, "documentation_url": _DOCS})
        return cls(status=status, body=body, headers={"retry-after": str(retry_after)})

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Answer normally, but only after ``seconds``."""
        return cls(delay=seconds)

    @classmethod
    def malformed(cls) -> Fault:
        """A 200 whose body starts like JSON and is not (a truncating proxy, say)."""
        return cls(body='{"url": "truncated')


@dataclass
class _FaultRule:
    pattern: str
    method: str | None
    fault: Fault
    remaining: int | None  # None: forever


@dataclass
class _Hook:
    pattern: str
    method: str | None
    action: Callable[[FakeGitHub], None]
    remaining: int | None


@dataclass
class LoggedRequest:
    """One request as the server saw it. ``headers`` never includes ``Authorization``."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    authenticated: bool
    status: int | None = None  # filled in once answered


# --------------------------------------------------------------------------------------------------
# In-memory model.


@dataclass(frozen=True)
class _Blob:
    data: bytes


@dataclass(frozen=True)
class _TreeEntry:
    mode: str
    type: str
    sha: str


@dataclass(frozen=True)
class _Tree:
    entries: Mapping[str, _TreeEntry]


@dataclass(frozen=True)
class _Commit:
    tree: str
    parents: tuple[str, ...]
    message: str
    author: Mapping[str, str]
    committer: Mapping[str, str]


@dataclass
class _Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass
class _Comment:
    id: int
    issue: int
    body: str
    user: str
    created_at: str
    updated_at: str


@dataclass
class _Pull:
    head: str
    base: str
    head_sha: str
    base_sha: str
    draft: bool = False
    maintainer_can_modify: bool = False
    merged_at: str | None = None
    merge_commit_sha: str | None = None
    head_repo: str | None = None  # "owner/name" of a fork the head branch lives in (None: this repository)


@dataclass
class _Issue:
    number: int
    id: int
    title: str
    body: str | None
    user: str
    created_at: str
    updated_at: str
    state: str = "open"
    state_reason: str | None = None
    closed_at: str | None = None
    labels: list[str] = field(default_factory=list)
    comments: list[_Comment] = field(default_factory=list)
    pull: _Pull | None = None


@dataclass
class _Repo:
    owner: str
    name: str
    id: int
    default_branch: str
    created_at: str
    issues: dict[int, _Issue] = field(default_factory=dict)
    labels: dict[str, _Label] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    objects: dict[str, _Blob | _Tree | _Commit] = field(default_factory=dict)
    check_runs: list[dict[str, Any]] = field(default_factory=list)  # as GitHub answers them (checks API)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


class _HttpError(Exception):
    """Raised by route handlers; becomes a GitHub-style JSON error response."""

    def __init__(self, status: int, message: str | None = None, errors: list[Any] | None = None) -> None:
        super().__init__(status, message)
        self.status = status
        self.payload: dict[str, Any] = {"message": message or _DEFAULT_ERROR_MESSAGES.get(status, "Error")}
        if errors:
            self.payload["errors"] = errors
        self.payload["documentation_url"] = _DOCS
        self.payload["status"] = str(status)


@dataclass
class _Request:
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    login: str | None
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (Link)


_REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern + r"/?"), handler)
    for method, pattern, handler in [
        ("GET", r"/rate_limit", "_get_rate_limit"),
        ("GET", r"/user", "_get_user"),
        ("GET", r"/search/issues", "_search_issues"),
        ("POST", r"/graphql", "_graphql"),
        ("GET", _REPO, "_get_repo"),
        ("GET", _REPO + r"/issues", "_list_issues"),
        ("POST", _REPO + r"/issues", "_create_issue"),
        ("GET", _REPO + r"/issues/comments/(?P<id>\d+)", "_get_comment"),
        ("PATCH", _REPO + r"/issues/comments/(?P<id>\d+)", "_edit_comment"),
        ("GET", _REPO + r"/issues/(?P<number>\d+)", "_get_issue"),
        ("PATCH", _REPO + r"/issues/(?P<number>\d+)", "_edit_issue"),
        ("GET", _REPO + r"/issues/(?P<number>\d+)/comments", "_list_comments"),
        ("POST", _REPO + r"/issues/(?P<number>\d+)/comments", "_create_comment"),
        ("GET", _REPO + r"/issues/(?P<number>\d+)/labels", "_list_issue_labels"),
        ("POST", _REPO + r"/issues/(?P<number>\d+)/labels", "_add_issue_labels"),
        ("PUT", _REPO + r"/issues/(?P<number>\d+)/labels", "_set_issue_labels"),
        ("DELETE", _REPO + r"/issues/(?P<number>\d+)/labels/(?P<name>.+)", "_remove_issue_label"),
        ("GET", _REPO + r"/labels", "_list_labels"),
        ("POST", _REPO + r"/labels", "_create_label"),
        ("GET", _REPO + r"/labels/(?P<name>.+)", "_get_label"),
        ("POST", _REPO + r"/check-runs", "_create_check_run"),
        ("PATCH", _REPO + r"/check-runs/(?P<id>\d+)", "_edit_check_run"),
        ("GET", _REPO + r"/commits/(?P<ref>[^/]+)/check-runs", "_list_check_runs"),
        ("GET", _REPO + r"/commits/(?P<sha>[0-9a-f]{40})", "_get_repo_commit"),
        ("GET", _REPO + r"/pulls", "_list_pulls"),
        ("POST", _REPO + r"/pulls", "_create_pull"),
        ("GET", _REPO + r"/pulls/(?P<number>\d+)", "_get_pull"),
        ("PATCH", _REPO + r"/pulls/(?P<number>\d+)", "_edit_pull"),
        ("GET", _REPO + r"/git/ref/(?P<ref>.+)", "_get_ref"),
        ("GET", _REPO + r"/git/refs", "_list_refs"),
        ("GET", _REPO + r"/git/refs/(?P<ref>.+)", "_get_ref"),
        ("GET", _REPO + r"/git/matching-refs/(?P<ref>.*)", "_matching_refs"),
        ("POST", _REPO + r"/git/refs", "_create_ref"),
        ("PATCH", _REPO + r"/git/refs/(?P<ref>.+)", "_update_ref"),
        ("DELETE", _REPO + r"/git/refs/(?P<ref>.+)", "_delete_ref"),
        ("POST", _REPO + r"/git/blobs", "_create_blob"),
        ("GET", _REPO + r"/git/blobs/(?P<sha>[0-9a-f]{40})", "_get_blob"),
        ("POST", _REPO + r"/git/trees", "_create_tree"),
        ("GET", _REPO + r"/git/trees/(?P<sha>.+)", "_get_tree"),
        ("POST", _REPO + r"/git/commits", "_create_commit"),
        ("GET", _REPO + r"/git/commits/(?P<sha>[0-9a-f]{40})", "_get_commit"),
        ("GET", _REPO + r"/contents(?:/(?P<path>.*))?", "_get_contents"),
        ("PUT", _REPO + r"/contents/(?P<path>.+)", "_put_contents"),
        ("DELETE", _REPO + r"/contents/(?P<path>.+)", "_delete_contents"),
    ]
]


# Handlers that answer 409 "Git Repository is empty." on a repository without commits, as GitHub does.
_GIT_DATA_HANDLERS = {
    "_get_ref", "_list_refs", "_matching_refs", "_create_ref", "_update_ref", "_get_tree", "_create_tree",
    "_get_commit", "_create_commit", "_get_contents", "_get_blob",
}  # fmt: skip
_SEARCH_TERM = re.compile(r'(?P<key>[a-z]+):(?P<value>"[^"]*"|\S+)|"(?P<phrase>[^"]*)"|(?P<word>\S+)')
_MUTATION = re.compile(r"\{\s*(?P<name>\w+)\s*\(input:")


class _Handler(BaseHTTPRequestHandler):
    """Hands every request to the owning :class:`FakeGitHub`; HTTP/1.0, one request per connection."""

    server: _Server

    def do_GET(self) -> None:
        self.server.fake._serve(self)

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log; tests read :attr:`FakeGitHub.requests` instead."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGitHub) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class FakeGitHub:
    """The fake server. Use as a context manager, or ``start()`` / ``stop()``.

    Set up state with :meth:`add_repo`, :meth:`add_issue`, :meth:`add_pull`, :meth:`close_issue`,
    :meth:`reopen_issue`, :meth:`merge_pull`; steer with :meth:`inject`; observe with
    :attr:`requests`, :meth:`count`, :meth:`read_file`, :meth:`labels_of`, :meth:`comments_of`.
    """

    def __init__(
        self,
        *,
        web_url: str = "https://github.com",
        login: str = "exportbot",
        rate_limit: int = 5000,
        issue_merged_at: bool = True,
        search_limit: int = 30,
        search_window: float = 60.0,
    ) -> None:
        """``issue_merged_at=False`` drops ``pull_request.merged_at`` from issue payloads, as older
        GitHub Enterprise servers do, so clients must ask the pulls endpoint. ``search_limit`` searches are
        answered per ``search_window`` seconds (a test shortens the window to stay fast)."""
        self.search_limit, self.search_window = search_limit, search_window
        self._searches: list[float] = []  # when the searches of the current window were answered
        self.web_url = web_url.rstrip("/")
        self.login = login
        self.rate_limit = rate_limit
        self.rate_used = 0
        self.rate_reset = math.ceil(time.time()) + 3600
        self.issue_merged_at = issue_merged_at
        self._repos: dict[str, _Repo] = {}
        self._faults: list[_FaultRule] = []
        self._hooks: list[_Hook] = []
        self._log: list[LoggedRequest] = []
        self._lock = threading.RLock()
        self._ids = itertools.count(1_000_000_001)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL to give PyGithub: ``Github(base_url=fake.url)``."""
        if self._server is None:
            raise RuntimeError("FakeGitHub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGitHub:
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still sleeping in an injected delay are cut short."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- set-up API ----------------------------------------------------------------------------------

    def add_repo(
        self, full_name: str, *, default_branch: str = "main", files: Mapping[str, str] | None = None,
        empty: bool = False,
    ) -> None:
        """Create ``owner/name`` with one commit on ``default_branch`` holding ``files`` (``empty``: no
        commit at all, as a repository just created on GitHub)."""
        owner, name = full_name.split("/")
        with self._lock:
            repo = _Repo(owner, name, next(self._ids), default_branch, _iso())
            self._repos[full_name.lower()] = repo
            if empty:
                return
            files = {"README.md": f"# {name}\n"} if files is None else files
            changes = {path: self._blob_entry(repo, text.encode()) for path, text in files.items()}
            tree = self._tree_with(repo, None, changes)
            repo.refs[f"refs/heads/{default_branch}"] = self._store_commit(repo, tree, (), "Initial commit")

    def add_issue(
        self,
        full_name: str,
        title: str = "An upstream bug",
        *,
        state: str = "open",
        state_reason: str | None = None,
        body: str | None = None,
        labels: tuple[str, ...] = (),
    ) -> int:
        """Add an issue (creating the repo if needed); ``state="closed"`` defaults the reason to completed."""
        with self._lock:
            repo = self._repos.get(full_name.lower())
            if repo is None:
                self.add_repo(full_name)
                repo = self._repos[full_name.lower()]
            issue = self._new_issue(repo, title, body, self.login)
            for label in labels:
                self._ensure_label(repo, label)
            issue.labels = list(labels)
            if state == "closed":
                self._set_state(issue, "closed", state_reason or "completed")
            elif state_reason is not None:
                issue.state_reason = state_reason
            return issue.number

    def add_pull(
        self,
        full_name: str,
        title: str = "Fix the upstream bug",
        *,
        head: str = "fix",
        base: str | None = None,
        state: str = "open",
        merged: bool = False,
        files: Mapping[str, str] | None = None,
        head_repo: str | None = None,
    ) -> int:
        """Add a pull request from branch ``head`` (created at ``base``'s tip plus one commit changing ``files``;
        ``head_repo``: the fork the branch lives in, as GitHub shows it; the commits stay in this repository)."""
        with self._lock:
            if full_name.lower() not in self._repos:
                self.add_repo(full_name)
            repo = self._repos[full_name.lower()]
            base = base or repo.default_branch
            base_sha = repo.refs[f"refs/heads/{base}"]
            head_ref = f"refs/heads/{head}"
            if head_ref not in repo.refs:
                tree = self._commit(repo, base_sha).tree
                if files:
                    changes = {path: self._blob_entry(repo, text.encode()) for path, text in files.items()}
                    tree = self._tree_with(repo, tree, changes)
                repo.refs[head_ref] = self._store_commit(repo, tree, (base_sha,), title)
            issue = self._new_issue(repo, title, None, self.login)
            issue.pull = _Pull(head=head, base=base, head_sha=repo.refs[head_ref], base_sha=base_sha, head_repo=head_repo)
            if merged:
                self._merge(repo, issue)
            elif state == "closed":
                self._set_state(issue, "closed", None)
            return issue.number

    def close_issue(self, full_name: str, number: int, reason: str = "completed") -> None:
        with self._lock:
            self._set_state(self._issue(self._repos[full_name.lower()], number), "closed", reason)

    def reopen_issue(self, full_name: str, number: int) -> None:
        with self._lock:
            self._set_state(self._issue(self._repos[full_name.lower()], number), "open", "reopened")

    def merge_pull(self, full_name: str, number: int) -> None:
        """Merge as a human would in the web UI: base moves to a merge commit, the PR closes."""
        with self._lock:
            repo = self._repos[full_name.lower()]
            self._merge(repo, self._issue(repo, number))

    def inject(self, pattern: str, fault: Fault, *, times: int | None = 1, method: str | None = None) -> None:
        """Queue ``fault`` for the next ``times`` requests (``None``: all) whose path matches the glob
        ``pattern`` (for example ``/repos/*/issues/*``). Rules apply in the order they were added."""
        with self._lock:
            self._faults.append(_FaultRule(pattern, method, fault, times))

    def before(
        self, pattern: str, action: Callable[[FakeGitHub], None], *, method: str | None = None, times: int | None = 1
    ) -> None:
        """Run ``action(self)`` just before answering the next ``times`` requests matching ``pattern``
        (and ``method``): another actor changing the repository between a client's read and its write."""
        with self._lock:
            self._hooks.append(_Hook(pattern, method, action, times))

    # ---- observation API -------------------------------------------------------------------------------

    @property
    def requests(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self._log)

    def count(self, pattern: str = "*", *, method: str | None = None, status: int | None = None) -> int:
        """How many logged requests match the path glob (and method and status when given)."""
        return sum(
            1
            for entry in self.requests
            if fnmatch.fnmatchcase(entry.path, pattern)
            and (method is None or entry.method == method)
            and (status is None or entry.status == status)
        )

    @property
    def rate_remaining(self) -> int:
        return max(self.rate_limit - self.rate_used, 0)

    def read_file(self, full_name: str, branch: str, path: str) -> str | None:
        """The text of ``path`` at the tip of ``branch``; None if the branch or file is missing."""
        with self._lock:
            repo = self._repos[full_name.lower()]
            sha = repo.refs.get(f"refs/heads/{branch}")
            entry = self._lookup(repo, self._commit(repo, sha).tree, path) if sha else None
            if entry is None or entry.type != "blob":
                return None
            blob = repo.objects[entry.sha]
            assert isinstance(blob, _Blob)
            return blob.data.decode()

    def branch_sha(self, full_name: str, branch: str) -> str | None:
        with self._lock:
            return self._repos[full_name.lower()].refs.get(f"refs/heads/{branch}")

    def labels_of(self, full_name: str, number: int) -> list[str]:
        with self._lock:
            return list(self._issue(self._repos[full_name.lower()], number).labels)

    def comments_of(self, full_name: str, number: int) -> list[str]:
        with self._lock:
            return [c.body for c in self._issue(self._repos[full_name.lower()], number).comments]

    # ---- HTTP plumbing ---------------------------------------------------------------------------------

    def _serve(self, handler: _Handler) -> None:
        split = urlsplit(handler.path)
        path = unquote(split.path)
        entry = LoggedRequest(
            method=handler.command,
            path=path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in handler.headers.items() if k.lower() != "authorization"},
            authenticated="Authorization" in handler.headers,
        )
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self._lock:
            self._log.append(entry)
            fault = self._take_fault(entry.method, path)
            hooks = self._take_hooks(entry.method, path)
        for hook in hooks:
            hook.action(self)
        if fault is not None and fault.delay:
            self._stopping.wait(fault.delay)
        status, headers, body = self._respond(entry, raw, handler.headers.get("If-None-Match"), fault)
        entry.status = status
        try:
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if body:
                handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); nothing to tell it

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for rule in self._faults:
            if (
                rule.remaining != 0
                and (rule.method in (None, method))
                and fnmatch.fnmatchcase(path, rule.pattern)
            ):
                if rule.remaining is not None:
                    rule.remaining -= 1
                return rule.fault
        return None

    def _take_hooks(self, method: str, path: str) -> list[_Hook]:
        taken = []
        for hook in self._hooks:
            if hook.remaining != 0 and hook.method in (None, method) and fnmatch.fnmatchcase(path, hook.pattern):
                if hook.remaining is not None:
                    hook.remaining -= 1
                taken.append(hook)
        return taken

    def _rate_headers(self) -> dict[str, str]:
        now = time.time()
        if now >= self.rate_reset:
            self.rate_used, self.rate_reset = 0, math.ceil(now) + 3600
        return {
            "x-ratelimit-limit": str(self.rate_limit),
            "x-ratelimit-remaining": str(self.rate_remaining),
            "x-ratelimit-reset": str(self.rate_reset),
            "x-ratelimit-used": str(self.rate_used),
            "x-ratelimit-resource": "core",
        }

    def _respond(
        self, entry: LoggedRequest, raw: bytes, if_none_match: str | None, fault: Fault | None
    ) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            counts = entry.path != "/rate_limit"  # as on GitHub, asking for the budget is free
            headers = {
                "content-type": "application/json; charset=utf-8",
                "x-github-api-version-selected": API_VERSION,
                "x-github-request-id": f"FAKE:{len(self._log):08X}",
                **self._rate_headers(),
            }
            if fault is not None and (fault.status is not None or fault.body is not None):
                self.rate_used += int(counts)
                body = (fault.body or "").encode()
                return fault.status or 200, {**headers, **self._rate_headers(), **fault.headers}, body
            if counts and self.rate_remaining == 0:
                error = _HttpError(403, _PRIMARY_LIMIT_MESSAGE)
                return 403, headers, json.dumps(error.payload).encode()
            if entry.path == "/search/issues":
                wait = self._search_wait()
                if wait is not None:
                    error = _HttpError(403, _SECONDARY_LIMIT_MESSAGE)
                    limited = {"retry-after": str(wait), "x-ratelimit-resource": "search"}
                    return 403, {**headers, **limited}, json.dumps(error.payload).encode()
            status, payload, extra = self._route(entry, raw)
            body = b"" if payload is None else json.dumps(payload).encode()
            if entry.method == "GET" and status == 200:
                etag = f'W/"{hashlib.sha256(body).hexdigest()}"'
                headers["etag"] = etag
                if if_none_match and (if_none_match.strip() == "*" or etag in if_none_match):
                    return 304, {**headers, **self._rate_headers()}, b""
            self.rate_used += int(counts)
            return status, {**headers, **self._rate_headers(), **extra}, body

    def _search_wait(self) -> int | None:
        """None when one more search fits the search budget (and it is counted), else the whole seconds until
        the oldest search of the window leaves it (GitHub's ``retry-after``)."""
        now = time.monotonic()
        self._searches = [t for t in self._searches if now - t < self.search_window]
        if len(self._searches) >= self.search_limit:
            return max(math.ceil(self.search_window - (now - self._searches[0])), 1)
        self._searches.append(now)
        return None

    def _route(self, entry: LoggedRequest, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        allowed = False
        for method, pattern, name in _ROUTES:
            match = pattern.fullmatch(entry.path)
            if match is None:
                continue
            allowed = True
            if method != entry.method:
                continue
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                error = _HttpError(400, "Problems parsing JSON")
                return 400, error.payload, {}
            request = _Request(
                entry.method,
                entry.path,
                {k: v for k, v in match.groupdict().items() if v is not None},
                {k: v[0] for k, v in entry.query.items()},
                body,
                self.login if entry.authenticated else None,
            )
            try:
                if entry.method != "GET" and request.login is None:
                    raise _HttpError(401)
                if name in _GIT_DATA_HANDLERS and not self._repo(request).refs:
                    raise _HttpError(409, "Git Repository is empty.")
                status, payload = getattr(self, name)(request)
            except _HttpError as error:
                return error.status, error.payload, {}
            return status, payload, request.headers
        return (405 if allowed else 404), _HttpError(405 if allowed else 404).payload, {}

    # ---- model helpers ---------------------------------------------------------------------------------

    def _repo(self, req: _Request) -> _Repo:
        repo = self._repos.get(f"{req.params['owner']}/{req.params['repo']}".lower())
        if repo is None:
            raise _HttpError(404)
        return repo

    def _issue(self, repo: _Repo, number: int | str) -> _Issue:
        issue = repo.issues.get(int(number))
        if issue is None:
            raise _HttpError(404)
        return issue

    def _new_issue(self, repo: _Repo, title: str, body: str | None, user: str) -> _Issue:
        number = len(repo.issues) + 1
        now = _iso()
        issue = _Issue(number, next(self._ids), title, body, user, now, now)
        repo.issues[number] = issue
        return issue

    def _set_state(self, issue: _Issue, state: str, reason: str | None) -> None:
        if reason is not None and reason not in STATE_REASONS:
            raise _HttpError(422, f"state_reason {reason!r} is not one of {', '.join(STATE_REASONS)}")
        now = _iso()
        issue.state = state
        issue.state_reason = reason if issue.pull is None else None
        issue.closed_at = now if state == "closed" else None
        issue.updated_at = now

    def _merge(self, repo: _Repo, issue: _Issue) -> None:
        assert issue.pull is not None
        pull = issue.pull
        base_ref = f"refs/heads/{pull.base}"
        head_sha = repo.refs.get(f"refs/heads/{pull.head}", pull.head_sha)
        tree = self._commit(repo, head_sha).tree
        merge = self._store_commit(
            repo, tree, (repo.refs[base_ref], head_sha), f"Merge pull request #{issue.number}"
        )
        repo.refs[base_ref] = merge
        self._set_state(issue, "closed", None)
        pull.head_sha, pull.merged_at, pull.merge_commit_sha = head_sha, issue.closed_at, merge

    def _ensure_label(self, repo: _Repo, name: str) -> _Label:
        if name not in repo.labels:
            repo.labels[name] = _Label(next(self._ids), name)
        return repo.labels[name]

    def _paginate(self, req: _Request, items: list[Any]) -> list[Any]:
        """Slice a list as GitHub does (``per_page`` up to 100, ``page`` from 1) and set ``Link``."""
        per_page = min(int(req.query.get("per_page", 30)), 100)
        page = int(req.query.get("page", 1))
        last = max(math.ceil(len(items) / per_page), 1)
        if page < last:
            query = {**req.query, "page": str(page + 1)}
            req.headers["link"] = f'<{self.url}{quote(req.path)}?{urlencode(query)}>; rel="next"'
            query["page"] = str(last)
            req.headers["link"] += f', <{self.url}{quote(req.path)}?{urlencode(query)}>; rel="last"'
        return items[(page - 1) * per_page : page * per_page]

    # git object store

    def _store_blob(self, repo: _Repo, data: bytes) -> str:
        sha = _git_sha("blob", data)
        repo.objects[sha] = _Blob(data)
        return sha

    def _blob_entry(self, repo: _Repo, data: bytes) -> _TreeEntry:
        return _TreeEntry("100644", "blob", self._store_blob(repo, data))

    def _store_tree(self, repo: _Repo, entries: Mapping[str, _TreeEntry]) -> str:
        # git orders tree entries by name, with directories compared as if they ended in "/"
        order = sorted(entries, key=lambda name: name + "/" if entries[name].type == "tree" else name)
        payload = b"".join(
            f"{entries[name].mode.lstrip('0')} {name}\0".encode() + bytes.fromhex(entries[name].sha)
            for name in order
        )
        sha = _git_sha("tree", payload)
        repo.objects[sha] = _Tree(dict(entries))
        return sha

    def _store_commit(
        self,
        repo: _Repo,
        tree: str,
        parents: tuple[str, ...],
        message: str,
        author: Mapping[str, str] | None = None,
        committer: Mapping[str, str] | None = None,
    ) -> str:
        default = {"name": self.login, "email": f"{self.login}@users.noreply.github.com", "date": _iso()}
        author = {**default, **(author or {})}
        committer = {**default, **(committer or author)}
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents)]
        lines += [f"author {author['name']} <{author['email']}> {author['date']}"]
        lines += [f"committer {committer['name']} <{committer['email']}> {committer['date']}", "", message]
        sha = _git_sha("commit", "\n".join(lines).encode())
        repo.objects[sha] = _Commit(tree, parents, message, author, committer)
        return sha

    def _commit(self, repo: _Repo, sha: str) -> _Commit:
        obj = repo.objects.get(sha)
        if not isinstance(obj, _Commit):
            raise _HttpError(404)
        return obj

    def _tree(self, repo: _Repo, sha: str) -> _Tree:
        obj = repo.objects.get(sha)
        if not isinstance(obj, _Tree):
            raise _HttpError(404)
        return obj

    def _tree_with(self, repo: _Repo, base: str | None, changes: Mapping[str, _TreeEntry | None]) -> str:
        """Store the tree ``base`` with ``changes`` (path -> entry, None deletes) applied; return its SHA."""
        entries = dict(self._tree(repo, base).entries) if base else {}
        nested: dict[str, dict[str, _TreeEntry | None]] = {}
        for path, entry in changes.items():
            head, _, rest = path.strip("/").partition("/")
            if rest:
                nested.setdefault(head, {})[rest] = entry
            elif entry is None:
                entries.pop(head, None)
            else:
                entries[head] = entry
        for name, sub_changes in nested.items():
            current = entries.get(name)
            sub = self._tree_with(
                repo, current.sha if current and current.type == "tree" else None, sub_changes
            )
            if self._tree(repo, sub).entries:
                entries[name] = _TreeEntry("040000", "tree", sub)
            else:
                entries.pop(name, None)
        return self._store_tree(repo, entries)

    def _lookup(self, repo: _Repo, tree: str, path: str) -> _TreeEntry | None:
        entry: _TreeEntry | None = _TreeEntry("040000", "tree", tree)
        for part in filter(None, path.split("/")):
            if entry is None or entry.type != "tree":
                return None
            entry = self._tree(repo, entry.sha).entries.get(part)
        return entry

    def _walk(self, repo: _Repo, tree: str, prefix: str = "") -> Iterator[tuple[str, _TreeEntry]]:
        for name, entry in sorted(self._tree(repo, tree).entries.items()):
            yield prefix + name, entry
            if entry.type == "tree":
                yield from self._walk(repo, entry.sha, f"{prefix}{name}/")

    def _is_ancestor(self, repo: _Repo, old: str, new: str) -> bool:
        pending, seen = [new], set()
        while pending:
            sha = pending.pop()
            if sha == old:
                return True
            if sha not in seen:
                seen.add(sha)
                pending.extend(self._commit(repo, sha).parents)
        return False

    def _resolve_commit(self, repo: _Repo, ref: str | None) -> str:
        """A commit SHA for a branch name, ``heads/...``/``refs/heads/...`` or a commit SHA."""
        ref = ref or repo.default_branch
        for candidate in (ref, f"refs/{ref}", f"refs/heads/{ref}", f"refs/tags/{ref}"):
            if candidate in repo.refs:
                return repo.refs[candidate]
        if isinstance(repo.objects.get(ref), _Commit):
            return ref
        raise _HttpError(404, f"No commit found for the ref {ref}")

    # ---- JSON renderers (field sets follow GitHub's OpenAPI schemas) ----------------------------------

    def _api(self, repo: _Repo) -> str:
        return f"{self.url}/repos/{repo.full_name}"

    def _user_json(self, login: str) -> dict[str, Any]:
        api, uid = f"{self.url}/users/{login}", _stable_id(login)
        return {
            "login": login,
            "id": uid,
            "node_id": _node_id("U", uid),
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web_url}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": "User",
            "user_view_type": "public",
            "site_admin": False,
        }

    def _repo_json(self, repo: _Repo) -> dict[str, Any]:
        api, web = self._api(repo), f"{self.web_url}/{repo.full_name}"
        templated = {
            "archive": "/{archive_format}{/ref}", "assignees": "/assignees{/user}",
            "blobs": "/git/blobs{/sha}", "branches": "/branches{/branch}",
            "collaborators": "/collaborators{/collaborator}", "comments": "/comments{/number}",
            "commits": "/commits{/sha}", "compare": "/compare/{base}...{head}",
            "contents": "/contents/{+path}", "contributors": "/contributors", "deployments": "/deployments",
            "downloads": "/downloads", "events": "/events", "forks": "/forks",
            "git_commits": "/git/commits{/sha}", "git_refs": "/git/refs{/sha}", "git_tags": "/git/tags{/sha}",
            "hooks": "/hooks",
            "issue_comment": "/issues/comments{/number}", "issue_events": "/issues/events{/number}",
            "issues": "/issues{/number}", "keys": "/keys{/key_id}", "labels": "/labels{/name}",
            "languages": "/languages", "merges": "/merges", "milestones": "/milestones{/number}",
            "notifications": "/notifications{?since,all,participating}", "pulls": "/pulls{/number}",
            "releases": "/releases{/id}", "stargazers": "/stargazers", "statuses": "/statuses/{sha}",
            "subscribers": "/subscribers", "subscription": "/subscription", "tags": "/tags",
            "teams": "/teams", "trees": "/git/trees{/sha}",
        }  # fmt: skip
        open_issues = sum(issue.state == "open" for issue in repo.issues.values())
        host = urlsplit(self.web_url).hostname
        return {
            "id": repo.id,
            "node_id": _node_id("R", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": False,
            "owner": self._user_json(repo.owner),
            "html_url": web,
            "description": None,
            "fork": False,
            "url": api,
            **{f"{name}_url": api + suffix for name, suffix in templated.items()},
            "git_url": f"git://{host}/{repo.full_name}.git",
            "ssh_url": f"git@{host}:{repo.full_name}.git",
            "clone_url": f"{web}.git",
            "svn_url": web,
            "mirror_url": None,
            "homepage": None,
            "language": "Python",
            "size": sum(isinstance(obj, _Blob) for obj in repo.objects.values()),
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "forks_count": 0,
            "forks": 0,
            "open_issues_count": open_issues,
            "open_issues": open_issues,
            "network_count": 0,
            "subscribers_count": 0,
            "has_issues": True,
            "has_projects": True,
            "has_downloads": True,
            "has_wiki": True,
            "has_pages": False,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "visibility": "public",
            "license": None,
            "topics": [],
            "default_branch": repo.default_branch,
            "created_at": repo.created_at,
            "updated_at": repo.created_at,
            "pushed_at": _iso(),
        }

    def _label_json(self, repo: _Repo, name: str) -> dict[str, Any]:
        label = self._ensure_label(repo, name)
        return {
            "id": label.id,
            "node_id": _node_id("LA", label.id),
            "url": f"{self._api(repo)}/labels/{quote(name)}",
            "name": name,
            "description": label.description,
            "color": label.color,
            "default": False,
        }

    def _reactions_json(self, url: str) -> dict[str, Any]:
        kinds = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")
        return {"url": f"{url}/reactions", "total_count": 0, **dict.fromkeys(kinds, 0)}

    def _issue_json(self, repo: _Repo, issue: _Issue) -> dict[str, Any]:
        api = f"{self._api(repo)}/issues/{issue.number}"
        kind = "pull" if issue.pull else "issues"
        payload: dict[str, Any] = {
            "url": api,
            "repository_url": self._api(repo),
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.web_url}/{repo.full_name}/{kind}/{issue.number}",
            "id": issue.id,
            "node_id": _node_id("PR" if issue.pull else "I", issue.id),
            "number": issue.number,
            "title": issue.title,
            "user": self._user_json(issue.user),
            "labels": [self._label_json(repo, name) for name in issue.labels],
            "state": issue.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": len(issue.comments),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "author_association": "MEMBER",
            "active_lock_reason": None,
            "body": issue.body,
            "closed_by": self._user_json(self.login) if issue.state == "closed" else None,
            "reactions": self._reactions_json(api),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": None,
            "state_reason": issue.state_reason,
        }
        if issue.pull is not None:
            web = f"{self.web_url}/{repo.full_name}/pull/{issue.number}"
            payload["draft"] = issue.pull.draft
            payload["pull_request"] = {
                "url": f"{self._api(repo)}/pulls/{issue.number}",
                "html_url": web,
                "diff_url": f"{web}.diff",
                "patch_url": f"{web}.patch",
            }
            if self.issue_merged_at:
                payload["pull_request"]["merged_at"] = issue.pull.merged_at
        return payload

    def _branch_json(self, repo: _Repo, branch: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner}:{branch}",
            "ref": branch,
            "sha": sha,
            "user": self._user_json(repo.owner),
            "repo": self._repo_json(repo),
        }

    def _fork_branch_json(self, repo: _Repo, pull: _Pull) -> dict[str, Any]:
        """A head branch in a fork: GitHub names the fork's repository (owner, full_name) in ``head.repo``."""
        owner, name = (pull.head_repo or "").split("/")
        fork = self._repo_json(repo) | {"name": name, "full_name": pull.head_repo, "owner": self._user_json(owner),
                                         "fork": True}  # fmt: skip
        return {"label": f"{owner}:{pull.head}", "ref": pull.head, "sha": pull.head_sha,
                "user": self._user_json(owner), "repo": fork}  # fmt: skip

    def _pull_json(self, repo: _Repo, issue: _Issue, *, full: bool = True) -> dict[str, Any]:
        pull = issue.pull
        assert pull is not None
        if issue.state == "open":  # open PRs follow their branches; closed ones keep the last SHAs
            pull.head_sha = repo.refs.get(f"refs/heads/{pull.head}", pull.head_sha)
            pull.base_sha = repo.refs.get(f"refs/heads/{pull.base}", pull.base_sha)
        api = f"{self._api(repo)}/pulls/{issue.number}"
        web = f"{self.web_url}/{repo.full_name}/pull/{issue.number}"
        issue_api = f"{self._api(repo)}/issues/{issue.number}"
        links = {
            "self": api, "html": web, "issue": issue_api, "comments": f"{issue_api}/comments",
            "review_comments": f"{api}/comments",
            "review_comment": f"{self._api(repo)}/pulls/comments{{/number}}",
            "commits": f"{api}/commits", "statuses": f"{self._api(repo)}/statuses/{pull.head_sha}",
        }  # fmt: skip
        payload: dict[str, Any] = {
            "url": api,
            "id": issue.id,
            "node_id": _node_id("PR", issue.id),
            "html_url": web,
            "diff_url": f"{web}.diff",
            "patch_url": f"{web}.patch",
            "issue_url": issue_api,
            "commits_url": links["commits"],
            "review_comments_url": links["review_comments"],
            "review_comment_url": links["review_comment"],
            "comments_url": links["comments"],
            "statuses_url": links["statuses"],
            "number": issue.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self._user_json(issue.user),
            "body": issue.body,
            "labels": [self._label_json(repo, name) for name in issue.labels],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": self._fork_branch_json(repo, pull) if pull.head_repo else self._branch_json(repo, pull.head, pull.head_sha),
            "base": self._branch_json(repo, pull.base, pull.base_sha),
            "_links": {name: {"href": href} for name, href in links.items()},
            "author_association": "MEMBER",
            "auto_merge": None,
            "draft": pull.draft,
        }
        if full:
            merged = pull.merged_at is not None
            payload.update(
                merged=merged,
                mergeable=None if merged or issue.state == "closed" else True,
                rebaseable=None if merged or issue.state == "closed" else True,
                mergeable_state="unknown" if merged or issue.state == "closed" else "clean",
                merged_by=self._user_json(self.login) if merged else None,
                comments=len(issue.comments),
                review_comments=0,
                maintainer_can_modify=pull.maintainer_can_modify,
                commits=1,
                additions=0,
                deletions=0,
                changed_files=0,
            )
        return payload

    def _comment_json(self, repo: _Repo, comment: _Comment) -> dict[str, Any]:
        issue_api = f"{self._api(repo)}/issues/{comment.issue}"
        api = f"{self._api(repo)}/issues/comments/{comment.id}"
        return {
            "id": comment.id,
            "node_id": _node_id("IC", comment.id),
            "url": api,
            "html_url": f"{self.web_url}/{repo.full_name}/issues/{comment.issue}#issuecomment-{comment.id}",
            "issue_url": issue_api,
            "body": comment.body,
            "user": self._user_json(comment.user),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": "MEMBER",
            "performed_via_github_app": None,
            "reactions": self._reactions_json(api),
        }

    def _ref_json(self, repo: _Repo, ref: str) -> dict[str, Any]:
        sha = repo.refs[ref]
        return {
            "ref": ref,
            "node_id": _node_id("REF", _stable_id(repo.full_name + ref)),
            "url": f"{self._api(repo)}/git/{quote(ref)}",
            "object": {"type": "commit", "sha": sha, "url": f"{self._api(repo)}/git/commits/{sha}"},
        }

    def _commit_json(self, repo: _Repo, sha: str) -> dict[str, Any]:
        commit = self._commit(repo, sha)
        api = f"{self._api(repo)}/git/commits"
        web = f"{self.web_url}/{repo.full_name}/commit"
        return {
            "sha": sha,
            "node_id": _node_id("C", _stable_id(sha)),
            "url": f"{api}/{sha}",
            "html_url": f"{web}/{sha}",
            "author": dict(commit.author),
            "committer": dict(commit.committer),
            "tree": {"sha": commit.tree, "url": f"{self._api(repo)}/git/trees/{commit.tree}"},
            "message": commit.message,
            "parents": [{"sha": p, "url": f"{api}/{p}", "html_url": f"{web}/{p}"} for p in commit.parents],
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        }

    def _tree_json(self, repo: _Repo, sha: str, *, recursive: bool = False) -> dict[str, Any]:
        items = self._walk(repo, sha) if recursive else sorted(self._tree(repo, sha).entries.items())
        entries = []
        for path, entry in items:
            item = {"path": path, "mode": entry.mode, "type": entry.type, "sha": entry.sha}
            kind = "blobs" if entry.type == "blob" else "trees"
            if entry.type == "blob":
                blob = repo.objects[entry.sha]
                assert isinstance(blob, _Blob)
                item["size"] = len(blob.data)
            item["url"] = f"{self._api(repo)}/git/{kind}/{entry.sha}"
            entries.append(item)
        return {"sha": sha, "url": f"{self._api(repo)}/git/trees/{sha}", "tree": entries, "truncated": False}

    def _content_json(
        self, repo: _Repo, path: str, entry: _TreeEntry, ref: str, *, body: bool
    ) -> dict[str, Any]:
        is_file = entry.type == "blob"
        blob = repo.objects[entry.sha] if is_file else None
        data = blob.data if isinstance(blob, _Blob) else b""
        api = f"{self._api(repo)}/contents/{quote(path)}?ref={quote(ref)}"
        git = f"{self._api(repo)}/git/{'blobs' if is_file else 'trees'}/{entry.sha}"
        web = f"{self.web_url}/{repo.full_name}/{'blob' if is_file else 'tree'}/{ref}/{path}"
        raw = f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}"
        payload: dict[str, Any] = {
            "type": "file" if is_file else "dir",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": entry.sha,
            "url": api,
            "git_url": git,
            "html_url": web,
            "download_url": raw if is_file else None,
            "_links": {"self": api, "git": git, "html": web},
        }
        if body and is_file:
            payload.update(content=_b64_lines(data), encoding="base64")
        return payload

    # ---- route handlers: each returns (status, payload) or raises _HttpError --------------------------

    def _get_rate_limit(self, req: _Request) -> tuple[int, Any]:
        rate = {"limit": self.rate_limit, "used": self.rate_used, "remaining": self.rate_remaining}
        rate |= {"reset": self.rate_reset, "resource": "core"}
        other = {"limit": 30, "used": 0, "remaining": 30, "reset": self.rate_reset}
        resources = {
            "core": rate,
            "search": other | {"resource": "search"},
            "graphql": other | {"resource": "graphql"},
        }
        return 200, {"resources": resources, "rate": rate}

    def _get_user(self, req: _Request) -> tuple[int, Any]:
        if req.login is None:
            raise _HttpError(401)
        return 200, self._user_json(req.login)

    def _get_repo(self, req: _Request) -> tuple[int, Any]:
        return 200, self._repo_json(self._repo(req))

    def _list_issues(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        state = req.query.get("state", "open")
        wanted = set(filter(None, req.query.get("labels", "").split(",")))
        issues = [
            issue
            for issue in sorted(repo.issues.values(), key=lambda issue: -issue.number)
            if state in ("all", issue.state) and wanted <= set(issue.labels)
        ]
        return 200, [self._issue_json(repo, issue) for issue in self._paginate(req, issues)]

    def _create_issue(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        if not body.get("title"):
            raise _HttpError(422, errors=[{"resource": "Issue", "field": "title", "code": "missing_field"}])
        issue = self._new_issue(repo, body["title"], body.get("body"), req.login or self.login)
        issue.labels = [self._ensure_label(repo, name).name for name in body.get("labels", [])]
        return 201, self._issue_json(repo, issue)

    def _get_issue(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        return 200, self._issue_json(repo, self._issue(repo, req.params["number"]))

    def _edit_issue(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        issue = self._issue(repo, req.params["number"])
        issue.title = body.get("title", issue.title)
        issue.body = body.get("body", issue.body)
        if "labels" in body:
            issue.labels = [self._ensure_label(repo, name).name for name in body["labels"]]
        if body.get("state") not in (None, "open", "closed"):
            raise _HttpError(422, errors=[{"resource": "Issue", "field": "state", "code": "invalid"}])
        if body.get("state", issue.state) != issue.state or "state_reason" in body:
            state = body.get("state", issue.state)
            default_reason = "completed" if state == "closed" else "reopened"
            self._set_state(issue, state, body.get("state_reason") or default_reason)
        issue.updated_at = _iso()
        return 200, self._issue_json(repo, issue)

    def _list_comments(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        comments = self._issue(repo, req.params["number"]).comments
        return 200, [self._comment_json(repo, c) for c in self._paginate(req, comments)]

    # ---- checks: one check run per name and head commit, created and edited by the bot ----
    def _create_check_run(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        for field_name in ("name", "head_sha"):
            if not body.get(field_name):
                raise _HttpError(422, errors=[{"resource": "CheckRun", "field": field_name, "code": "missing_field"}])
        run_id = next(self._ids)
        run = {"id": run_id, "node_id": f"CR_{run_id}", "head_sha": body["head_sha"], "external_id": "",
               "url": f"{self._api(repo)}/check-runs/{run_id}", "html_url": f"{self.web_url}/{repo.full_name}/runs/{run_id}",
               "details_url": body.get("details_url"), "status": body.get("status", "queued"),
               "conclusion": body.get("conclusion"), "started_at": _iso(), "completed_at": None, "name": body["name"],
               "output": {"title": None, "summary": None, "text": None, "annotations_count": 0,
                          "annotations_url": f"{self._api(repo)}/check-runs/{run_id}/annotations"},
               "check_suite": {"id": 1}, "app": None, "pull_requests": []}  # fmt: skip
        self._update_check_run(run, body)
        repo.check_runs.append(run)
        return 201, run

    def _update_check_run(self, run: dict[str, Any], body: dict[str, Any]) -> None:
        for key in ("status", "conclusion", "details_url"):
            if key in body:
                run[key] = body[key]
        if body.get("conclusion"):
            run["status"], run["completed_at"] = "completed", _iso()
        if isinstance(body.get("output"), dict):
            output = body["output"]
            if not output.get("title") or not output.get("summary"):
                raise _HttpError(422, errors=[{"resource": "CheckRun", "field": "output", "code": "invalid"}])
            if len(output["summary"]) > 65535:
                raise _HttpError(422, "Invalid request.\n\nOnly 65535 characters are allowed; 65536 were supplied.")
            run["output"] |= {k: output.get(k) for k in ("title", "summary", "text")}

    def _edit_check_run(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        run = next((r for r in repo.check_runs if r["id"] == int(req.params["id"])), None)
        if run is None:
            raise _HttpError(404)
        self._update_check_run(run, req.body or {})
        return 200, run

    def _list_check_runs(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        ref = req.params["ref"]
        sha = repo.refs.get(f"refs/heads/{ref}", ref)
        runs = [r for r in repo.check_runs if r["head_sha"] == sha
                and (not req.query.get("check_name") or r["name"] == req.query["check_name"])]  # fmt: skip
        return 200, {"total_count": len(runs), "check_runs": runs}

    def _get_repo_commit(self, req: _Request) -> tuple[int, Any]:
        """The REST commit object (``GET /repos/{o}/{r}/commits/{sha}``): the git commit under ``commit``."""
        repo, sha = self._repo(req), req.params["sha"]
        git = self._commit_json(repo, sha)
        return 200, {"sha": sha, "node_id": f"C_{sha[:8]}", "url": f"{self._api(repo)}/commits/{sha}",
                     "html_url": f"{self.web_url}/{repo.full_name}/commit/{sha}", "commit": git,
                     "parents": git["parents"], "author": None, "committer": None, "files": []}  # fmt: skip

    def check_runs_of(self, full_name: str, sha: str) -> list[dict[str, Any]]:
        """The check runs on commit ``sha`` (what a PR's checks tab shows)."""
        with self._lock:
            return [dict(r) for r in self._repos[full_name.lower()].check_runs if r["head_sha"] == sha]

    def _create_comment(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        issue = self._issue(repo, req.params["number"])
        if not body.get("body"):
            raise _HttpError(
                422, errors=[{"resource": "IssueComment", "field": "body", "code": "missing_field"}]
            )
        now = _iso()
        comment = _Comment(next(self._ids), issue.number, body["body"], req.login or self.login, now, now)
        issue.comments.append(comment)
        issue.updated_at = now
        return 201, self._comment_json(repo, comment)

    def _find_comment(self, repo: _Repo, comment_id: str) -> _Comment:
        for issue in repo.issues.values():
            for comment in issue.comments:
                if comment.id == int(comment_id):
                    return comment
        raise _HttpError(404)

    def _get_comment(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        return 200, self._comment_json(repo, self._find_comment(repo, req.params["id"]))

    def _edit_comment(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        comment = self._find_comment(repo, req.params["id"])
        comment.body = (req.body or {}).get("body", comment.body)
        comment.updated_at = _iso()
        return 200, self._comment_json(repo, comment)

    def _label_names(self, body: Any) -> list[str]:
        """Label input is either a list of names or ``{"labels": [...]}``; GitHub accepts both."""
        names = body.get("labels", []) if isinstance(body, dict) else body or []
        return [name["name"] if isinstance(name, dict) else name for name in names]

    def _list_issue_labels(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        issue = self._issue(repo, req.params["number"])
        return 200, [self._label_json(repo, name) for name in issue.labels]

    def _add_issue_labels(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        issue = self._issue(repo, req.params["number"])
        for name in self._label_names(req.body):
            if name not in issue.labels:
                issue.labels.append(self._ensure_label(repo, name).name)
        issue.updated_at = _iso()
        return 200, [self._label_json(repo, name) for name in issue.labels]

    def _set_issue_labels(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        issue = self._issue(repo, req.params["number"])
        issue.labels = [self._ensure_label(repo, name).name for name in self._label_names(req.body)]
        issue.updated_at = _iso()
        return 200, [self._label_json(repo, name) for name in issue.labels]

    def _remove_issue_label(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        issue = self._issue(repo, req.params["number"])
        if req.params["name"] not in issue.labels:
            raise _HttpError(404, "Label does not exist")
        issue.labels.remove(req.params["name"])
        issue.updated_at = _iso()
        return 200, [self._label_json(repo, name) for name in issue.labels]

    def _list_labels(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        return 200, [self._label_json(repo, name) for name in self._paginate(req, sorted(repo.labels))]

    def _create_label(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        name = body.get("name")
        if not name or name in repo.labels:
            code = "already_exists" if name else "missing_field"
            raise _HttpError(422, errors=[{"resource": "Label", "field": "name", "code": code}])
        label = self._ensure_label(repo, name)
        label.color, label.description = body.get("color", label.color), body.get("description")
        return 201, self._label_json(repo, name)

    def _get_label(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        if req.params["name"] not in repo.labels:
            raise _HttpError(404)
        return 200, self._label_json(repo, req.params["name"])

    def _pulls(self, repo: _Repo) -> list[_Issue]:
        return [issue for issue in sorted(repo.issues.values(), key=lambda i: -i.number) if issue.pull]

    def _list_pulls(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        state, head, base = req.query.get("state", "open"), req.query.get("head"), req.query.get("base")
        pulls = [
            issue
            for issue in self._pulls(repo)
            if issue.pull is not None
            and state in ("all", issue.state)
            and (head is None or head in (f"{repo.owner}:{issue.pull.head}", issue.pull.head))
            and (base is None or base == issue.pull.base)
        ]
        return 200, [self._pull_json(repo, issue, full=False) for issue in self._paginate(req, pulls)]

    def _create_pull(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        for name in ("title", "head", "base"):
            if not body.get(name):
                raise _HttpError(
                    422, errors=[{"resource": "PullRequest", "field": name, "code": "missing_field"}]
                )
        owner, _, head = body["head"].rpartition(":")
        if owner and owner.lower() != repo.owner.lower():
            raise _HttpError(422, "Pull requests from forks are not modelled by FakeGitHub")
        for field_name, branch in (("head", head), ("base", body["base"])):
            if f"refs/heads/{branch}" not in repo.refs:
                raise _HttpError(
                    422, errors=[{"resource": "PullRequest", "field": field_name, "code": "invalid"}]
                )
        head_sha, base_sha = repo.refs[f"refs/heads/{head}"], repo.refs[f"refs/heads/{body['base']}"]
        for issue in self._pulls(repo):
            assert issue.pull is not None
            if issue.state == "open" and (issue.pull.head, issue.pull.base) == (head, body["base"]):
                raise _HttpError(
                    422, errors=[{"message": f"A pull request already exists for {repo.owner}:{head}."}]
                )
        if self._is_ancestor(repo, head_sha, base_sha):
            raise _HttpError(422, errors=[{"message": f"No commits between {body['base']} and {head}"}])
        issue = self._new_issue(repo, body["title"], body.get("body"), req.login or self.login)
        issue.pull = _Pull(head, body["base"], head_sha, base_sha, bool(body.get("draft", False)))
        issue.pull.maintainer_can_modify = bool(body.get("maintainer_can_modify", False))
        return 201, self._pull_json(repo, issue)

    def _get_pull(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        issue = self._issue(repo, req.params["number"])
        if issue.pull is None:
            raise _HttpError(404)
        return 200, self._pull_json(repo, issue)

    def _edit_pull(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        issue = self._issue(repo, req.params["number"])
        if issue.pull is None:
            raise _HttpError(404)
        issue.title = body.get("title", issue.title)
        issue.body = body.get("body", issue.body)
        issue.pull.base = body.get("base", issue.pull.base)
        state = body.get("state", issue.state)
        if state not in ("open", "closed") or (state == "open" and issue.pull.merged_at):
            raise _HttpError(422, errors=[{"resource": "PullRequest", "field": "state", "code": "invalid"}])
        if state != issue.state:
            self._set_state(issue, state, None)
        issue.updated_at = _iso()
        return 200, self._pull_json(repo, issue)

    def _ref_name(self, req: _Request) -> str:
        ref = req.params["ref"]
        return ref if ref.startswith("refs/") else f"refs/{ref}"

    def _get_ref(self, req: _Request) -> tuple[int, Any]:
        repo, ref = self._repo(req), self._ref_name(req)
        if ref not in repo.refs:
            raise _HttpError(404)
        return 200, self._ref_json(repo, ref)

    def _list_refs(self, req: _Request) -> tuple[int, Any]:
        repo = self._repo(req)
        return 200, [self._ref_json(repo, ref) for ref in self._paginate(req, sorted(repo.refs))]

    def _matching_refs(self, req: _Request) -> tuple[int, Any]:
        repo, prefix = self._repo(req), f"refs/{req.params.get('ref', '')}"
        return 200, [self._ref_json(repo, ref) for ref in sorted(repo.refs) if ref.startswith(prefix)]

    def _create_ref(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        ref, sha = body.get("ref", ""), body.get("sha", "")
        if not ref.startswith("refs/") or ref.count("/") < 2:
            raise _HttpError(422, "Reference name must start with 'refs/' and have at least two slashes.")
        if not isinstance(repo.objects.get(sha), _Commit):
            raise _HttpError(422, "Object does not exist")
        if ref in repo.refs:
            raise _HttpError(422, "Reference already exists")
        repo.refs[ref] = sha
        return 201, self._ref_json(repo, ref)

    def _update_ref(self, req: _Request) -> tuple[int, Any]:
        repo, ref, body = self._repo(req), self._ref_name(req), req.body or {}
        sha = body.get("sha", "")
        if ref not in repo.refs:
            raise _HttpError(422, "Reference does not exist")
        if not isinstance(repo.objects.get(sha), _Commit):
            raise _HttpError(422, "Object does not exist")
        if not body.get("force") and not self._is_ancestor(repo, repo.refs[ref], sha):
            raise _HttpError(422, "Update is not a fast forward")
        repo.refs[ref] = sha
        return 200, self._ref_json(repo, ref)

    def _delete_ref(self, req: _Request) -> tuple[int, Any]:
        repo, ref = self._repo(req), self._ref_name(req)
        if repo.refs.pop(ref, None) is None:
            raise _HttpError(422, "Reference does not exist")
        for issue in self._pulls(repo):  # as on GitHub: deleting a PR's head branch closes the PR
            assert issue.pull is not None
            if issue.state == "open" and f"refs/heads/{issue.pull.head}" == ref:
                self._set_state(issue, "closed", None)
        return 204, None

    def _create_blob(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        if not isinstance(body.get("content"), str):
            raise _HttpError(422, errors=[{"resource": "Blob", "field": "content", "code": "missing_field"}])
        encoding = body.get("encoding", "utf-8")
        data = base64.b64decode(body["content"]) if encoding == "base64" else body["content"].encode()
        sha = self._store_blob(repo, data)
        return 201, {"url": f"{self._api(repo)}/git/blobs/{sha}", "sha": sha}

    def _get_blob(self, req: _Request) -> tuple[int, Any]:
        repo, sha = self._repo(req), req.params["sha"]
        blob = repo.objects.get(sha)
        if not isinstance(blob, _Blob):
            raise _HttpError(404)
        return 200, {
            "sha": sha,
            "node_id": _node_id("B", _stable_id(sha)),
            "size": len(blob.data),
            "url": f"{self._api(repo)}/git/blobs/{sha}",
            "content": _b64_lines(blob.data),
            "encoding": "base64",
        }

    def _create_tree(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        base = body.get("base_tree")
        if base is not None and not isinstance(repo.objects.get(base), _Tree):
            raise _HttpError(422, "Invalid tree info")
        changes: dict[str, _TreeEntry | None] = {}
        for item in body.get("tree", []):
            if "content" in item:
                changes[item["path"]] = _TreeEntry(
                    item["mode"], "blob", self._store_blob(repo, item["content"].encode())
                )
            elif item.get("sha") is None:
                changes[item["path"]] = None
            elif item["sha"] in repo.objects:
                changes[item["path"]] = _TreeEntry(item["mode"], item["type"], item["sha"])
            else:
                raise _HttpError(422, "Invalid tree info")
        return 201, self._tree_json(repo, self._tree_with(repo, base, changes))

    def _get_tree(self, req: _Request) -> tuple[int, Any]:
        repo, name = self._repo(req), req.params["sha"]
        if isinstance(repo.objects.get(name), _Tree):
            sha = name
        else:
            sha = self._commit(repo, self._resolve_commit(repo, name)).tree
        recursive = req.query.get("recursive") not in (None, "0", "false")
        return 200, self._tree_json(repo, sha, recursive=recursive)

    def _create_commit(self, req: _Request) -> tuple[int, Any]:
        repo, body = self._repo(req), req.body or {}
        if not isinstance(repo.objects.get(body.get("tree", "")), _Tree):
            raise _HttpError(422, "Tree SHA does not exist")
        parents = tuple(body.get("parents", []))
        if not all(isinstance(repo.objects.get(p), _Commit) for p in parents):
            raise _HttpError(422, "Parent SHA does not exist or is not a commit object")
        message = body.get("message") or ""
        sha = self._store_commit(
            repo, body["tree"], parents, message, body.get("author"), body.get("committer")
        )
        return 201, self._commit_json(repo, sha)

    def _get_commit(self, req: _Request) -> tuple[int, Any]:
        return 200, self._commit_json(self._repo(req), req.params["sha"])

    def _get_contents(self, req: _Request) -> tuple[int, Any]:
        repo, path = self._repo(req), req.params.get("path", "").strip("/")
        ref = req.query.get("ref") or repo.default_branch
        entry = self._lookup(repo, self._commit(repo, self._resolve_commit(repo, ref)).tree, path)
        if entry is None:
            raise _HttpError(404)
        if entry.type == "blob":
            return 200, self._content_json(repo, path, entry, ref, body=True)
        children = sorted(self._tree(repo, entry.sha).entries.items())
        return 200, [
            self._content_json(repo, f"{path}/{n}".lstrip("/"), e, ref, body=False) for n, e in children
        ]

    def _branch_for_write(self, repo: _Repo, body: Mapping[str, Any]) -> tuple[str, str]:
        branch = body.get("branch") or repo.default_branch
        ref = f"refs/heads/{branch}"
        if ref not in repo.refs:
            raise _HttpError(404, f"Branch {branch} not found")
        return ref, branch

    def _write_file(
        self, repo: _Repo, ref: str, path: str, entry: _TreeEntry | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Commit one path change on ``ref`` and return the ``commit`` half of a file-commit."""
        parent = repo.refs[ref]
        tree = self._tree_with(repo, self._commit(repo, parent).tree, {path: entry})
        message = body.get("message") or f"Update {path}"
        sha = self._store_commit(repo, tree, (parent,), message, body.get("author"), body.get("committer"))
        repo.refs[ref] = sha
        return self._commit_json(repo, sha)

    def _checked_existing(self, repo: _Repo, ref: str, path: str, sha: str | None) -> _TreeEntry | None:
        existing = self._lookup(repo, self._commit(repo, repo.refs[ref]).tree, path)
        if existing is not None and sha is None:
            raise _HttpError(422, '"sha" wasn\'t supplied.')
        if existing is not None and existing.sha != sha:
            raise _HttpError(409, f"{path} does not match {sha}")
        return existing

    def _put_contents(self, req: _Request) -> tuple[int, Any]:
        repo, body, path = self._repo(req), req.body or {}, req.params["path"].strip("/")
        if not isinstance(body.get("content"), str) or not body.get("message"):
            raise _HttpError(
                422, errors=[{"resource": "Content", "field": "content", "code": "missing_field"}]
            )
        ref, branch = self._branch_for_write(repo, body)
        existing = self._checked_existing(repo, ref, path, body.get("sha"))
        entry = self._blob_entry(repo, base64.b64decode(body["content"]))
        commit = self._write_file(repo, ref, path, entry, body)
        content = self._content_json(repo, path, entry, branch, body=False)
        return (200 if existing else 201), {"content": content, "commit": commit}

    def _delete_contents(self, req: _Request) -> tuple[int, Any]:
        repo, body, path = self._repo(req), req.body or {}, req.params["path"].strip("/")
        ref, _ = self._branch_for_write(repo, body)
        if self._lookup(repo, self._commit(repo, repo.refs[ref]).tree, path) is None:
            raise _HttpError(404)
        self._checked_existing(repo, ref, path, body.get("sha"))
        return 200, {"content": None, "commit": self._write_file(repo, ref, path, None, body)}


    # search and GraphQL

    def _search_issues(self, req: _Request) -> tuple[int, Any]:
        """``GET /search/issues``: the qualifiers the bot uses; every word and phrase must match."""
        query = req.query.get("q", "")
        repos, kinds, where, labels, states, texts = [], set(), set(), set(), set(), []
        for match in _SEARCH_TERM.finditer(query):
            key, value = match["key"], (match["value"] or "").strip('"')
            if key == "repo":
                repos.append(value.lower())
            elif key == "is" and value in ("issue", "pr", "open", "closed"):
                (states if value in ("open", "closed") else kinds).add(value)
            elif key == "in":
                where.add(value)
            elif key == "label":
                labels.add(value)
            elif key == "state":
                states.add(value)
            elif key is not None:
                raise _HttpError(422, f"Unsupported search qualifier {key!r} in FakeGitHub")
            else:
                texts.append((match["phrase"] if match["phrase"] is not None else match["word"]).lower())
        if not repos:
            raise _HttpError(422, "FakeGitHub searches within repo:OWNER/NAME only")
        found = []
        for name in repos:
            repo = self._repos.get(name)
            if repo is None:
                raise _HttpError(422, errors=[{"message": f"The listed users and repositories cannot be searched: {name}",
                                                "resource": "Search", "field": "q", "code": "invalid"}])  # fmt: skip
            for issue in sorted(repo.issues.values(), key=lambda i: -i.number):
                kind = "pr" if issue.pull else "issue"
                haystack = " ".join(
                    text for field_name, text in (("title", issue.title), ("body", issue.body or ""))
                    if not where or field_name in where
                ).lower()
                if ((not kinds or kind in kinds) and (not states or issue.state in states)
                        and labels <= set(issue.labels) and all(t in haystack for t in texts)):  # fmt: skip
                    found.append((repo, issue))
        page = self._paginate(req, found)
        items = [self._issue_json(repo, issue) | {"score": 1.0} for repo, issue in page]
        return 200, {"total_count": len(found), "incomplete_results": False, "items": items}

    def _pull_by_node(self, node_id: str) -> _Issue | None:
        for repo in self._repos.values():
            for issue in repo.issues.values():
                if issue.pull is not None and _node_id("PR", issue.id) == node_id:
                    return issue
        return None

    def _graphql(self, req: _Request) -> tuple[int, Any]:
        """The two draft mutations; GitHub answers GraphQL problems with 200 and an ``errors`` list."""
        body = req.body or {}
        match = _MUTATION.search(str(body.get("query", "")))
        name = match["name"] if match else None
        if name not in ("markPullRequestReadyForReview", "convertPullRequestToDraft"):
            return 200, {"errors": [{"message": f"FakeGitHub does not model the GraphQL query {name or '?'}"}]}
        node = ((body.get("variables") or {}).get("input") or {}).get("pullRequestId", "")
        issue = self._pull_by_node(node)
        if issue is None or issue.pull is None:
            return 200, {"data": {name: None}, "errors": [{
                "type": "NOT_FOUND", "path": [name],
                "message": f"Could not resolve to a node with the global id of '{node}'."}]}  # fmt: skip
        issue.pull.draft = name == "convertPullRequestToDraft"
        issue.updated_at = _iso()
        client = (body.get("variables") or {}).get("input", {}).get("clientMutationId")
        return 200, {"data": {name: {"clientMutationId": client, "pullRequest": {"isDraft": issue.pull.draft}}}}


@pytest.fixture(name="fake_github")
def fake_github_fixture() -> Iterator[FakeGitHub]:
    """The ``fake_github`` fixture: a started :class:`FakeGitHub`, stopped after the test.

    Share it with ``from fake_github import fake_github_fixture`` in a conftest or test module; the
    fixture is registered under the name ``fake_github``.
    """
    with FakeGitHub() as server:
        yield server
