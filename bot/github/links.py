"""The shrink PR's "links" section: ``upstream = URL`` written where an item is registered (pure).

A maintainer asks for a link by ticking a candidate on the dashboard (or with ``exportbot upstream link ID
URL``, which ticks it); the run reads the issue the URL names (bot.github.shrink_session, one GET) and
:func:`check_link` accepts it only when it is an issue or pull request of the repository the item belongs to;
this module turns the accepted ones into edits of the base branch's files: the ledger entry's TOML through ``exporters.ledger.set_upstream``
(tomlkit, every other byte kept), a workaround's ``register_*`` decorator through a syntax-tree edit
(bot.audit.workaround_removal.set_workaround_upstream). Nothing else links: no tick, no link.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.audit.workaround_removal import set_workaround_upstream
from bot.github.dashboard import LinkCheck, TrackingRow, ticked_links
from exporters.ledger import LedgerError, set_upstream

_ISSUE_URL = re.compile(r"https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull)/(\d+)/?")


@dataclass(frozen=True)
class LinkTarget:
    """Where an item's ``upstream`` is written and which repository it must link into (built from the checkout
    by bot.cli.upstream.link_targets)."""

    id: str
    path: str  # repository path of the ledger list or the workaround's module
    repository: str | None  # owner/name of the tracker that would fix it (None: any)
    upstream: str | None = None  # what it links now


@dataclass(frozen=True)
class IssueFacts:
    """What GitHub says about the issue a URL names (read by the caller)."""

    repository: str
    number: int
    title: str
    state: str
    is_pull: bool


def parse_issue_url(url: str) -> tuple[str, int]:
    """(owner/name, number) of ``https://github.com/OWNER/NAME/issues/N`` (or ``/pull/N``); ``ValueError``
    naming what is wrong otherwise."""
    match = _ISSUE_URL.fullmatch(url.strip())
    if match is None:
        raise ValueError(f"{url!r} is not a GitHub issue or pull request URL (https://github.com/OWNER/NAME/issues/N)")
    return match.group(1), int(match.group(3))


@dataclass(frozen=True)
class UpstreamInputs:
    """What a shrink run needs from the checkout for the links and the dashboard's upstream section: where each
    item would get its link, and the rows of the items without one (bot.cli.upstream.upstream_inputs)."""

    targets: Mapping[str, LinkTarget]
    rows: tuple[TrackingRow, ...] = ()

    def paths_to_link(self, dashboard_body: str | None) -> set[str]:
        """The files of the items whose links the dashboard asks for (what the run must read from the base)."""
        return {self.targets[i].path for i, _ in ticked_links(dashboard_body) if i in self.targets}


def link_problem(item_id: str, url: str, target: LinkTarget | None) -> str | None:
    """Why ``url`` cannot become ``item_id``'s ``upstream`` before asking GitHub (None: ask): the item exists and
    links nothing yet, and the URL names an issue or pull request of the repository that would fix it."""
    if target is None:
        return f"no ledger entry or registered workaround is named {item_id!r}"
    if target.upstream:
        return f"it already links {target.upstream}"
    try:
        repository, _ = parse_issue_url(url)
    except ValueError as error:
        return str(error)
    if target.repository is not None and repository.lower() != target.repository.lower():
        return f"{url} is in {repository}, not in {target.repository}, where {item_id} would be fixed"
    return None


def check_link(item_id: str, url: str, target: LinkTarget | None, facts: IssueFacts | None) -> LinkCheck:
    """The verdict on a requested link: :func:`link_problem`, then what GitHub answered for the URL (``facts``;
    None: 404, or not asked because of a problem)."""
    problem = link_problem(item_id, url, target)
    if problem is not None:
        return LinkCheck(item_id, url, False, problem)
    repository, number = parse_issue_url(url)
    if facts is None:
        return LinkCheck(item_id, url, False, f"{url} does not resolve: GitHub has no issue or pull request "
                                              f"{repository}#{number}")  # fmt: skip
    if facts.repository.lower() != repository.lower() or facts.number != number:  # a transferred issue
        return LinkCheck(item_id, url, False, f"{url} now resolves to {facts.repository}#{facts.number}")
    kind = "pull" if facts.is_pull else "issue"
    return LinkCheck(item_id, url, True, f"{facts.state} {kind}: {facts.title}", facts.title, facts.state, kind)


def link_edit(text: str, path: str, item_id: str, url: str) -> str:
    """``text`` (the file at repository ``path``) with ``upstream = url`` for ``item_id``; ``ValueError`` when
    the item is not there or already links something (a link is never replaced here)."""
    if path.endswith(".toml"):
        with tempfile.TemporaryDirectory(prefix="exportbot-link-") as scratch:
            copy = Path(scratch) / Path(path).name  # the list is named by its file
            copy.write_bytes(text.encode("utf-8"))
            try:
                return set_upstream(copy, item_id, url)
            except LedgerError as error:
                raise ValueError(str(error).splitlines()[0].replace(str(copy), path)) from None
    return set_workaround_upstream(text, item_id, url, path)


def link_changes(
    checks: Iterable[LinkCheck], base_files: Mapping[str, str], targets: Mapping[str, str],
    changes: dict[str, tuple[str, str]], removed: Iterable[str] = (),
) -> tuple[list[LinkCheck], list[LinkCheck]]:  # fmt: skip
    """Add each accepted link's edit to ``changes`` (repository path → (base text, new text), on top of the
    removals already there). Returns (links made, links refused with the reason); an item this PR removes, one
    whose file is not on the base branch or that already links an issue there, is refused."""
    made, refused = [], []
    gone = set(removed)
    for check in checks:
        if not check.accepted:
            refused.append(check)
            continue
        path = targets.get(check.id)
        if check.id in gone:
            refused.append(dataclasses.replace(check, accepted=False, note="this PR removes it"))
            continue
        if path is None or path not in base_files:
            refused.append(dataclasses.replace(check, accepted=False, note=f"{path or 'its file'} is not on the base "
                                                                           "branch"))  # fmt: skip
            continue
        current = changes[path][1] if path in changes else base_files[path]
        try:
            new = link_edit(current, path, check.id, check.url)
        except ValueError as error:
            refused.append(dataclasses.replace(check, accepted=False, note=str(error)))
            continue
        changes[path] = (base_files[path], new)
        made.append(check)
    return made, refused


def links_lines(made: Sequence[LinkCheck], targets: Mapping[str, str]) -> list[str]:
    """The PR body's section: each link, what it points at, the file that gets it."""
    if not made:
        return []
    lines = [
        "## Links",
        "",
        "Each item below had no `upstream`; a maintainer asked for this link (a ticked candidate on the dashboard, "
        "or `exportbot upstream link`) and the URL is an issue or pull request of the item's repository. From now "
        "on `exportbot audit` follows it.",
        "",
        "| item | upstream | state | file |",
        "| --- | --- | --- | --- |",
    ]
    for check in made:
        title = check.title.replace("|", "\\|")
        lines.append(f"| `{check.id}` | [{check.url.split('github.com/')[-1]}]({check.url}): {title} | "
                     f"{check.kind} {check.state} | `{targets.get(check.id, '?')}` |")  # fmt: skip
    return [*lines, ""]


def links_title(made: Sequence[LinkCheck]) -> str:
    return f"exportbot: link {len(made)} item{'' if len(made) == 1 else 's'} to {'its' if len(made) == 1 else 'their'} upstream issue"
