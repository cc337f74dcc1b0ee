"""GitHub's issue search through PyGithub, paced to its budget: at most 30 searches in any minute, and a 403
or 429 answer waited out for as long as its ``retry-after`` (or rate-limit reset) says.

Why pace on our side: the search API has its own budget (30 requests a minute with a token, 10 without),
separate from the core one, and GitHub answers a burst with a secondary rate limit whose wait can be long. A
run that spaces its searches never meets it; one that meets it anyway (another job sharing the token) waits and
tries again, up to ``max_wait`` seconds at a time, and otherwise stops that item's search with a reason (its
candidates are then not cached, so the next run searches it again).

One search is one request: ``search_issues(query).get_page(0)``, the first page only (GitHub's best matches,
``per_page`` of the client).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from github import Github, GithubException

from bot.audit.candidates import SearchHit
from bot.github.tracker import _rate_limit_wait

SEARCHES_PER_MINUTE = 30
WINDOW_S = 60.0
BODY_CHARS = 2000  # of each hit's body, for ranking


class SearchStopped(Exception):
    """A search could not be made (a refusal, or a rate limit longer than the caller waits); one line."""


class IssueSearch:
    """Repository-scoped issue and pull request searches, paced and retried as the module says."""

    def __init__(
        self, github: Github, *, per_minute: int = SEARCHES_PER_MINUTE, max_wait: float = 120.0, tries: int = 3,
        window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:  # fmt: skip
        """``per_minute`` searches in any ``window`` seconds (a minute; tests shorten it with the fake's)."""
        self.github, self.per_minute, self.max_wait, self.tries = github, per_minute, max_wait, tries
        self.window = window
        self.clock, self.sleep = clock, sleep
        self.sent: collections.deque[float] = collections.deque()  # when the last window's searches were answered
        self.waited = 0.0  # seconds slept, pacing and backing off

    def _pace(self) -> None:
        """Sleep until one more search stays within ``per_minute`` in any window. A search counts from the moment
        its answer came back (:meth:`_sent`), later than GitHub saw it, so our window never ends before GitHub's."""
        now = self.clock()
        while self.sent and now - self.sent[0] >= self.window:
            self.sent.popleft()
        if len(self.sent) >= self.per_minute:
            self._sleep(self.window - (now - self.sent[0]))
            self.sent.popleft()

    def _sent(self) -> None:
        self.sent.append(self.clock())

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.waited += seconds
            self.sleep(seconds)

    def search(self, query: str) -> list[SearchHit]:
        """The first page of hits for ``query``; :class:`SearchStopped` when GitHub will not answer it."""
        for attempt in range(1, self.tries + 1):
            self._pace()
            try:
                issues = self.github.search_issues(query).get_page(0)
                self._sent()
                return [_hit(issue) for issue in issues]
            except GithubException as error:
                self._sent()
                wait = _rate_limit_wait(error)
                if wait is None:
                    message = error.data.get("message") if isinstance(error.data, dict) else None
                    raise SearchStopped(f"GitHub answered HTTP {error.status}" + (f": {message}" if message else "")
                                        + f" to {query!r}") from None  # fmt: skip
                if wait > self.max_wait or attempt == self.tries:
                    raise SearchStopped(f"search rate limit: GitHub asks to wait {wait:.0f} s "
                                        f"(after {attempt} tries); searched again next run") from None  # fmt: skip
                self._sleep(wait)
        raise SearchStopped(f"no answer to {query!r}")  # pragma: no cover - the loop returns or raises


def _hit(issue: object) -> SearchHit:
    url = issue.html_url  # type: ignore[attr-defined]
    owner, repo = urlsplit(url).path.strip("/").split("/")[:2]
    body = (issue.body or "")[:BODY_CHARS]  # type: ignore[attr-defined]
    kind = "pull" if issue.pull_request is not None else "issue"  # type: ignore[attr-defined]
    return SearchHit(url, f"{owner}/{repo}", issue.number, issue.title, issue.state, kind,  # type: ignore[attr-defined]
                     f"{issue.title}\n{body}")  # type: ignore[attr-defined]
