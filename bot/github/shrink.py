"""The run of ``exportbot pr``: keep ONE rolling pull request that removes the ledger entries an audit found removable.

The repository is the database (no state file, no cache): the base branch's ledger, the head branch
``exportbot/shrink``, the open PR's body (one hidden block per proposed entry), the bodies of PRs
closed unmerged and the dashboard's hidden row block are everything a run reads, so the scheduled job
and a developer's dry run compute the same plan. Each run:

1. checks the report field by field and refuses one audited in another repository (bot.audit.report; exit 2,
   before any request);
2. reads that state (GET requests only, bot.github.shrink_session: a failed read stops the run, it is never
   taken for a missing file), then plans without I/O (bot.github.prwriter): which entries, the edited ledger
   and verification files (computed from the *base* branch's files), title, body, draft;
3. in a dry run (the default outside CI) prints the plan, the unified diff and the body, and stops;
   ``--local`` (or a dry run with no repository configured) plans against the local checkout instead,
   with no network and no token;
4. with ``--apply`` (or ``CI=true`` and a token) writes only what differs, serially: a commit on the
   branch (git data API; parent = the branch tip, plus the base tip when the base moved, so the PR diff
   stays exactly the removals; rebuilt from the base when an entry the PR proposed drops out, so the diff
   and the commit message hold exactly the remaining removals), the PR, ready for review once its
   evidence is complete, its labels; reviewers when the PR is opened; the dashboard.

Why it is safe to run again after any failure: every step compares with what the repository already
holds, so a run that stopped after pushing the branch (PR creation failed, rate limit) is completed by
the next one, without a second PR or a second commit. A branch whose tip is a commit the bot did not
make (no ``Exportbot-Commit: true`` trailer) is never pushed to again; the PR gets one comment per such
commit instead, and ``--recreate`` hands the branch back.

The command (``exportbot pr``: options, dry run, printing) is ``bot.cli.pr``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from github import Github

from bot.audit.report import check_report, check_repository, head_commit, scope_to_ledger
from bot.audit.verification import VERIFIED_FILE, load_verification
from bot.config import BotConfig
from bot.github.dashboard import TrackingView, dashboard_body, ticked_links
from bot.github.links import UpstreamInputs
from bot.github.shrink_plan import (
    ShrinkOutcome,
    ShrinkPlan,
    _repo_path,
    plan_shrink,
    proposed_sources,
    wanted_paths,
)
from bot.github.shrink_session import MAX_WAIT, GitHubSession, RepoState, ShrinkStopped
from exporters.ledger import LIST_FILES, Ledger, LedgerError, load_ledger

NO_COMMIT = "0" * 40  # --local outside a git checkout: the base has no commit to name


# ── The run ──
Planner = Callable[[Mapping[str, Any], RepoState, Ledger, Path], ShrinkPlan]


def plan_on_base(
    report: Mapping[str, Any], state: RepoState, config: BotConfig, planner: Planner
) -> tuple[ShrinkPlan, Ledger, dict, Mapping[str, Any], str | None]:
    """``planner(report, state, base ledger, base registry dir)`` against the base files of ``state`` (written to
    a scratch registry for the ledger code; the shrink PR's planner and a bump PR's), with the report scoped to
    the entries the base's ledger lists as the audit saw them (bot.audit.report.scope_to_ledger: a report of
    another ledger is refused before any write). Also returns the scoped report and the warning."""
    with tempfile.TemporaryDirectory(prefix="exportbot-base-") as scratch:
        base_dir = Path(scratch)
        for name in [*LIST_FILES.values(), VERIFIED_FILE]:
            text = state.base_files.get(_repo_path(config, name))
            if text is not None or name in LIST_FILES.values():
                (base_dir / name).write_bytes((text or "").encode("utf-8"))  # bytes: CRLF files stay CRLF
        try:
            ledger = load_ledger(base_dir)
        except LedgerError as error:
            raise ShrinkStopped(
                f"read the ledger of {config.base_branch}", str(error).splitlines()[0], [], rerun=False,
                advice=f"a rerun will not complete it: fix the ledger on {config.base_branch} first",
            ) from None  # fmt: skip
        texts = {name: text.encode("utf-8") if (text := state.base_files.get(_repo_path(config, name))) is not None
                 else None for name in LIST_FILES.values()}  # fmt: skip
        report, warning = scope_to_ledger(report, texts, ledger.entries, config.base_branch)
        verification = load_verification(base_dir)
        return planner(report, state, ledger, base_dir), ledger, verification, report, warning


def _shrink_planner(config: BotConfig, recreate: bool, checks: tuple = (), upstream: UpstreamInputs | None = None
                    ) -> Planner:  # fmt: skip
    paths = {i: t.path for i, t in upstream.targets.items()} if upstream is not None else {}
    return lambda report, state, ledger, base_dir: plan_shrink(report, state, ledger, base_dir, config,
                                                               recreate=recreate, links=checks, link_paths=paths)  # fmt: skip


def _dashboard(outcome: ShrinkOutcome, report: Mapping[str, Any], ledger: Ledger, verification: dict,
               previous: str | None, config: BotConfig, upstream: UpstreamInputs | None) -> str:  # fmt: skip
    """The dashboard body; its upstream section only when the run knows the checkout's items (``upstream``),
    else that section stays as it stands."""
    plan = outcome.plan
    links = {p.id: outcome.pr_url or "(dry run: not opened)" for p in plan.selection.proposals}
    links |= {i: f"#{n} closed unmerged" for i, n in plan.selection.turned_down.items()}
    tracking = None if upstream is None else TrackingView(upstream.rows, config.repository, config.base_branch,
                                                          plan.links)  # fmt: skip
    return dashboard_body(report, ledger, verification, links, plan.by_hand, previous, tracking)


def open_or_update_pr(
    report: Mapping[str, Any], config: BotConfig, github: Github, apply: bool, *, recreate: bool = False,
    sleep: Callable[[float], None] = time.sleep, max_wait: float = MAX_WAIT, upstream: UpstreamInputs | None = None,
) -> ShrinkOutcome:  # fmt: skip
    """Bring the rolling PR (and the dashboard, when configured) in line with ``report``.

    ``report`` is an audit report as JSON data (``AuditReport.as_dict()`` or a saved ``--json`` file).
    With ``apply=False`` only GET requests are made. Raises :class:`ReportError` for an unusable or
    foreign report (before any request) and :class:`ShrinkStopped` when a step cannot be done.
    ``upstream``: the checkout's items (where a link is written, the dashboard's upstream rows); with it, each
    link ticked on the dashboard is checked against GitHub and, when accepted, proposed in the PR.
    """
    report = check_report(report)
    check_repository(report, config.repository)
    session = GitHubSession(github, config, sleep, max_wait)
    linked = upstream.paths_to_link if upstream is not None else (lambda body: ())
    state = session.read_state(wanted_paths(config, report), proposed_sources, linked)
    checks = session.check_links(ticked_links(state.dashboard_body), upstream.targets) if upstream else ()
    planner = _shrink_planner(config, recreate, checks, upstream)
    plan, ledger, verification, report, warning = plan_on_base(report, state, config, planner)
    outcome = ShrinkOutcome(plan, apply, done=session.done, warnings=[warning] if warning else [])
    if apply:
        session.apply(plan, outcome)
    elif state.open_pull is not None and not plan.close_pull:
        outcome.pr_url = state.open_pull.url
    if config.dashboard:
        outcome.dashboard = _dashboard(outcome, report, ledger, verification, state.dashboard_body, config, upstream)
        outcome.dashboard_step = session.dashboard(outcome.dashboard, apply)
    return outcome


def local_state(root: Path, paths: Collection[str]) -> RepoState:
    """The repository state of a checkout that has no PR yet: its files as the base, ``HEAD`` as base."""
    files = {p: (root / p).read_bytes().decode("utf-8") for p in sorted(paths) if (root / p).is_file()}
    return RepoState(head_commit(root) or NO_COMMIT, files, None, None, ())


def plan_locally(report: Mapping[str, Any], config: BotConfig, root: Path,
                 upstream: UpstreamInputs | None = None) -> ShrinkOutcome:  # fmt: skip
    """``exportbot pr --local``: the diff and the PR body against the checkout at ``root``; no network (no link is
    asked for there: the dashboard's upstream section shows the rows with no tick)."""
    report = check_report(report)
    check_repository(report, config.repository)
    state = local_state(root, wanted_paths(config, report))
    plan, ledger, verification, report, warning = plan_on_base(report, state, config, _shrink_planner(config, False))
    outcome = ShrinkOutcome(plan, applied=False, against=f"{root} at {state.base_sha[:12]}",
                            warnings=[warning] if warning else [])
    if config.dashboard:
        outcome.dashboard = _dashboard(outcome, report, ledger, verification, None, config, upstream)
    return outcome


