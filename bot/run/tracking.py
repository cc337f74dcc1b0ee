"""The checkout's items as the upstream commands see them: the items, their draft inputs, the pins, the pages;
and what ``exportbot pr`` needs of them (where a link is written, the dashboard's upstream rows).

Apart from bot.cli.upstream so that ``exportbot pr`` (bot.cli.pr) and the ``upstream`` commands, which use
``pr``'s GitHub set-up, both read them without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bot.audit.candidates import DEFAULT_CACHE, load_cache
from bot.audit.drafts import (
    DRAFTS_DIR,
    ENTRY,
    DraftError,
    DraftRecord,
    ItemStatus,
    TrackedItem,
    draft_title,
    issue_body,
    item_status,
    render_pages,
    repository_of,
)
from bot.audit.pins import PinFileError, find_pin_file, read_pins
from bot.errors import UsageProblem
from bot.github.dashboard import TrackingRow
from bot.github.links import LinkTarget, UpstreamInputs
from bot.run.drafts import read_drafts, tracked_items


# ── The items and their drafts ──
class Drafts:
    """What every subcommand reads: the items, the draft inputs, the pins; and writing the pages."""

    def __init__(self, registry_dir: Path | None, directory: Path = DRAFTS_DIR) -> None:
        try:
            self.files = read_drafts(directory)
            self.pins = read_pins(find_pin_file(directory))
        except (DraftError, PinFileError) as error:
            raise UsageProblem(str(error)) from None
        self.items = tracked_items(registry_dir)
        self.by_id = {item.id: item for item in self.items}
        self.registry_dir = registry_dir

    def select(self, ids: Iterable[str]) -> list[TrackedItem]:
        chosen = []
        for item_id in ids:
            if item_id not in self.by_id:
                raise UsageProblem(f"{item_id!r} is no ledger entry id or registered workaround name "
                                   "(see `exportbot upstream status`)")  # fmt: skip
            chosen.append(self.by_id[item_id])
        return chosen

    def status(self, item: TrackedItem, record: DraftRecord | None = None) -> ItemStatus:
        files = self.files
        return item_status(item, files.scripts.get(item.id), files.notes.get(item.id),
                           record if record is not None else files.runs.get(item.id), self.pins)  # fmt: skip

    def pages(self) -> tuple[dict[str, str], list[ItemStatus], list[str]]:
        files = self.files
        return render_pages(self.items, files.scripts, files.notes, files.runs, self.pins)

    def write_pages(self) -> list[str]:
        """Write every page that changed; the names written."""
        pages, _, _ = self.pages()
        written = []
        for name, text in pages.items():
            path = self.files.directory / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                written.append(name)
        return written


# ── What exportbot pr needs ──
def link_targets(drafts: Drafts, registry: str) -> dict[str, LinkTarget]:
    """Item id → :class:`bot.github.links.LinkTarget`: the repository path its ``upstream`` is written in (the
    ledger list under ``registry``, the workaround's module), the tracker it must link into, what it links now."""
    notes = drafts.files.notes
    return {item.id: LinkTarget(item.id, f"{registry.strip('/')}/{Path(item.location).name}" if item.kind == ENTRY
                                else item.location, repository_of(item, notes.get(item.id)), item.upstream)
            for item in drafts.items}  # fmt: skip


def upstream_inputs(registry: str = "registry", cache_file: Path = DEFAULT_CACHE) -> UpstreamInputs:
    """:class:`bot.github.links.UpstreamInputs` of this checkout for ``exportbot pr``: the link targets, and a
    dashboard row per item without an upstream issue (status, draft, issue title and body, the candidates the
    last ``upstream find`` cached)."""
    drafts = Drafts(None)
    files = drafts.files
    found = load_cache(cache_file.read_text(encoding="utf-8")) if cache_file.is_file() else {}
    rows = []
    for item in drafts.items:
        if item.upstream:
            continue
        notes, record, script = files.notes.get(item.id), files.runs.get(item.id), files.scripts.get(item.id)
        status = drafts.status(item)
        rows.append(TrackingRow(
            item.id, item.kind, item.detail, status.status, status.reason, repository_of(item, notes),
            f"docs/upstream-drafts/{item.id}.md" if script is not None else None, draft_title(item, notes, record),
            issue_body(item, notes, script, record, drafts.pins) if script is not None else None,
            found[item.id].candidates if item.id in found else (),
        ))  # fmt: skip
    return UpstreamInputs(link_targets(drafts, registry), tuple(rows))
