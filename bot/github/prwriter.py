"""What the shrink PR says and changes, computed without touching GitHub or the working tree (pure).

The GitHub side (bot.github.shrink) reads the repository, hands the texts here, and writes back what these
functions return, so a dry run and a real run compute exactly the same diff, body and commit message.

* :func:`select_proposals` decides which ledger entries the rolling PR removes, from an audit report
  (docs/audit-report.md, schema 2, checked by bot.audit.report), the entries the open PR already proposes,
  and the entries of PRs that were closed unmerged (which are not proposed again until their upstream
  state or pins move).
* :func:`shrink_changes` edits *copies* of the ledger files through ``exporters.ledger`` (minimal
  diffs: every byte outside the removed entry stays).
* :func:`pr_body` renders the PR description: per entry its models, upstream link and state, the
  versions it was re-run at, the re-run evidence and the command reproducing it, plus a hidden
  machine-readable block (``<!-- exportbot:entry {...} -->``) that :func:`parse_pr_body` reads back.
  The PR body is the bot's only memory of what it proposed ("repository as database").
* :func:`workaround_changes` deletes the registered workarounds an audit (``--workarounds``) found
  removable from *copies* of their source files (bot.audit.workaround_removal: a syntax-tree cut that keeps
  every other byte); one that cannot go on its own stays in the PR as "delete by hand", with evidence.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from bot.audit.pins import BACKEND_STACK, normalize_name, stack_of
from bot.audit.plan import scope_modes
from bot.audit.verdict import NOT_DUE, REMOVAL_VERDICTS, UNKNOWN, first_error_line
from bot.audit.workaround_removal import NotSelfContained, remove_workaround_text
from bot.outcome import PASS
from exporters.ledger import SCOPES, Ledger, LedgerEntry, load_ledger, remove_entry

PR_MARKER = "<!-- exportbot:shrink-pr -->"
BOT_TRAILER = "Exportbot-Commit: true"
BASE_TRAILER = "Exportbot-Base"
WORKAROUND_LIST = "workaround"  # Proposal.list_name of a registered workaround (not a ledger entry)
MAX_PROPOSALS = 20  # one entry's section is 2-3 kB; GitHub refuses bodies over 65,536 characters
_BLOCK = re.compile(r"<!-- exportbot:entry (\{.*?\}) -->")
HELD_BLOCK = re.compile(r"<!-- exportbot:(?:entry|bump) \{")  # what a PR proposed, in its body (a bump PR's moves too)
_HUMAN_MARKER = "<!-- exportbot:human-commit {sha} -->"
_BASE_LINE = re.compile(rf"^{BASE_TRAILER}: ([0-9a-f]{{40}})$", re.MULTILINE)


@dataclass(frozen=True)
class Proposal:
    """One ledger entry proposed for removal, with everything its section of the PR shows.

    It round-trips through the PR body's hidden block, so an entry already proposed keeps its evidence
    when a later audit did not re-run it, and a closed PR still says at which upstream state and pins
    its entries were turned down.
    """

    id: str
    list_name: str
    models: tuple[str, ...]
    backend: str
    scope: str
    upstream: str | None
    upstream_state: str
    pins: Mapping[str, str | None]  # the backend's stack at the re-run (bot.audit.pins.BACKEND_STACK)
    reasons: tuple[str, ...] = ()
    evidence: tuple[Mapping[str, Any], ...] = ()  # model, mode, run, status, max_abs_diff per re-run
    audited_at: str = ""
    exporter_version: str = ""
    source: str | None = None  # a workaround: repository path of the file that defines it
    exports: tuple[tuple[str, str], ...] = ()  # a workaround: the (model, mode) exports it was probed on
    removal: str | None = None  # a workaround the audit found not self-contained: why (delete by hand)
    # A ``superseded`` entry: the registered workarounds that took over, and per export the probe proving it
    # (model, mode, without, status, error: its reproducer failing as recorded with them disabled).
    superseded_by: tuple[str, ...] = ()
    takeover: tuple[Mapping[str, Any], ...] = ()

    @property
    def is_workaround(self) -> bool:
        return self.list_name == WORKAROUND_LIST

    def pairs(self) -> list[tuple[str, str]]:
        """Every (model, mode) the evidence must cover: a workaround's probes, or models × scope modes."""
        if self.exports:
            return list(self.exports)
        return [(m, "dynamic" if d else "static") for m in self.models for d in scope_modes(self.scope)]

    @property
    def basis(self) -> tuple[str, dict[str, str | None]]:
        """What a closed PR's block is compared with: proposing again needs one of these to differ."""
        return self.upstream_state, dict(self.pins)

    def shortfall(self, runs_required: int) -> list[str]:
        """Each model and mode with fewer passing re-runs than required (then the PR is a draft)."""
        missing = []
        for model, mode in self.pairs():
            passed = sum(
                1
                for e in self.evidence
                if e.get("model") == model and e.get("mode") == mode and e.get("status") == PASS
            )
            if passed < runs_required:
                missing.append(f"{model} {mode}: {passed} of {runs_required} runs passed")
        return missing

    def to_block(self) -> str:
        """The hidden block: JSON with ``<`` and ``>`` escaped so no text can end the HTML comment."""
        data = {
            "id": self.id, "list": self.list_name, "models": list(self.models), "backend": self.backend,
            "scope": self.scope, "upstream": self.upstream, "upstream_state": self.upstream_state,
            "pins": dict(self.pins), "reasons": list(self.reasons), "evidence": [dict(e) for e in self.evidence],
            "audited_at": self.audited_at, "exporter_version": self.exporter_version,
        }  # fmt: skip
        if self.is_workaround:
            data |= {"source": self.source, "exports": [list(e) for e in self.exports], "removal": self.removal}
        if self.superseded_by:
            data |= {"superseded_by": list(self.superseded_by), "takeover": [dict(t) for t in self.takeover]}
        text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        safe = text.replace("<", "\\u003c").replace(">", "\\u003e")
        return f"<!-- exportbot:entry {safe} -->"

    @classmethod
    def from_block(cls, data: Mapping[str, Any]) -> Proposal:
        """Read a block back; ``KeyError``/``TypeError``/``ValueError`` when it is not one of ours."""
        pins = data["pins"]
        if not isinstance(data["id"], str) or not isinstance(pins, dict) or data.get("scope") not in SCOPES:
            raise ValueError("not an exportbot entry block")
        stack = BACKEND_STACK.get(str(data.get("backend")).split(".")[0], [])
        order = [name for name in stack if name in pins] + sorted(set(pins) - set(stack))
        return cls(
            id=data["id"],
            list_name=str(data.get("list", "")),
            models=tuple(data.get("models", ())),
            backend=str(data.get("backend", "")),
            scope=data["scope"],
            upstream=data.get("upstream"),
            upstream_state=str(data["upstream_state"]),
            pins={name: pins[name] for name in order},  # the JSON is key-sorted; show stack order
            reasons=tuple(data.get("reasons", ())),
            evidence=tuple(dict(e) for e in data.get("evidence", ())),
            audited_at=str(data.get("audited_at", "")),
            exporter_version=str(data.get("exporter_version", "")),
            source=data.get("source"),
            exports=tuple((str(m), str(d)) for m, d in data.get("exports", ())),
            removal=data.get("removal"),
            superseded_by=tuple(data.get("superseded_by", ())),
            takeover=tuple(dict(t) for t in data.get("takeover", ())),
        )


@dataclass(frozen=True)
class Selection:
    """The entries the PR should remove, and for every entry looked at, why it is in or out."""

    proposals: tuple[Proposal, ...]
    notes: dict[str, str] = field(default_factory=dict)
    turned_down: dict[str, int] = field(default_factory=dict)  # entry id → closed PR number


# ── The report ──
def ledger_rows(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's ledger entries."""
    return list(report["entries"])


def workaround_rows(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's registered workarounds (present when the audit ran with ``--workarounds``)."""
    return list(report.get("workarounds") or [])


def proposal_from_report(row: Mapping[str, Any], report: Mapping[str, Any]) -> Proposal:
    """A report row (a ``removable`` entry or workaround) as a proposal, with the stack versions it was
    re-run at."""
    pins = report["pins"]
    workaround = "exports" in row
    exports = tuple((str(e["model"]), str(e["mode"])) for e in row.get("exports", ()))
    return Proposal(
        id=row["id"],
        list_name=WORKAROUND_LIST if workaround else row["list"],
        models=tuple(dict.fromkeys(m for m, _ in exports)) if workaround else tuple(row["models"]),
        backend=row["backend"],
        scope="all" if workaround else row["scope"],
        upstream=row["upstream"],
        upstream_state=row["upstream_state"].get("summary", UNKNOWN),
        pins={name: pins.get(normalize_name(name)) for name in stack_of(row["backend"])},
        reasons=tuple(row.get("reasons", ())),
        evidence=tuple(
            {k: e.get(k) for k in ("model", "mode", "run", "status", "max_abs_diff", "command")}
            for e in row.get("evidence", ())
        ),
        audited_at=str(report.get("generated_at", "")),
        exporter_version=str(report.get("exporter_version", "")),
        source=row.get("source") if workaround else None,
        superseded_by=tuple(row.get("superseded_by") or ()),
        takeover=tuple(
            {"model": t.get("model"), "mode": t.get("mode"), "without": list(t.get("without") or ()),
             "status": t.get("status"), "error": t.get("failure_line") or first_error_line(t)}
            for t in row.get("supersession") or () if t.get("proves")
        ),
        exports=exports,
        removal=row.get("removal") if workaround else None,
    )


def select_proposals(
    report: Mapping[str, Any],
    base_ledger: Ledger,
    previous: Sequence[Proposal],
    closed: Sequence[tuple[int, Proposal]],
    runs_required: int,
    max_proposals: int = MAX_PROPOSALS,
    base_sources: Mapping[str, str] | None = None,
) -> Selection:
    """Which entries (and registered workarounds) the rolling PR removes now.

    ``base_sources`` maps repository paths to the base branch's text of the files defining the report's
    removable workarounds; a workaround is proposed only while its ``def`` is still there.

    * ``removable`` or ``superseded`` in the report → proposed. An entry the open PR already proposes keeps its earlier
      evidence when upstream state and pins are unchanged and that evidence was complete, so a daily
      audit finding the same thing does not rewrite the PR.
    * ``not-due`` or ``unknown`` (nothing re-run, e.g. rate limited) for an entry the PR already
      proposes → kept: nothing speaks against it. The same for entries the report does not cover
      (``audit --entry``).
    * ``still-needed``, ``changed``, ``human``, ``not-reproduced`` → taken out (any verdict but those two).
    * At most ``max_proposals`` entries, so the body stays under GitHub's 65,536 characters and a
      review stays small; the rest wait for the next PR.
    * Never proposed: entries absent from the base branch's ledger or listed differently there (the
      audit ran on another version of the entry), and entries of a PR closed unmerged at the same
      upstream state and pins.
    """
    earlier = {p.id: p for p in previous}
    candidates: dict[str, tuple[Proposal, str]] = {}
    notes: dict[str, str] = {}
    rows = {row["id"]: row for row in [*ledger_rows(report), *workaround_rows(report)]}
    for entry_id, row in rows.items():
        verdict, first_reason = row["verdict"], (row.get("reasons") or [""])[0]
        if verdict in REMOVAL_VERDICTS:
            fresh = proposal_from_report(row, report)
            kept = earlier.get(entry_id)
            if (
                kept
                and kept.basis == fresh.basis
                and kept.models == fresh.models
                and not kept.shortfall(runs_required)
            ):
                candidates[entry_id] = kept, f"proposed (evidence of {kept.audited_at} still holds)"
            else:
                candidates[entry_id] = fresh, "proposed: " + first_reason
        elif entry_id in earlier and verdict in (NOT_DUE, UNKNOWN):
            candidates[entry_id] = earlier[entry_id], f"kept: {verdict} in this audit, nothing against it"
        elif entry_id in earlier:
            notes[entry_id] = f"taken out: {verdict}: {first_reason}"
        else:
            notes[entry_id] = f"not removable: {verdict}"
    for entry_id, proposal in earlier.items():
        if entry_id not in rows:
            candidates[entry_id] = proposal, "kept: not in this audit"

    base_entries = {e.id: e for e in base_ledger.entries}
    chosen: dict[str, Proposal] = {}
    turned_down: dict[str, int] = {}
    for entry_id, (proposal, note) in candidates.items():
        refused = next((n for n, p in closed if p.id == entry_id and p.basis == proposal.basis), None)
        absent = _absent_from_base(proposal, base_entries.get(entry_id), base_sources or {})
        if absent is not None:
            notes[entry_id] = absent
        elif refused is not None:
            turned_down[entry_id] = refused
            notes[entry_id] = (
                f"not proposed again: #{refused} was closed unmerged at this upstream state and these pins"
            )
        else:
            chosen[entry_id] = proposal
            notes[entry_id] = note
    # Entries already in the PR keep their place; new ones queue in ledger order (then workarounds by
    # name) behind the cap.
    position: dict[str, tuple[int, int | str]] = {e.id: (0, n) for n, e in enumerate(base_ledger.entries)}
    position |= {i: (1, i) for i, p in chosen.items() if p.is_workaround}
    queue = sorted(chosen, key=lambda i: (i not in earlier, position[i]))
    for entry_id in queue[max_proposals:]:
        del chosen[entry_id]
        notes[entry_id] = f"waiting: the PR holds at most {max_proposals} entries; proposed once some merge"
    ordered = tuple(chosen[i] for i in sorted(chosen, key=position.__getitem__))
    order = [*rows, *(i for i in earlier if i not in rows)]  # report order, then entries it lacked
    return Selection(ordered, {i: notes[i] for i in order}, turned_down)


def _absent_from_base(proposal: Proposal, entry: LedgerEntry | None, base_sources: Mapping[str, str]) -> str | None:
    """Why the base branch no longer holds what ``proposal`` removes (a workaround's ``def``, or the ledger
    entry as audited); None when it does."""
    if proposal.is_workaround:
        text = base_sources.get(proposal.source or "", "")
        if re.search(rf"^def {re.escape(proposal.id)}\(", text, re.MULTILINE):
            return None
        return f"not defined in {proposal.source or 'an unknown file'} on the base branch"
    if entry is None:
        return "not in the base branch's ledger"
    if entry.models != proposal.models or entry.list_name != proposal.list_name:
        return "listed differently on the base branch than in the audit; audit again"
    return None


# ── Registry edits ──
def shrink_changes(registry_dir: Path, entry_ids: Iterable[str]) -> dict[Path, str]:
    """Path → new text of each ledger file that removing ``entry_ids`` changes.

    The edits run on copies in a temporary directory: ``registry_dir`` is only read, so a dry run on
    a working tree leaves it exactly as it was. ``KeyError`` for an id the ledger does not have.
    """
    ledger = load_ledger(registry_dir)
    entries = [ledger.by_id(entry_id) for entry_id in entry_ids]
    changed: dict[Path, str] = {}
    with tempfile.TemporaryDirectory(prefix="exportbot-shrink-") as scratch:
        for entry in entries:
            copy = Path(scratch) / entry.path.name
            if not copy.exists():
                shutil.copyfile(entry.path, copy)
            changed[entry.path] = remove_entry(copy, entry.id)
    return changed


def drop_records(text: str, ids: Iterable[str]) -> str:
    """``verified.toml`` text without the tables of ``ids`` (removed entries); every other byte kept.

    The shrink commit carries this edit so the verification file never outlives its entries.
    """
    document = tomlkit.parse(text)
    for record in [i for i in ids if i in document]:
        del document[record]
    return document.as_string()


def workaround_changes(
    base_sources: Mapping[str, str], proposals: Iterable[Proposal]
) -> tuple[dict[str, str], dict[str, str]]:
    """(repository path → new text of each source file, workaround id → why it is deleted by hand).

    Deletes each proposed workaround from the base branch's text of its file (several from one file in
    turn). One the audit already found not self-contained, or whose deletion is refused now, is not
    touched: it is listed in the PR and the dashboard as ready to delete by hand, with the reason.
    """
    texts: dict[str, str] = {}
    by_hand: dict[str, str] = {}
    for proposal in proposals:
        if not proposal.is_workaround:
            continue
        path = proposal.source or ""
        current = texts.get(path, base_sources.get(path))
        if proposal.removal:
            by_hand[proposal.id] = proposal.removal
        elif current is None:
            by_hand[proposal.id] = f"{path or 'its source file'} is not on the base branch"
        else:
            try:
                texts[path] = remove_workaround_text(current, proposal.id, path)
            except NotSelfContained as refused:
                by_hand[proposal.id] = str(refused)
    return texts, by_hand


def unified_diff(changes: Mapping[str, tuple[str, str]]) -> str:
    """``git diff``-style text of repository path → (old, new) texts, paths in sorted order."""
    parts = []
    for path in sorted(changes):
        old, new = changes[path]
        parts += difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    return "".join(parts)


def git_blob_sha(text: str) -> str:
    """The SHA git gives a file with this text, to compare with a tree without downloading it."""
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ── Commits ──
def commit_message(title: str, summary: Sequence[str], base_sha: str) -> str:
    """The bot's commit message (the shrink PR's and a bump PR's); its trailers mark the commit as the bot's and
    name the base it used."""
    lines = "".join(f"{line}\n" for line in summary)
    return f"{title}\n\n{lines}\n{BOT_TRAILER}\n{BASE_TRAILER}: {base_sha}\n"


def read_trailers(message: str) -> tuple[bool, str | None]:
    """Whether a commit message is the bot's, and the base SHA it recorded."""
    is_bot = any(line.strip() == BOT_TRAILER for line in message.splitlines())
    match = _BASE_LINE.search(message)
    return is_bot, match.group(1) if match else None


def human_commit_comment(sha: str, branch: str) -> str:
    """Said once per foreign tip commit; the marker lets the next run see it was already said."""
    return (
        f"{_HUMAN_MARKER.format(sha=sha)}\n"
        f"exportbot: `{branch}` now ends in commit {sha[:12]}, which exportbot did not make, so exportbot "
        "will not push to this branch or rewrite this description. The audit reports keep listing what it "
        "finds. To hand the branch back (this drops the other commits), run "
        "`exportbot pr --report REPORT --apply --recreate`."
    )


def has_human_comment(comments: Iterable[str], sha: str) -> bool:
    return any(_HUMAN_MARKER.format(sha=sha) in body for body in comments)


# ── The PR ──
def pr_title(proposals: Sequence[Proposal]) -> str:
    entries = sum(1 for p in proposals if not p.is_workaround)
    workarounds = len(proposals) - entries
    parts = [f"{entries} workaround ledger entr{'y' if entries == 1 else 'ies'}"] if entries else []
    parts += [f"{workarounds} registered workaround{'' if workarounds == 1 else 's'}"] if workarounds else []
    return f"exportbot: remove {' and '.join(parts) or 'nothing'}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _versions(pins: Mapping[str, str | None]) -> str:
    return ", ".join(f"{name} {version or '(unpinned)'}" for name, version in pins.items())


def _evidence_rows(proposal: Proposal) -> list[str]:
    rows = []
    for model, mode in proposal.pairs():
        runs = [e for e in proposal.evidence if e.get("model") == model and e.get("mode") == mode]
        passed = sum(1 for e in runs if e.get("status") == PASS)
        diffs = ", ".join("—" if e.get("max_abs_diff") is None else f"{e['max_abs_diff']:.3g}" for e in runs)
        rows.append(f"| `{model}` | {mode} | {passed} of {len(runs)} | {diffs or '—'} |")
    return rows


def _what(proposal: Proposal, by_hand: Mapping[str, str]) -> list[str]:
    """The section's first line: the ledger entry's models, or where the workaround goes (or why not)."""
    if not proposal.is_workaround:
        return [
            f"- **Models:** {', '.join(f'`{m}`' for m in proposal.models)} ({proposal.list_name}, "
            f"backend `{proposal.backend}`, scope `{proposal.scope}`)"
        ]
    where = f"`{proposal.source}`" if proposal.source else "its source file"
    removal = (
        f"- **Delete by hand** (this PR does not touch the code): {_cell(by_hand[proposal.id])}"
        if proposal.id in by_hand
        else f"- **Removal:** its function and registration are deleted from {where} in this PR"
    )
    return [f"- **Registered workaround** (backend `{proposal.backend}`) in {where}", removal]


def _takeover_lines(proposal: Proposal) -> list[str]:
    """A superseded entry's proof: which workarounds took over, and the reproducer failing without them."""
    if not proposal.superseded_by:
        return []
    names = ", ".join(f"`{name}`" for name in proposal.superseded_by)
    return [
        f"- **Superseded by** registered workarounds {names}: the bug is still there, they handle it, and the "
        "entry can go while they stay registered",
        "",
        "| model | mode | with these disabled too | the reproducer, first error line |",
        "| --- | --- | --- | --- |",
        *(
            f"| `{t.get('model')}` | {t.get('mode')} | {', '.join(f'`{n}`' for n in t.get('without') or ())} | "
            f"{t.get('status')}: {_cell(str(t.get('error') or ''))} |"
            for t in proposal.takeover
        ),
    ]


def rerun_commands(proposal: Proposal) -> list[str]:
    """The ``exportbot export`` lines the audit's re-runs ran (recorded in the evidence), one per export: what
    a reviewer runs to see the pass. Evidence recorded before re-runs named their command gets the line the
    re-run builds: ``--repro ID`` for a ledger entry (its reproducer, not the class's default tiny model),
    ``--without NAME`` for a workaround."""
    recorded = {(e.get("model"), e.get("mode")): e["command"] for e in proposal.evidence if e.get("command")}
    leave_out = f"--without {proposal.id}" if proposal.is_workaround else f"--repro {proposal.id}"
    return list(dict.fromkeys(
        recorded.get((model, mode)) or f"exportbot export {model} --backend {proposal.backend} --{mode} {leave_out}"
        for model, mode in proposal.pairs()
    ))  # fmt: skip


def proposal_section(proposal: Proposal, runs_required: int, by_hand: Mapping[str, str]) -> list[str]:
    """One proposed removal's section of a PR body (the shrink PR's and a bump PR's): what goes, upstream, the
    versions re-run at, the verdict, the evidence per run, the command reproducing it, its hidden block."""
    commands = rerun_commands(proposal)
    commands += [
        f"exportbot export {t.get('model')} --backend {proposal.backend} --{t.get('mode')} --repro {proposal.id} "
        + " ".join(f"--without {name}" for name in t.get("without") or ())
        + "  # fails as the entry records"
        for t in proposal.takeover
    ]
    shortfall = proposal.shortfall(runs_required)
    return [
        f"### `{proposal.id}`",
        "",
        *_what(proposal, by_hand),
        f"- **Upstream** ({proposal.upstream_state}): {proposal.upstream or 'none recorded'}",
        f"- **Re-run at:** {_versions(proposal.pins)}",
        f"- **Audit:** {proposal.audited_at or 'unknown'} (exporters {proposal.exporter_version or 'unknown'})",
        f"- **Verdict:** {'; '.join(proposal.reasons) or 'removable'}",
        *([f"- **Evidence incomplete:** {'; '.join(shortfall)}"] if shortfall else []),
        *_takeover_lines(proposal),
        "",
        f"| model | mode | runs passed (of {runs_required} required) | max abs diff vs eager, per run |",
        "| --- | --- | --- | --- |",
        *_evidence_rows(proposal),
        "",
        "Reproduce locally (the export without this workaround):",
        "",
        "```sh",
        *commands,
        "```",
        "",
        proposal.to_block(),
        "",
    ]


def _list_cell(proposal: Proposal, by_hand: Mapping[str, str]) -> str:
    if not proposal.is_workaround:
        return proposal.list_name
    return f"workaround ({'delete by hand' if proposal.id in by_hand else f'`{proposal.source}`'})"


def pr_body(
    proposals: Sequence[Proposal], runs_required: int, branch: str, by_hand: Mapping[str, str] | None = None,
    links: Sequence[str] = (),
) -> str:  # fmt: skip
    """The PR description; the same proposals always give the same text (no timestamps of this run).
    ``by_hand``: workaround id → why this PR lists it for deletion by hand instead of deleting it. ``links``: the
    links section (bot.github.links), after the removals."""
    by_hand = by_hand or {}
    if not proposals:
        return "\n".join([PR_MARKER, "exportbot links items to their upstream issues; this PR removes nothing.", "",
                          *links, "---", _footer(branch)]) + "\n"  # fmt: skip
    incomplete = [p.id for p in proposals if p.shortfall(runs_required)]
    removes = "their ledger entries" if all(not p.is_workaround for p in proposals) else (
        "their ledger entries and the code of the registered workarounds (those that cannot be deleted "
        "on their own are listed as ready to delete by hand)"
    )
    lines = [
        PR_MARKER,
        "exportbot re-ran the exports below **without** their workaround, at the pinned versions; every "
        f"run passed and matched the eager model. This PR removes {removes}.",
        "",
    ]
    if incomplete:
        lines += [
            "> [!NOTE]",
            f"> Evidence is incomplete for {', '.join(f'`{i}`' for i in incomplete)} (fewer than "
            f"{runs_required} passing runs per model and mode): review once the next audit completes it.",
            "",
        ]
    lines += ["| entry | list | models | upstream |", "| --- | --- | --- | --- |"]
    lines += [
        f"| `{p.id}` | {_list_cell(p, by_hand)} | {_cell(', '.join(p.models))} | {p.upstream_state} |"
        for p in proposals
    ]
    lines.append("")
    for proposal in proposals:
        lines += proposal_section(proposal, runs_required, by_hand)
    lines += [*links, "---", _footer(branch)]
    return "\n".join(lines) + "\n"


def _footer(branch: str) -> str:
    return (f"Maintained by exportbot on `{branch}`: it rewrites this description and adds commits while it is "
            "the only one committing there (push a commit to take the branch over). Closing this PR unmerged "
            "stops these entries from being proposed again until their upstream state or pinned versions change; "
            "a link stays proposed while its dashboard checkbox is ticked.")  # fmt: skip


def parse_pr_body(body: str | None) -> list[Proposal]:
    """The proposals recorded in a PR body; blocks that are not ours (edited, truncated) are skipped."""
    found = []
    for match in _BLOCK.finditer(body or ""):
        try:
            found.append(Proposal.from_block(json.loads(match.group(1))))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def closed_body(notes: Mapping[str, str]) -> str:
    """The body of a PR the bot closes itself: no entry blocks, so nothing is held back later."""
    lines = [
        PR_MARKER,
        "exportbot closed this PR: no entry it proposed is removable any more.",
        "",
        *(f"- `{entry_id}`: {note}" for entry_id, note in sorted(notes.items())),
    ]
    return "\n".join(lines) + "\n"
