"""Ask GitHub what became of the upstream issues and pull requests our workarounds cite.

This module does I/O only: it turns a URL into an :class:`UpstreamState` and never decides what the
state means for a workaround (that is policy, elsewhere). It is careful in the ways that matter for a
bot that may propose deleting workarounds:

* Unknown is never "closed". A tracker that times out, errors or answers garbage yields
  ``reachable=False``; after ``breaker_threshold`` consecutive failed look-ups on a host the circuit
  breaker opens and later look-ups on that host return ``reachable=False`` without a request.
* One request per distinct issue per run (an in-memory cache; ``/pull/7`` and ``/issues/7`` are the
  same number on GitHub). Pull requests get ``merged`` from the issue payload's
  ``pull_request.merged_at``; servers that omit it (older GitHub Enterprise) cost one more request.
* Conditional requests: given the snapshot of an earlier run, entries that carry an ETag are
  revalidated with ``If-None-Match``; a ``304`` reuses the stored state and costs no rate limit.
* Rate limits: a ``403``/``429`` with ``retry-after`` or ``x-ratelimit-reset`` is waited out when the
  wait is at most ``max_wait`` seconds; otherwise :class:`RateLimited` is raised so the caller can stop
  cleanly and still write a partial report from :meth:`Tracker.snapshot`.
* The token is read from the environment and handed to PyGithub only; this module never keeps,
  logs or formats it.

Snapshot format (``Tracker.snapshot()``, read back by :class:`OfflineTracker` for ``--tracker FILE``
and by ``Tracker.from_env(previous_snapshot=FILE)`` for ETag revalidation)::

    {
      "format": "exportbot-tracker-snapshot",
      "version": 1,
      "base_url": "https://api.github.com",     # the API the states came from
      "hosts": ["github.com"],                  # web hosts whose URLs that API answers for
      "taken_at": "2025-06-01T12:00:00Z",
      "states": {
        "github.com/pytorch/pytorch#12345": {   # host/owner/repo#number, owner and repo lower-case
          "url": "https://github.com/pytorch/pytorch/issues/12345",
          "owner": "pytorch", "repo": "pytorch", "number": 12345,
          "kind": "issue",                      # "issue" | "pull" | null when unknown
          "state": "closed",                    # "open" | "closed" | null when unknown
          "state_reason": "completed",          # completed | not_planned | duplicate | reopened | null
          "closed_at": "2025-05-30T08:00:00Z",  # as GitHub sent it, or null
          "merged": null,                       # pulls: true/false; issues: null
          "title": "...",
          "reachable": true,                    # false: the state is unknown; see "error"
          "error": null,                        # e.g. "not found", "HTTP 502 after 4 attempts"
          "etag": "W/\\"...\\""                   # for If-None-Match next time, or null
        }
      }
    }
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from github import Auth, Github, GithubException, RateLimitExceededException
from github.Issue import Issue
from github.PullRequest import PullRequest

from bot.audit.upstream import (
    DEFAULT_API,
    NOT_FOUND,
    NOT_GITHUB,
    RateLimited,
    UpstreamRef,
    UpstreamState,
    UpstreamTracker,
    parse_upstream,
    unreachable,
    web_hosts,
)

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = "exportbot-tracker-snapshot"
SNAPSHOT_VERSION = 1
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN")
# GitHub asks clients to wait at least a minute after a secondary limit that names no time.
_SECONDARY_LIMIT_WAIT = 60.0
# x-ratelimit-reset has whole-second resolution and our clock may lag GitHub's.
_RESET_MARGIN = 1.0

class SnapshotError(ValueError):
    """A tracker snapshot file that cannot be used (unreadable, not JSON, wrong format or version)."""


def _served_ref(url: str, hosts: frozenset[str], source: str) -> UpstreamRef | UpstreamState:
    """The reference for ``url`` if ``source`` answers for its host, else a state saying why not."""
    ref = parse_upstream(url, hosts=hosts | web_hosts())
    if ref is None:
        return unreachable(None, NOT_GITHUB)
    if ref.host not in hosts:
        return unreachable(ref, f"{ref.host} is not served by {source}; check by hand")
    return ref


class _Breaker:
    """Counts consecutive failed look-ups per host; open once the count reaches the threshold.

    It never closes again within a run: a run is short, and a tracker that failed that often is
    better reported as unknown than hammered.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._failures: dict[str, int] = {}

    def is_open(self, host: str) -> bool:
        return self._failures.get(host, 0) >= self.threshold

    def record(self, host: str, *, failed: bool) -> None:
        if not self.is_open(host):
            self._failures[host] = self._failures.get(host, 0) + 1 if failed else 0


class _Unusable(Exception):
    """The server answered 200 with something that is not a usable issue (bad JSON, bad fields)."""


class Tracker:
    """Upstream state from the GitHub REST API through PyGithub, with our own retry policy."""

    def __init__(
        self,
        github: Github,
        *,
        hosts: Iterable[str] | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        breaker_threshold: int = 2,
        previous: Mapping[str, Mapping[str, Any]] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Build on a ready ``Github`` client; :meth:`from_env` is the usual way in.

        Pass ``retry=None`` to ``Github`` so that retries happen here, where they are counted and
        bounded. ``previous`` maps snapshot keys to snapshot entries whose ETags may be revalidated.
        ``sleep`` is the clock used for backoff and rate-limit waits.
        """
        self._requester = github.requester
        self.base_url = self._requester.base_url
        self.hosts = frozenset(h.lower() for h in hosts) if hosts is not None else web_hosts(self.base_url)
        self.retries = retries
        self.backoff = backoff
        self.max_wait = max_wait
        self._breaker = _Breaker(breaker_threshold)
        self._previous = dict(previous or {})
        self._sleep = sleep
        self._states: dict[str, UpstreamState] = {}
        self._etags: dict[str, str | None] = {}

    @classmethod
    def from_env(
        cls,
        base_url: str | None = None,
        token_env: str | None = None,
        *,
        timeout: int = 10,
        retries: int = 3,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        breaker_threshold: int = 2,
        web_host: str | None = None,
        previous_snapshot: str | Path | None = None,
        github: Github | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Tracker:
        """A tracker for ``base_url`` (default: the public API) with the token from the environment.

        The token comes from ``token_env`` when named, else ``GITHUB_TOKEN`` or ``GH_TOKEN``; without
        one the client is anonymous (60 requests an hour on github.com). ``timeout`` is in whole
        seconds (PyGithub insists on an int) and applies per request. ``web_host`` overrides the
        host whose URLs this API answers for. ``github`` supplies a prebuilt client instead (tests).
        ``previous_snapshot`` is an earlier run's snapshot file, used for conditional requests.
        """
        if github is None:
            token = _token_from_env(token_env)
            github = Github(
                base_url=base_url or DEFAULT_API,
                auth=Auth.Token(token) if token else None,
                retry=None,
                timeout=timeout,
            )
        previous = load_snapshot(previous_snapshot)["states"] if previous_snapshot else None
        hosts = {web_host.lower()} if web_host else None
        return cls(
            github,
            hosts=hosts,
            retries=retries,
            backoff=backoff,
            max_wait=max_wait,
            breaker_threshold=breaker_threshold,
            previous=previous,
            sleep=sleep,
        )

    @staticmethod
    def from_snapshot(path: str | Path) -> OfflineTracker:
        """Answer from a snapshot file instead of the network (``--tracker FILE``)."""
        return OfflineTracker(path)

    def __repr__(self) -> str:
        return (
            f"Tracker(base_url={self.base_url!r}, hosts={sorted(self.hosts)}, looked_up={len(self._states)})"
        )

    def state(self, url: str) -> UpstreamState:
        """The state of the issue or pull request at ``url``; never raises except :class:`RateLimited`."""
        ref = _served_ref(url, self.hosts, self.base_url)
        if isinstance(ref, UpstreamState):
            return ref
        if ref.key not in self._states:
            if self._breaker.is_open(ref.host):
                self._states[ref.key] = unreachable(
                    ref, f"{ref.host} kept failing earlier in this run; not asked"
                )
            else:
                self._states[ref.key] = self._look_up(ref)
        return self._states[ref.key]

    def snapshot(self) -> dict[str, Any]:
        """Everything looked up so far, JSON-serialisable, in the format of the module docstring."""
        states = {
            key: state.to_dict() | {"etag": self._etags.get(key)} for key, state in self._states.items()
        }
        return {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "base_url": self.base_url,
            "hosts": sorted(self.hosts),
            "taken_at": _utc_now(),
            "states": states,
        }

    def _look_up(self, ref: UpstreamRef) -> UpstreamState:
        """One look-up with retries; records the outcome with the circuit breaker."""
        attempts = self.retries + 1
        failure = ""
        for attempt in range(1, attempts + 1):
            try:
                state = self._fetch(ref)
            except GithubException as error:
                wait = _rate_limit_wait(error)
                if wait is not None:  # waiting out a limit replaces the backoff
                    self._wait_for_rate_limit(ref, wait)
                    failure = f"rate limited (HTTP {error.status})"
                    continue
                if error.status < 500:  # the tracker answered; asking again will not change it
                    self._breaker.record(ref.host, failed=False)
                    return self._client_error(ref, error)
                failure = f"HTTP {error.status}"
            except requests.Timeout:
                failure = "timed out"
            except requests.RequestException as error:
                failure = f"connection failed ({type(error).__name__})"
            except _Unusable as error:  # a proxy or server bug that retrying rarely fixes
                self._breaker.record(ref.host, failed=True)
                return unreachable(ref, str(error))
            else:
                self._breaker.record(ref.host, failed=False)
                return state
            if attempt < attempts:
                delay = self.backoff * 2 ** (attempt - 1)
                log.warning("retrying %s in %.2fs: %s", ref.url, delay, failure)
                self._sleep(delay)
        self._breaker.record(ref.host, failed=True)
        return unreachable(ref, f"{failure} after {attempts} attempts")

    def _fetch(self, ref: UpstreamRef) -> UpstreamState:
        """GET the issue (conditionally when an ETag is known) and, if needed, the pull request."""
        path = f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}"
        previous = self._previous.get(ref.key) or {}
        etag = previous.get("etag") if previous.get("reachable") else None
        # Passing headers stops PyGithub from fetching on construction; update() then sends the one
        # GET, with If-None-Match when the headers hold an ETag, and returns False on 304.
        issue = Issue(self._requester, headers={"etag": etag} if etag else {}, attributes={}, url=path)
        try:
            changed = issue.update()
        except ValueError as error:  # PyGithub parses the body with json.loads
            raise _Unusable(f"malformed JSON from {ref.host}: {error}") from None
        if not changed:
            self._etags[ref.key] = etag
            return replace(UpstreamState.from_dict(previous), ref=ref)
        self._etags[ref.key] = issue.etag
        return self._parse_issue(ref, issue.raw_data)

    def _parse_issue(self, ref: UpstreamRef, data: Any) -> UpstreamState:
        if not isinstance(data, dict) or data.get("state") not in ("open", "closed"):
            raise _Unusable(f"unexpected issue payload from {ref.host}")
        merged: bool | None = None
        pull_info = data.get("pull_request")
        is_pull = isinstance(pull_info, dict)  # GitHub serves pull requests as issues with this key
        if is_pull:
            has_merged_at = "merged_at" in pull_info
            merged = pull_info["merged_at"] is not None if has_merged_at else self._fetch_merged(ref)
        return UpstreamState(
            ref=ref,
            kind="pull" if is_pull else "issue",
            state=data["state"],
            state_reason=data.get("state_reason"),
            closed_at=data.get("closed_at"),
            merged=merged,
            title=data.get("title"),
        )

    def _fetch_merged(self, ref: UpstreamRef) -> bool:
        path = f"/repos/{ref.owner}/{ref.repo}/pulls/{ref.number}"
        pull = PullRequest(self._requester, headers={}, attributes={}, url=path)
        try:
            pull.update()
        except ValueError as error:
            raise _Unusable(f"malformed JSON from {ref.host}: {error}") from None
        merged = pull.raw_data.get("merged")
        if not isinstance(merged, bool):
            raise _Unusable(f"unexpected pull request payload from {ref.host}")
        return merged

    def _wait_for_rate_limit(self, ref: UpstreamRef, wait: float) -> None:
        if wait > self.max_wait:
            reset_at = datetime.fromtimestamp(math.ceil(time.time() + wait), UTC)
            raise RateLimited(reset_at, ref.host)
        log.info("rate limited by %s; waiting %.1fs", ref.host, wait)
        self._sleep(wait)

    @staticmethod
    def _client_error(ref: UpstreamRef, error: GithubException) -> UpstreamState:
        if error.status in (404, 410):
            return UpstreamState(ref=ref, kind=None, state=None, reachable=True, error=NOT_FOUND)
        message = error.data.get("message") if isinstance(error.data, dict) else None
        return unreachable(ref, f"HTTP {error.status}" + (f": {message}" if message else ""))


class OfflineTracker:
    """Answers from a snapshot file written by :meth:`Tracker.snapshot`; no network at all."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._data = load_snapshot(self.path)
        self.hosts = frozenset(self._data.get("hosts") or web_hosts())

    def __repr__(self) -> str:
        return f"OfflineTracker({str(self.path)!r}, states={len(self._data['states'])})"

    def state(self, url: str) -> UpstreamState:
        ref = _served_ref(url, self.hosts, f"tracker snapshot {self.path}")
        if isinstance(ref, UpstreamState):
            return ref
        entry = self._data["states"].get(ref.key)
        if entry is None:
            return unreachable(ref, f"not in tracker snapshot {self.path}")
        return replace(UpstreamState.from_dict(entry), ref=ref)

    def snapshot(self) -> dict[str, Any]:
        return self._data


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """Read and check a snapshot file; :class:`SnapshotError` says what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SnapshotError(f"{path}: cannot read tracker snapshot ({error.strerror})") from None
    except ValueError as error:
        raise SnapshotError(f"{path}: tracker snapshot is not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"{path}: not a tracker snapshot (expected format {SNAPSHOT_FORMAT!r})")
    if data.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{path}: tracker snapshot version {data.get('version')!r}, expected {SNAPSHOT_VERSION}"
        )
    if not isinstance(data.get("states"), dict):
        raise SnapshotError(f"{path}: tracker snapshot has no 'states' object")
    return data


def write_snapshot(tracker: UpstreamTracker, path: str | Path) -> Path:
    """Write ``tracker.snapshot()`` as indented JSON (stable key order, readable diffs)."""
    path = Path(path)
    path.write_text(json.dumps(tracker.snapshot(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _token_from_env(token_env: str | None) -> str | None:
    names = (token_env,) if token_env else TOKEN_VARIABLES
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _rate_limit_wait(error: GithubException) -> float | None:
    """Seconds to wait if ``error`` is a rate-limit answer, else None.

    GitHub signals limits with 429, or 403 plus ``x-ratelimit-remaining: 0`` (primary) or
    ``retry-after`` (secondary); PyGithub recognises some 403s by message only.
    """
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    limited = (
        error.status == 429
        or isinstance(error, RateLimitExceededException)
        or (error.status == 403 and (headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers))
    )
    if not limited:
        return None
    if "retry-after" in headers:
        return max(float(headers["retry-after"]), 0.0)
    if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
        return max(float(headers["x-ratelimit-reset"]) - time.time(), 0.0) + _RESET_MARGIN
    return _SECONDARY_LIMIT_WAIT


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
