"""The rolling bump PR of one package group (``exportbot/bump-<group>``): the pin move, the removals it
allows, the verification records at the new versions, and the regressions it would bring.

It is the shrink PR's machinery with other content: the same reads and writes (bot.github.shrink_session),
the same branch and PR planning (bot.github.shrink_plan.plan_branch: never over a human's commit, a merge of a
moved base, a fresh commit on the base for new content), the same removal edits (``removal_changes``: minimal
ledger diffs, workaround deletions, verification records dropped) and the same per-entry sections. What is its
own: the ``constraints.txt`` edit (only the versions change), the records of the entries re-run at the new
versions (merged into ``verified.toml``, so after the merge nothing is due for that move again), the body, and
the hidden block ``<!-- exportbot:bump {...} -->`` saying which versions the PR proposes:

* the open PR proposing the same versions means there is nothing new: the watch does not audit again and
  makes no write (idempotent);
* a newer release replaces the PR's content (the branch is rebuilt from the base: one PR per group);
* a PR closed unmerged by a human keeps its block, and those versions are not proposed again; a later
  release is.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github import Github

from bot.audit.bump import BumpDecision, Regression, moved_pins, pin_file_with, turned_down
from bot.audit.pins import PIN_FILE_NAME
from bot.audit.verdict import VERDICTS
from bot.audit.verification import VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE, Verification, merged_text
from bot.config import BotConfig
from bot.github.dashboard import with_bump_row
from bot.github.prwriter import Selection, _cell, proposal_section, select_proposals
from bot.github.shrink import local_state, plan_on_base
from bot.github.shrink_plan import (
    RepoState,
    ShrinkOutcome,
    ShrinkPlan,
    _repo_path,
    plan_branch,
    proposed_sources,
    removal_changes,
)
from bot.github.shrink_session import GitHubSession
from exporters.ledger import LIST_FILES, Ledger

BUMP_PR_MARKER = "<!-- exportbot:bump-pr -->"
_BUMP_BLOCK = re.compile(r"<!-- exportbot:bump (\{.*?\}) -->")


def bump_config(config: BotConfig, group: str) -> BotConfig:
    """The configuration the shrink machinery runs with for ``group``'s PR: its branch and labels."""
    return dataclasses.replace(config, branch=f"{config.bump_branch_prefix}{group}", labels=config.bump_labels)


# ── The hidden block: which versions a PR proposes ──
def bump_block(decision: BumpDecision) -> str:
    data = {"group": decision.group, "moves": {name: new for name, (_, new) in decision.moves.items()},
            "from": {name: old for name, (old, _) in decision.moves.items()}}  # fmt: skip
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    safe = text.replace("<", "\\u003c").replace(">", "\\u003e")  # no text can end the HTML comment
    return f"<!-- exportbot:bump {safe} -->"


def read_bump_block(body: str | None) -> tuple[str, dict[str, str]] | None:
    """(group, {package: proposed version}) of a bump PR's body; None when it holds no (valid) block."""
    found = _BUMP_BLOCK.search(body or "")
    if found is None:
        return None
    try:
        data = json.loads(found.group(1))
        return str(data["group"]), {str(k): str(v) for k, v in data["moves"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def rejected_bumps(state: RepoState) -> list[tuple[int, str, dict[str, str]]]:
    """(number, group, proposed versions) of every bump PR of the branch closed unmerged that still holds its
    block (a human's "no": exportbot removes the block when it closes a PR itself)."""
    return [(number, *found) for number, body in state.rejected if (found := read_bump_block(body)) is not None]


# ── What the PR says ──
def _regression_rows(regressions: Sequence[Regression]) -> list[str]:
    return [
        "| export | with the candidate: first error line | reproduce (in the candidate's environment) |",
        "| --- | --- | --- |",
        *(f"| `{r.export}` | {r.status}: {_cell(r.error)} | `{r.command or 'exportbot export ' + r.model}` |"
          for r in regressions),
    ]  # fmt: skip


def bump_body(decision: BumpDecision, plan: ShrinkPlan, checked: Sequence[str], runs: int) -> str:
    """The bump PR's description (deterministic for the same decision, evidence and ``checked`` lines)."""
    lines = [
        BUMP_PR_MARKER,
        f"exportbot found {'a newer release' if len(decision.moves) == 1 else 'newer releases'} on the package "
        "index and audited it as a candidate: every ledger entry and registered workaround whose stack has the "
        "moved packages was re-run there, and a sample of exports that pass at the pins.",
        "",
        "| package | pinned | proposed |",
        "| --- | --- | --- |",
        *(f"| `{name}` | {old} | {new} |" for name, (old, new) in decision.moves.items()),
        "",
    ]
    if decision.regressions:
        count = len(decision.regressions)
        lines += [
            f"### Regressions ({count})",
            "",
            "> [!WARNING]",
            f"> {count} export{'s' * (count != 1)} that pass at the pins fail with this release. This PR stays a "
            "draft, and no removal is proposed on a regressed stack"
            + (f" (withheld: {', '.join(f'`{i}`' for i in decision.withheld)})" if decision.withheld else "") + ".",
            "",
            *_regression_rows(decision.regressions),
            "",
        ]
    proposals = plan.selection.proposals
    lines += [f"### Removals this release allows ({len(proposals)})", ""]
    if not proposals:
        lines += ["None: " + ("withheld while the release regresses." if decision.withheld else
                              "nothing the moved packages touch passed without its workaround."), ""]  # fmt: skip
    for proposal in proposals:
        lines += proposal_section(proposal, runs, plan.by_hand)
    lines += ["### What was checked", "", *(f"- {line}" for line in checked), "", bump_block(decision), "", "---",
              f"Maintained by exportbot on `{plan.branch}`: a newer release replaces this PR's content. Closing it "
              "unmerged stops exportbot from proposing these versions again; a later release is proposed."]  # fmt: skip
    return "\n".join(lines) + "\n"


def checked_lines(report: Mapping[str, Any], build_seconds: float, audit_seconds: float, reruns: int) -> list[str]:
    """What the candidate audit did, for the PR's "What was checked" (no timestamps: the same audit, the same
    lines). Seconds are rounded to 10 s so two runs of the same audit read the same."""
    rows = [*report.get("entries", ()), *(report.get("workarounds") or ())]
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICTS}
    verdicts = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "none"
    check = report.get("candidate_check") or {}
    results: dict[str, int] = {}
    for row in check.get("sample", ()):
        results[row["result"]] = results.get(row["result"], 0) + 1
    sample = ", ".join(f"{n} {r}" for r, n in sorted(results.items())) or "none"
    return [
        f"entries and workarounds re-run at the candidate: {len(rows)} ({verdicts}), {report.get('runs')} run(s) each",
        f"regression sample: {len(check.get('sample', ()))} exports ({sample}); left out: {len(check.get('left_out', ()))}",
        f"environment: {check.get('environment') or 'not built'}; {reruns} export processes; about "
        f"{round(build_seconds, -1):g} s to build, {round(audit_seconds, -1):g} s to audit",
    ]


# ── The plan ──
def plan_bump(
    decision: BumpDecision, report: Mapping[str, Any], state: RepoState, ledger: Ledger, base_dir: Path,
    config: BotConfig, records: Sequence[Verification], checked: Sequence[str], *, recreate: bool = False,
) -> ShrinkPlan:  # fmt: skip
    """Every write that brings ``config``'s bump branch and PR (bump_config) to ``decision``. ``records``: the
    verification records of the entries re-run at the new versions; ``checked``: the "What was checked" lines."""
    at_new = dict(report) | {"pins": moved_pins(report["pins"], decision.moves)}
    removals = set(decision.removals)
    rows = {kind: [row for row in report.get(kind) or () if row["id"] in removals] for kind in ("entries", "workarounds")}
    selection = select_proposals(at_new | rows, ledger, (), (), config.runs, base_sources=state.base_files)
    selection, changes, by_hand = removal_changes(selection, state, base_dir, config)
    pin_path = PIN_FILE_NAME
    if pin_path in state.base_files:
        base_pins = state.base_files[pin_path]
        changes[pin_path] = (base_pins, pin_file_with(base_pins, decision.moves))
    verified = _repo_path(config, VERIFIED_FILE)
    removed = {p.id for p in selection.proposals}
    kept = [r for r in records if r.entry_id not in removed]
    if kept and (verified in state.base_files or verified in changes):
        before, after = changes.get(verified, (state.base_files.get(verified, ""), state.base_files.get(verified, "")))
        changes[verified] = (before, merged_text(after, kept))
    plan = ShrinkPlan(
        selection, {p: c for p, c in changes.items() if c[0] != c[1]}, decision.title, "", draft=decision.draft,
        branch=config.branch, base_branch=config.base_branch, base_sha=state.base_sha,
        pull_number=state.open_pull.number if state.open_pull else None, by_hand=by_hand,
        summary=(f"Moves: {decision.describe_moves()}", f"Removes: {', '.join(sorted(removed)) or 'nothing'}"),
    )  # fmt: skip
    plan.body = bump_body(decision, plan, checked, config.runs)
    open_block = read_bump_block(state.open_pull.body) if state.open_pull else None
    replaced = open_block is not None and open_block != (decision.group, {n: v for n, (_, v) in decision.moves.items()})
    return plan_branch(plan, state, config.labels, config.reviewers, closing=None, rebuild=replaced, recreate=recreate)


def plan_bump_closed(state: RepoState, config: BotConfig, reason: str) -> ShrinkPlan:
    """Close the group's open bump PR (its versions are no longer newer than the pins, or no longer offered),
    with a body without the block: a PR exportbot closed is no human's "no"."""
    plan = ShrinkPlan(Selection(()), {}, state.open_pull.title if state.open_pull else "", "", draft=False,
                      branch=config.branch, base_branch=config.base_branch, base_sha=state.base_sha,
                      pull_number=state.open_pull.number if state.open_pull else None)  # fmt: skip
    closing = f"{BUMP_PR_MARKER}\nexportbot closed this PR: {reason}\n"
    return plan_branch(plan, state, config.labels, config.reviewers, closing=closing, rebuild=False, recreate=False)


# ── The run ──
@dataclass
class BumpRun:
    """One group's PR step: what the repository held before the audit, then what was planned and done."""

    config: BotConfig  # bump_config: the group's branch and labels
    state: RepoState
    session: GitHubSession | None = None  # None: planned against the local checkout (--local)
    outcome: ShrinkOutcome | None = None

    @property
    def open_moves(self) -> dict[str, str] | None:
        """The versions the group's open bump PR proposes (None: no open PR of ours)."""
        found = read_bump_block(self.state.open_pull.body) if self.state.open_pull else None
        return found[1] if found else None

    def skip_reason(self, decision_moves: Mapping[str, tuple[str, str]], group: str) -> str | None:
        """Why this candidate needs no audit and no write: the open PR proposes it, or a human turned it down."""
        wanted = {name: new for name, (_, new) in decision_moves.items()}
        if self.open_moves == wanted and self.state.open_pull is not None:
            return f"#{self.state.open_pull.number} already proposes these versions: nothing new"
        refused = turned_down(rejected_bumps(self.state), group, decision_moves)
        if refused is not None:
            return f"#{refused} proposing these versions was closed unmerged: not proposed again (a later release is)"
        return None


def read_bump(config: BotConfig, group: str, github: Github | None, root: Path,
              sleep: Callable[[float], None] = time.sleep) -> BumpRun:  # fmt: skip
    """The group's branch, open PR and rejected PRs (GET only), or the local checkout's files (``github`` None)."""
    settings = bump_config(config, group)
    paths = {_repo_path(settings, name) for name in (*LIST_FILES.values(), VERIFIED_FILE, WORKAROUNDS_VERIFIED_FILE)}
    paths.add(PIN_FILE_NAME)
    if github is None:
        return BumpRun(settings, local_state(root, paths))
    session = GitHubSession(github, settings, sleep)
    return BumpRun(settings, session.read_state(paths, proposed_sources), session)


def propose_bump(
    run: BumpRun, decision: BumpDecision, report: Mapping[str, Any], records: Sequence[Verification],
    checked: Sequence[str], apply: bool,
) -> ShrinkOutcome:  # fmt: skip
    """Plan the group's PR from the candidate audit (re-reading the repository first: the audit took minutes)
    and, with ``apply``, make the writes; then the dashboard's row for the group, when there is a dashboard."""
    config = run.config
    if run.session is not None:
        sources = {row["source"] for row in report.get("workarounds") or () if row["id"] in decision.removals
                   and row.get("source")}  # fmt: skip
        run.state = run.session.read_state({*run.state.base_files, *sources}, proposed_sources)

    def planner(scoped: Mapping[str, Any], state: RepoState, ledger: Ledger, base_dir: Path) -> ShrinkPlan:
        return plan_bump(decision, scoped, state, ledger, base_dir, config, records, checked)

    plan, *_ = plan_on_base(report, run.state, config, planner)
    outcome = ShrinkOutcome(plan, apply and run.session is not None, done=run.session.done if run.session else [])
    if run.session is None:
        outcome.against = f"the local checkout at {run.state.base_sha[:12]}"
        return outcome
    if apply:
        run.session.apply(plan, outcome)
    elif run.state.open_pull is not None:
        outcome.pr_url = run.state.open_pull.url
    if config.dashboard and run.state.dashboard_body is not None:
        state = "draft" if plan.draft else "open"
        line = (f"`{decision.group}`: {decision.describe_moves()}: {state} {outcome.pr_url or '(dry run)'}"
                + (f", {len(decision.regressions)} regression(s): " + "; ".join(r.export for r in decision.regressions)
                   if decision.regressions else f", {len(plan.selection.proposals)} removal(s)"))  # fmt: skip
        body = with_bump_row(run.state.dashboard_body, decision.group, line)
        outcome.dashboard_step = run.session.dashboard(body, apply)
    return outcome
