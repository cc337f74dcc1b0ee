"""What an upstream link names and what state it is in: GitHub issue and pull request references, pure.

``parse_upstream`` reads a workaround's ``upstream`` URL into an :class:`UpstreamRef` (one issue, one URL);
:class:`UpstreamState` is what a tracker said about it. :class:`UpstreamTracker` is what a tracker offers
(``bot.github.tracker`` asks GitHub, an offline snapshot replays an earlier answer) and :class:`RateLimited`
what it raises when GitHub's rate limit outlasts the caller's patience. The audit's decisions (``bot.audit.plan``, ``bot.audit.verdict``) read
states through these types only, never through the code that fetched them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

DEFAULT_API = "https://api.github.com"
NOT_GITHUB = "not a GitHub URL; check by hand"
NOT_FOUND = "not found"

Kind = Literal["issue", "pull"]
State = Literal["open", "closed"]

_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[^/?#]+)/(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<repo>[A-Za-z0-9._-]+)"
    r"/(?P<kind>issues|pull|pulls)/(?P<number>[1-9][0-9]*)(?:[/?#].*)?"
)


@dataclass(frozen=True)
class UpstreamRef:
    """An issue or pull request on a GitHub host; ``url`` is the canonical web URL."""

    url: str
    owner: str
    repo: str
    number: int

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc.lower()

    @property
    def key(self) -> str:
        """Identity of the issue: GitHub treats owner and repo case-insensitively, and pulls are issues."""
        return f"{self.host}/{self.owner.lower()}/{self.repo.lower()}#{self.number}"


@dataclass(frozen=True)
class UpstreamState:
    """What the tracker said about one upstream reference.

    ``reachable=False`` means the state is unknown (and ``state`` is None): never treat it as closed.
    ``reachable=True`` with ``error="not found"`` means GitHub answered 404 (deleted, moved, private).
    """

    ref: UpstreamRef | None
    kind: Kind | None
    state: State | None
    state_reason: str | None = None
    closed_at: str | None = None
    merged: bool | None = None
    title: str | None = None
    reachable: bool = True
    error: str | None = None

    @property
    def closed_as_fixed(self) -> bool:
        """Closed as completed, or merged: the only closures that may lead to an automatic proposal."""
        if not self.reachable or self.state != "closed":
            return False
        return bool(self.merged) if self.kind == "pull" else self.state_reason == "completed"

    def to_dict(self) -> dict[str, Any]:
        ref = asdict(self.ref) if self.ref else {"url": None, "owner": None, "repo": None, "number": None}
        fields = asdict(self)
        del fields["ref"]
        return ref | fields

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UpstreamState:
        ref = None
        if data.get("url") is not None:
            ref = UpstreamRef(data["url"], data["owner"], data["repo"], int(data["number"]))
        return cls(
            ref=ref,
            kind=data.get("kind"),
            state=data.get("state"),
            state_reason=data.get("state_reason"),
            closed_at=data.get("closed_at"),
            merged=data.get("merged"),
            title=data.get("title"),
            reachable=bool(data.get("reachable")),
            error=data.get("error"),
        )


def unreachable(ref: UpstreamRef | None, error: str) -> UpstreamState:
    """A state that says "we could not find out", with the reason."""
    return UpstreamState(ref=ref, kind=None, state=None, reachable=False, error=error)


def web_hosts(base_url: str | None = None) -> frozenset[str]:
    """Web hosts whose issue URLs the API at ``base_url`` answers for.

    The public API serves github.com. A GitHub Enterprise Server API (``https://HOST/api/v3``) serves
    ``HOST``; a GHE.com API (``https://api.SUB.ghe.com``) serves ``SUB.ghe.com``.
    """
    if base_url is None or base_url.rstrip("/") == DEFAULT_API:
        return frozenset({"github.com"})
    netloc = urlsplit(base_url).netloc.lower()
    return frozenset({netloc, netloc.removeprefix("api.")})


def parse_upstream(
    url: str, base_url: str | None = None, *, hosts: Iterable[str] | None = None
) -> UpstreamRef | None:
    """Parse a GitHub issue or pull request web URL; None for anything else (other trackers, junk).

    Accepts github.com, plus the hosts served by ``base_url`` (GitHub Enterprise) or the explicit
    ``hosts``. Fragments, queries and trailing paths (``/files``, ``#issuecomment-1``) are dropped, and
    github.com URLs are written ``https://github.com/...`` so one issue has one URL.
    """
    match = _URL.fullmatch(url.strip())
    if match is None:
        return None
    host = match["host"].lower()
    scheme = match["scheme"]
    if host in ("github.com", "www.github.com"):
        host, scheme = "github.com", "https"
    allowed = {h.lower() for h in hosts} if hosts is not None else web_hosts(base_url) | web_hosts()
    if host not in allowed:
        return None
    segment = "issues" if match["kind"] == "issues" else "pull"
    canonical = f"{scheme}://{host}/{match['owner']}/{match['repo']}/{segment}/{match['number']}"
    return UpstreamRef(canonical, match["owner"], match["repo"], int(match["number"]))


class RateLimited(Exception):
    """GitHub's rate limit is spent and resets later than the caller is willing to wait."""

    def __init__(self, reset_at: datetime, host: str = "github.com") -> None:
        self.reset_at = reset_at
        self.host = host
        super().__init__(f"GitHub rate limit reached on {host}; resets at {reset_at:%Y-%m-%dT%H:%M:%SZ}")


class UpstreamTracker(Protocol):
    """What callers need: a state per URL, and a record of what was looked up."""

    def state(self, url: str) -> UpstreamState: ...

    def snapshot(self) -> dict[str, Any]: ...
