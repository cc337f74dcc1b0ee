"""The shrink PR's "links" section: ``upstream = URL`` written where an item is registered (pure).

A maintainer asks for a link by ticking a candidate on the dashboard (or with ``exportbot upstream link ID
URL``); the run checks that the URL is an issue or pull request of the repository the item belongs to
(bot.github.shrink_session, :class:`bot.github.dashboard.LinkCheck`) and this module turns the accepted ones
into edits of the base branch's files: the ledger entry's TOML through ``exporters.ledger.set_upstream``
(tomlkit, every other byte kept), a workaround's ``register_*`` decorator through a syntax-tree edit
(bot.audit.workaround_removal.set_workaround_upstream). Nothing else links: no tick, no link.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from bot.audit.workaround_removal import set_workaround_upstream
from bot.github.dashboard import LinkCheck
from exporters.ledger import LedgerError, set_upstream


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
    return f"link {len(made)} item{'' if len(made) == 1 else 's'} to {'its' if len(made) == 1 else 'their'} upstream issue"
