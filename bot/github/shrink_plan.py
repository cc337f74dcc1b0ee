"""The shrink PR's records, pure: what a run reads from the repository and every write it would make.

``RepoState`` is what ``bot.github.shrink_session`` read (the base branch's files, the head branch's tip, the
open PR and the ones closed unmerged, the dashboard's body); ``plan_shrink`` turns it and an audit report into
a ``ShrinkPlan`` (the edited ledger and verification files, title, body, draft, labels) without any I/O, and
``ShrinkOutcome`` is what a run planned and did. The session makes the plan's writes; ``bot.github.shrink``
runs the two.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.verdict import REMOVABLE
from bot.audit.verification import VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE
from bot.config import BotConfig
from bot.github.dashboard import LinkCheck
from bot.github.links import link_changes, links_lines, links_title
from bot.github.prwriter import (
    Proposal,
    Selection,
    closed_body,
    commit_message,
    drop_records,
    git_blob_sha,
    has_human_comment,
    human_commit_comment,
    parse_pr_body,
    pr_body,
    pr_title,
    select_proposals,
    shrink_changes,
    unified_diff,
    workaround_changes,
    workaround_rows,
)
from exporters.ledger import LIST_FILES, Ledger


# ── What a run reads ──
@dataclass(frozen=True)
class PullInfo:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    url: str
    draft: bool = False

    @functools.cached_property
    def proposals(self) -> list[Proposal]:
        """What this PR proposes, read back from its body's hidden blocks (once)."""
        return parse_pr_body(self.body)


@dataclass(frozen=True)
class Tip:
    """The head branch's last commit: whose it is, the base it recorded, the files a PR may change."""

    sha: str
    is_bot: bool
    recorded_base: str | None
    blobs: Mapping[str, str]  # repository path → blob SHA of the files a PR may change (bot tips only)


@dataclass(frozen=True)
class RepoState:
    base_sha: str
    # repository path → text on the base branch of the files a PR may change: the ledger files, the
    # verification files and the source files of the workarounds the report or the open PR proposes
    base_files: Mapping[str, str]
    tip: Tip | None  # None: the head branch does not exist
    open_pull: PullInfo | None
    closed: tuple[tuple[int, Proposal], ...]  # (PR number, entry) of PRs closed unmerged
    comments: tuple[str, ...] = ()  # the open PR's comments, read only when a foreign commit is the tip
    dashboard_body: str | None = None  # the dashboard issue's body as it stands (None: no dashboard yet)
    closed_heads: frozenset[str] = frozenset()  # head commits of the PRs a human closed unmerged (rejected)
    rejected: tuple[tuple[int, str], ...] = ()  # (number, body) of every PR of the branch closed unmerged


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
    force: bool = False  # the branch is reset to this commit (--recreate, or rebuilt from the base)
    rebuild: bool = False  # an entry the PR proposed dropped out: one fresh commit on the base
    open_pull: bool = False
    pull_edits: dict[str, str] = field(default_factory=dict)
    ready_for_review: bool = False  # the open PR is a draft and its evidence is now complete
    close_pull: bool = False
    labels: tuple[str, ...] = ()
    reviewers: tuple[str, ...] = ()
    comment: str | None = None
    blocked: str | None = None
    pull_number: int | None = None
    by_hand: dict[str, str] = field(default_factory=dict)  # removable workaround → why not deleted here
    summary: tuple[str, ...] = ()  # the commit message's lines after the title ("Removes: ...", "Moves: ...")
    links: tuple[LinkCheck, ...] = ()  # the requested links: made (accepted) and refused, with why

    @property
    def message(self) -> str:
        return commit_message(self.title, self.summary, self.base_sha) if self.parents else ""

    def steps(self) -> list[str]:
        """The writes, in the order they happen, as one line each."""
        steps = [self.blocked] if self.blocked else []
        if self.comment:
            steps.append(f"comment on #{self.pull_number} about the commit exportbot did not make")
        if self.parents:
            how = ("rebuild" if self.rebuild else "reset") if self.force else "create" if self.create_branch else "move"
            steps.append(f"commit the removals (parents {', '.join(p[:12] for p in self.parents)}); "
                         f"{how} branch {self.branch}")  # fmt: skip
        if self.open_pull:
            steps.append(f"open a{' draft' if self.draft else ''} PR {self.branch} → {self.base_branch}")
        if self.pull_edits:
            steps.append(f"update the {' and '.join(sorted(self.pull_edits))} of #{self.pull_number}")
        if self.ready_for_review:
            steps.append(f"mark #{self.pull_number} ready for review: the evidence is complete")
        if self.close_pull:
            steps.append(f"close #{self.pull_number}: nothing left to remove")
        if self.labels:
            steps.append(f"add labels {', '.join(self.labels)}")
        if self.reviewers:
            steps.append(f"request reviews from {', '.join(self.reviewers)}")
        return steps


def _verification_changes(
    base_files: Mapping[str, str], config: BotConfig, proposals: tuple[Proposal, ...], by_hand: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """The verification files without the records of the entries (and deleted workarounds) this PR
    removes, so ``verified.toml`` never outlives its entries."""
    removed = {
        VERIFIED_FILE: [p.id for p in proposals if not p.is_workaround],
        WORKAROUNDS_VERIFIED_FILE: [p.id for p in proposals if p.is_workaround and p.id not in by_hand],
    }
    changes = {}
    for name, ids in removed.items():
        path = _repo_path(config, name)
        text = base_files.get(path)
        if text is not None and ids and (new := drop_records(text, ids)) != text:
            changes[path] = (text, new)
    return changes


def removal_changes(
    selection: Selection, state: RepoState, base_dir: Path, config: BotConfig
) -> tuple[Selection, dict[str, tuple[str, str]], dict[str, str]]:
    """What removing the selected entries and workarounds changes (repository path → (base text, new text)):
    the ledger files, the workarounds' source files and the verification files without their records; and
    workaround id → why it is left to delete by hand. A selection of only such workarounds proposes nothing."""
    sources, by_hand = workaround_changes(state.base_files, selection.proposals)
    if all(p.id in by_hand for p in selection.proposals):  # nothing to commit: the dashboard lists them
        notes = selection.notes | {i: "removable; delete by hand (not self-contained)" for i in by_hand}
        selection = dataclasses.replace(selection, proposals=(), notes=notes)
    ledger_ids = [p.id for p in selection.proposals if not p.is_workaround]
    changes = {
        _repo_path(config, path.name): (state.base_files.get(_repo_path(config, path.name), ""), text)
        for path, text in shrink_changes(base_dir, ledger_ids).items()
    } | {path: (state.base_files[path], text) for path, text in sources.items()}
    changes |= _verification_changes(state.base_files, config, selection.proposals, by_hand)
    return selection, changes, by_hand


def plan_shrink(
    report: Mapping[str, Any], state: RepoState, ledger: Ledger, base_dir: Path, config: BotConfig,
    *, recreate: bool = False, links: Sequence[LinkCheck] = (), link_paths: Mapping[str, str] | None = None,
) -> ShrinkPlan:  # fmt: skip
    """The plan for this report and repository state; ``base_dir`` holds the base's ledger files. ``links``: the
    links a maintainer asked for, already checked against GitHub (bot.github.links); the accepted ones are
    written at ``link_paths`` (item id → repository path) and listed in the PR's "links" section."""
    pull = state.open_pull
    previous = pull.proposals if pull else []
    selection = select_proposals(
        report, ledger, previous, state.closed, config.runs, base_sources=state.base_files
    )
    selection, changes, by_hand = removal_changes(selection, state, base_dir, config)
    proposals = selection.proposals
    paths = link_paths or {}
    made, refused = link_changes(links, state.base_files, paths, changes, removed=[p.id for p in proposals])
    summary = (f"Removes: {', '.join(p.id for p in proposals)}",) if proposals else ()
    summary += (f"Links: {', '.join(f'{c.id} → {c.url}' for c in made)}",) if made else ()
    plan = ShrinkPlan(
        selection, changes, pr_title(proposals) if proposals or not made else links_title(made),
        pr_body(proposals, config.runs, config.branch, by_hand, links_lines(made, paths)),
        draft=any(p.shortfall(config.runs) for p in proposals), branch=config.branch,
        base_branch=config.base_branch, base_sha=state.base_sha, pull_number=pull.number if pull else None,
        by_hand=by_hand, summary=summary, links=(*made, *refused),
    )  # fmt: skip
    # An entry the PR proposed (and its branch removed) dropped out: merging or adding a commit would leave its
    # removal in the PR's diff, so the branch starts again from the base.
    dropped = {p.id for p in previous if not p.removal} - {p.id for p in proposals}
    closing = None if proposals or made else closed_body({p.id: selection.notes[p.id] for p in previous})
    return plan_branch(plan, state, config.labels, config.reviewers, closing=closing, rebuild=bool(dropped),
                       recreate=recreate)  # fmt: skip


def plan_branch(
    plan: ShrinkPlan, state: RepoState, labels: tuple[str, ...], reviewers: tuple[str, ...], *,
    closing: str | None, rebuild: bool, recreate: bool,
) -> ShrinkPlan:  # fmt: skip
    """The branch and PR writes that bring ``plan.branch`` to ``plan.changes`` over the base, for the shrink PR
    and each bump PR alike: never pushing over a commit exportbot did not make, a commit only when the files
    differ, a merge of a moved base, a fresh commit on the base when ``rebuild`` (content the PR proposed is
    gone) or when no open PR uses the branch and its tip is a rejected PR's or holds other changes; the PR
    opened, edited, marked ready or (``closing``: its body when there is nothing left) closed."""
    pull, tip = state.open_pull, state.tip
    if tip is not None and not tip.is_bot and tip.sha != state.base_sha and not recreate:
        plan.blocked = (
            f"leave {plan.branch} alone: its tip {tip.sha[:12]} is not an exportbot commit "
            "(--recreate takes the branch back)"
        )
        if pull is not None and not has_human_comment(state.comments, tip.sha):
            plan.comment = human_commit_comment(tip.sha, plan.branch)
        return plan
    if closing is not None:
        if pull is not None:
            plan.close_pull = True
            plan.pull_edits = {"body": closing}
        return plan

    desired = {path: new for path, (_, new) in plan.changes.items()}
    desired = {path: desired.get(path, text) for path, text in state.base_files.items()} | desired
    same_files = tip is not None and dict(tip.blobs) == {p: git_blob_sha(t) for p, t in desired.items()}
    # No open PR uses the branch, and its tip is a commit a maintainer rejected (its PR closed unmerged) or
    # holds other changes: a new PR starts from the base, never on top of the rejected commit (which would
    # then need a second commit undoing it). A tip that already holds exactly these changes (a run stopped
    # after its push) is kept.
    abandoned = pull is None and tip is not None and tip.sha != state.base_sha and (
        tip.sha in state.closed_heads or not same_files)  # fmt: skip
    plan.rebuild = (rebuild and tip is not None and tip.sha != state.base_sha) or abandoned
    if recreate or plan.rebuild or not same_files:
        if tip is None or recreate or plan.rebuild or tip.sha == state.base_sha:
            plan.parents = (state.base_sha,)
        elif tip.recorded_base == state.base_sha:
            plan.parents = (tip.sha,)
        else:  # the base moved: a merge keeps the PR's diff to exactly its changes
            plan.parents = (tip.sha, state.base_sha)
        plan.create_branch = tip is None
        plan.force = (recreate or plan.rebuild) and tip is not None
    if pull is None:
        plan.open_pull = True
        plan.labels = labels
        plan.reviewers = reviewers
    else:
        plan.pull_edits = {
            k: v for k, v in (("title", plan.title), ("body", plan.body)) if getattr(pull, k) != v
        }
        plan.ready_for_review = pull.draft and not plan.draft
        plan.labels = tuple(label for label in labels if label not in pull.labels)
    return plan


def _repo_path(config: BotConfig, name: str) -> str:
    return f"{config.registry.strip('/')}/{name}"


def wanted_paths(config: BotConfig, report: Mapping[str, Any]) -> set[str]:
    """The files a PR may change: ledger and verification files, and the removable workarounds' sources."""
    names = [*LIST_FILES.values(), VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE]
    sources = {row["source"] for row in workaround_rows(report) if row["verdict"] == REMOVABLE and row.get("source")}
    return {_repo_path(config, name) for name in names} | sources


def proposed_sources(proposals: list[Proposal]) -> set[str]:
    return {p.source for p in proposals if p.is_workaround and p.source}



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
    against: str | None = None  # --local: the checkout the plan was computed against

    @property
    def diff(self) -> str:
        return unified_diff(self.plan.changes)


