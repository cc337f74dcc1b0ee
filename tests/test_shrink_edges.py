"""exportbot pr at the edges a maintainer meets: partial and foreign reports, read faults, races, stops.

Every scenario goes through the real PyGithub client over HTTP to tests/fake_github.py, from recorded
reports (no exports). After every faulty run, five consecutive runs must end in one open PR, one
dashboard, and no write at all on the last run (:func:`settle`).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, Fault, fake_github_fixture  # noqa: F401 (the fake_github fixture)
from github import InputGitTreeElement
from test_shrink import (  # noqa: F401 (server_fixture and no_throttle are fixtures)
    BART_BLOCK,
    BRANCH,
    OPTIMIZE,
    OPTIMIZE_TEXT,
    PINS,
    REPO,
    SKIPS,
    SKIPS_TEXT,
    T5_BLOCK,
    TOKEN,
    client,
    invoke,
    no_throttle,
    only,
    only_removed,
    pulls,
    report,
    run,
    server_fixture,
    writes,
)

from bot.audit.report import (
    REPORT_SCHEMA,
    ReportError,
    audit_selection,
    check_report,
    local_registry_digest,
    registry_digest,
    report_identity,
)
from bot.cli.pr import make_github, pr_command
from bot.config import BotConfig
from bot.github import shrink
from bot.github.dashboard import DASHBOARD_MARKER
from bot.github.prwriter import parse_pr_body, read_trailers
from bot.github.shrink_session import READ_TRIES, ShrinkStopped
from bot.run.audit_run import AuditReport

DASH = BotConfig(repository=REPO, dashboard=True)
ENTRY_IDS = ("t5-cast-folding", "bart-gather-fold", "led-global-attention")
FIRST = report({"t5-cast-folding": "removable"})
GROWN = report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"})
VERIFIED = "registry/verified.toml"
VERIFIED_TEXT = "# Written by `exportbot audit --update-verification`.\n" + "".join(
    f'\n[{entry}]\nverified_on = 2026-11-29\nverdict = "still-needed"\n\n[{entry}.versions]\ntorch = "2.13.0"\n'
    for entry in ("t5-cast-folding", "bart-gather-fold", "led-global-attention")
)


def dashboards(server: FakeGitHub) -> list[Any]:
    """Every issue (not PR) carrying the dashboard's hidden marker."""
    issues = client(server).get_repo(REPO).get_issues(state="all")
    return [i for i in issues if DASHBOARD_MARKER in (i.body or "") and "/pull/" not in i.html_url]


def proposed(server: FakeGitHub) -> list[str]:
    [pull] = pulls(server, "open")
    return [p.id for p in parse_pr_body(pull.body)]


def settle(server: FakeGitHub, data: dict[str, Any], config: BotConfig = DASH) -> None:
    """Five consecutive runs: one open PR, one dashboard (when configured), no write on the last."""
    for _ in range(5):
        before = writes(server)
        outcome = run(server, data, config)
    assert writes(server) == before and outcome.done == [], outcome.done
    assert len(pulls(server, "open")) == 1
    assert len(dashboards(server)) == (1 if config.dashboard else 0)


def started(server: FakeGitHub) -> None:
    """A PR proposing t5 and a dashboard whose label a maintainer removed (so it is found by search)."""
    run(server, FIRST, DASH)
    [dashboard] = dashboards(server)
    client(server).get_repo(REPO).get_issue(dashboard.number).remove_from_labels("exportbot")


def push_on_main(server: FakeGitHub, path: str, text: str, message: str = "Edit on main") -> None:
    repo = client(server).get_repo(REPO)
    repo.update_file(path, message, text, repo.get_contents(path, ref="main").sha, branch="main")


# ── 1. Report identity ──
def git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def checkout(tmp_path: Path, repository: str | None = REPO) -> Path:
    """A git checkout with the test ledger (and a verified.toml) committed."""
    root = tmp_path / "checkout"
    (root / "registry").mkdir(parents=True)
    (root / OPTIMIZE).write_text(OPTIMIZE_TEXT)
    (root / SKIPS).write_text(SKIPS_TEXT)
    (root / VERIFIED).write_text(VERIFIED_TEXT)
    (root / "pyproject.toml").write_text(f'[tool.exportbot]\nrepository = "{repository}"\n' if repository else "")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "ledger")
    return root


def test_audit_report_records_repository_commit_digest_and_selection(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    root = checkout(tmp_path)
    selection = audit_selection([], ["t5-cast-folding"], None)
    identity = report_identity(root / "registry", selection)
    assert identity.repository == REPO and identity.base_commit == git(root, "rev-parse", "HEAD")
    texts = {"onnx_disable_optimize.toml": OPTIMIZE_TEXT.encode(), "export_skips.toml": SKIPS_TEXT.encode()}
    assert identity.registry_digest == registry_digest(texts) == local_registry_digest(root / "registry")
    assert selection == {"entries": "complete", "workarounds": []}
    data = AuditReport([], {"torch": "2.13.0"}, "aee41f0ad3ec", 2, identity=identity).as_dict()
    assert data["schema"] == REPORT_SCHEMA == 2 and check_report(data) is data
    assert {k: data[k] for k in ("repository", "base_commit", "selection")} == {
        "repository": REPO, "base_commit": identity.base_commit, "selection": selection}  # fmt: skip

    (root / "pyproject.toml").write_text("")  # no [tool.exportbot]: the origin remote names the repository
    git(root, "remote", "add", "origin", "git@github.com:other/fork.git")
    assert report_identity(root / "registry", selection).repository == "other/fork"
    assert audit_selection(["t5", "_fix"], ["t5", "bart"], ["_fix", "_other"]) == {
        "entries": ["t5"], "workarounds": ["_fix"]}  # fmt: skip
    assert audit_selection([], ["t5"], ["_fix"]) == {"entries": "complete", "workarounds": "complete"}


def test_report_from_another_repository_is_refused_before_any_request(server: FakeGitHub, tmp_path: Path) -> None:
    foreign = report({"t5-cast-folding": "removable"}) | {"repository": "someone/else"}
    result = invoke(server, tmp_path, foreign, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "audited in someone/else, not acme/exportbot" in result.output
    unnamed = invoke(server, tmp_path, FIRST | {"repository": None}, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert unnamed.exit_code == 2 and "names no repository" in unnamed.output
    assert server.requests == []


def test_partial_report_updates_only_its_own_rows_of_the_dashboard_and_the_pr(server: FakeGitHub) -> None:
    complete = report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed",
                       "led-global-attention": "changed"})  # fmt: skip
    run(server, complete, DASH)
    [dashboard] = dashboards(server)
    before = dashboard.body or ""
    assert before.count("| `") == 3 and "`bart-gather-fold`: closed upstream, still failing" in before
    assert "`led-global-attention`: changed" in before

    one = only(report({"led-global-attention": "still-needed"}), "led-global-attention")
    run(server, one, DASH)
    after = client(server).get_repo(REPO).get_issue(dashboard.number).body or ""
    assert after.count("| `") == 3  # not cut to 1 row
    assert "`bart-gather-fold`: closed upstream, still failing" in after  # its "needs a human" line stays
    assert "`led-global-attention`: changed" not in after and "Rows of `led-global-attention`" in after
    keep = [line for line in before.splitlines() if line.startswith(("| `t5", "| `bart"))]
    assert keep and all(line in after for line in keep)  # the other rows are byte-for-byte the same
    assert proposed(server) == ["t5-cast-folding"]

    # A partial report that finds another entry removable adds it; it never removes t5.
    run(server, only(report({"bart-gather-fold": "removable"}), "bart-gather-fold"), DASH)
    assert proposed(server) == ["t5-cast-folding", "bart-gather-fold"]
    settle(server, only(report({"bart-gather-fold": "removable"}), "bart-gather-fold"))


def test_a_report_of_another_ledger_is_refused_before_any_write_and_the_dashboard_keeps_its_rows(
    server: FakeGitHub, tmp_path: Path
) -> None:
    """A report that names this repository but was audited over another ledger (here: an empty one) used to
    replace the dashboard's rows with its own (31 → 0 in the emulator). It shares no entry with the base's
    ledger: exit 2, one line, no write."""
    run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed"}), DASH)
    [dashboard] = dashboards(server)
    before, written = dashboard.body or "", writes(server)
    elsewhere = FIRST | {"entries": [], "registry_digest": registry_digest({})}
    (tmp_path / "pyproject.toml").write_text(f'[tool.exportbot]\nrepository = "{REPO}"\ndashboard = true\n')
    result = invoke(server, tmp_path, elsewhere, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "audited over another ledger" in result.output and "shares none of its entries" in result.output
    assert writes(server) == written
    assert (client(server).get_repo(REPO).get_issue(dashboard.number).body or "") == before
    assert before.count("| `") == 3


def test_a_report_of_a_ledger_the_base_has_moved_past_speaks_only_for_the_entries_both_list(
    server: FakeGitHub,
) -> None:
    """The base gained an entry since the audit: the report covers the three it saw (said in a warning), and the
    new entry is not reported on as if the audit had looked at it."""
    added = SKIPS_TEXT + "\n" + SKIPS_TEXT.split("\n\n", 1)[1].replace("led-global-attention", "gpt-skip").replace(
        "LEDForConditionalGeneration", "GPT2LMHeadModel")  # fmt: skip
    push_on_main(server, SKIPS, added)
    outcome = run(server, report({"t5-cast-folding": "removable"}), DASH)
    assert outcome.warnings == [
        f"the report was audited over another ledger (registry digest {report({})['registry_digest'][:12]}) than main "
        f"holds ({registry_digest({'onnx_disable_optimize.toml': OPTIMIZE_TEXT.encode(), 'export_skips.toml': added.encode()})[:12]}): "
        "it speaks for the 3 entries both list the same way; the other 1 of main's entries keep their rows"
    ]
    assert proposed(server) == ["t5-cast-folding"]
    [dashboard] = dashboards(server)
    body = dashboard.body or ""
    assert "| `gpt-skip`" not in body and body.count("| `") == 3


def test_each_write_is_printed_once(server: FakeGitHub, tmp_path: Path) -> None:
    """"updated dashboard #N" used to be printed twice in one run: as a step and as the dashboard's line."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.exportbot]\nrepository = "{REPO}"\ndashboard = true\n')
    first = invoke(server, tmp_path, FIRST, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert first.exit_code == 0 and first.output.count("created dashboard #") == 1, first.output
    second = invoke(server, tmp_path, GROWN, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert second.exit_code == 0 and second.output.count("updated dashboard #") == 1, second.output
    third = invoke(server, tmp_path, GROWN, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert third.output.count("is up to date") == 1, third.output


def test_rate_limited_rows_keep_their_earlier_dashboard_row(server: FakeGitHub) -> None:
    run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed"}), DASH)
    [dashboard] = dashboards(server)
    limited = report({"t5-cast-folding": "removable", "bart-gather-fold": "unknown"}) | {"partial": True}
    limited["entries"][1]["evidence"] = []
    run(server, limited, DASH)
    body = client(server).get_repo(REPO).get_issue(dashboard.number).body or ""
    bart = next(line for line in body.splitlines() if line.startswith("| `bart"))
    assert "still-needed" in bart and "(partial: rate limited)" in body


# ── 2. Reads are not absence ──
READS = {
    "contents": f"/repos/{REPO}/contents/*",
    "trees": f"/repos/{REPO}/git/trees/*",
    "refs": f"/repos/{REPO}/git/ref/*",
    "commits": f"/repos/{REPO}/git/commits/*",
    "pull list": f"/repos/{REPO}/pulls",
    "issue list": f"/repos/{REPO}/issues",
    "issue search": "/search/issues",
}
FAULTS = {"404": Fault.error(404), "502": Fault.error(502), "malformed JSON": Fault.malformed()}


@pytest.mark.parametrize("times", [1, READ_TRIES], ids=["transient", "persistent"])
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("where", READS)
def test_a_failed_read_never_shrinks_pushes_or_duplicates(server: FakeGitHub, where: str, fault: str, times: int) -> None:
    started(server)
    sha, before = server.branch_sha(REPO, BRANCH), writes(server)
    status = FAULTS[fault].status
    met = server.count(READS[where], method="GET", status=status)
    server.inject(READS[where], FAULTS[fault], times=times, method="GET")
    if times < READ_TRIES:  # retried within the run: the run does its work
        run(server, GROWN, DASH)
        assert proposed(server) == ["t5-cast-folding", "bart-gather-fold"]
    else:
        with pytest.raises(ShrinkStopped) as stopped:
            run(server, GROWN, DASH)
        assert (writes(server), server.branch_sha(REPO, BRANCH)) == (before, sha)
        assert proposed(server) == ["t5-cast-folding"]  # neither shrunk nor half-grown
        line = stopped.value.explain()
        assert f"the read failed {READ_TRIES} times" in line and "already written: nothing" in line
        assert "a rerun completes it" in line
    assert status is None or server.count(READS[where], method="GET", status=status) - met == times  # each try met it
    settle(server, GROWN)


def test_a_persistent_404_on_a_listed_ledger_file_stops_instead_of_dropping_its_entries(server: FakeGitHub) -> None:
    run(server, GROWN)
    sha, before = server.branch_sha(REPO, BRANCH), writes(server)
    server.inject(f"/repos/{REPO}/contents/{OPTIMIZE}", Fault.error(404), times=None)
    for _ in range(2):
        with pytest.raises(ShrinkStopped, match=f"read {OPTIMIZE}"):
            run(server, GROWN)
    assert (writes(server), server.branch_sha(REPO, BRANCH)) == (before, sha)
    assert proposed(server) == ["t5-cast-folding", "bart-gather-fold"]


def test_one_tree_read_per_commit_and_no_commit_when_the_tip_tree_cannot_be_read(server: FakeGitHub) -> None:
    run(server, FIRST)
    trees = server.count(f"/repos/{REPO}/git/trees/*", method="GET")
    run(server, FIRST)
    assert server.count(f"/repos/{REPO}/git/trees/*", method="GET") - trees == 2  # base and branch tip
    assert server.count(f"/repos/{REPO}/contents", method="GET") == 0  # no folder listings

    tip = client(server).get_repo(REPO).get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    server.inject(f"/repos/{REPO}/git/trees/{tip.tree.sha}", Fault.error(404), times=None)
    before = writes(server)
    with pytest.raises(ShrinkStopped, match=f"read the tree of {tip.sha[:12]}"):
        run(server, GROWN)
    assert writes(server) == before


def test_a_commit_whose_tree_equals_its_parents_is_never_pushed(server: FakeGitHub, monkeypatch) -> None:
    run(server, FIRST)
    sha = server.branch_sha(REPO, BRANCH)
    plan_shrink = shrink.plan_shrink

    def always_commit(*args: Any, **kwargs: Any) -> shrink.ShrinkPlan:
        plan = plan_shrink(*args, **kwargs)
        plan.parents = (sha or "",)  # as if the tip's files had been misread
        return plan

    monkeypatch.setattr(shrink, "plan_shrink", always_commit)
    outcome = run(server, FIRST)
    assert server.branch_sha(REPO, BRANCH) == sha and server.count(f"/repos/{REPO}/git/commits", method="POST") == 1
    assert outcome.warnings == [f"no commit pushed: its tree would equal that of {(sha or '')[:12]}"]


# ── 3. Found by their hidden markers ──
def test_dashboard_and_pr_are_found_by_marker_after_labels_and_titles_change(server: FakeGitHub) -> None:
    run(server, FIRST, DASH)
    repo = client(server).get_repo(REPO)
    [dashboard] = dashboards(server)
    issue = repo.get_issue(dashboard.number)
    issue.edit(title="Our bot's board", labels=[])
    [pull] = pulls(server)
    repo.get_pull(pull.number).edit(title="Ledger clean-up (renamed by a maintainer)")
    repo.get_issue(pull.number).edit(labels=[])
    searches = server.count("/search/issues")
    run(server, GROWN, DASH)
    assert server.count("/search/issues") > searches
    assert [d.number for d in dashboards(server)] == [dashboard.number]
    assert server.labels_of(REPO, dashboard.number) == []  # the maintainer's choice stands
    assert [p.number for p in pulls(server)] == [pull.number] and proposed(server) == [
        "t5-cast-folding", "bart-gather-fold"]  # fmt: skip
    settle(server, GROWN)


def test_an_issue_with_the_dashboard_title_but_no_marker_is_not_the_dashboard(server: FakeGitHub) -> None:
    impostor = server.add_issue(REPO, "exportbot ledger dashboard", body="A human's notes.", labels=("exportbot",))
    run(server, FIRST, DASH)
    assert client(server).get_repo(REPO).get_issue(impostor).body == "A human's notes."
    assert len(dashboards(server)) == 1
    settle(server, FIRST)


# ── 4. Draft to ready for review ──
def test_draft_becomes_ready_for_review_once_the_evidence_is_complete(server: FakeGitHub) -> None:
    run(server, report({"bart-gather-fold": "removable"}, runs=1))
    [pull] = pulls(server)
    assert pull.draft and "Evidence is incomplete" in (pull.body or "")
    outcome = run(server, report({"bart-gather-fold": "removable"}))
    [pull] = pulls(server)
    assert not pull.draft and "Evidence is incomplete" not in (pull.body or "")
    assert outcome.done == [f"updated #{pull.number}", f"marked #{pull.number} ready for review"]
    assert server.count("/graphql", method="POST", status=200) == 1
    settle(server, report({"bart-gather-fold": "removable"}), CONFIG_NO_DASH)


CONFIG_NO_DASH = BotConfig(repository=REPO)


def test_a_refused_ready_for_review_names_the_step_and_the_permission(server: FakeGitHub) -> None:
    run(server, report({"bart-gather-fold": "removable"}, runs=1))
    server.inject("/graphql", Fault.error(403), method="POST")
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, report({"bart-gather-fold": "removable"}))
    line = stopped.value.explain()
    assert "stopped at step 'mark the pull request ready for review'" in line
    assert "already written: updated #1" in line and "lacks 'pull-requests: write'" in line
    assert "a rerun completes" not in line
    settle(server, report({"bart-gather-fold": "removable"}), CONFIG_NO_DASH)
    assert not pulls(server)[0].draft


# ── 5. Main drops a proposed entry ──
def test_main_dropping_a_proposed_entry_rebuilds_the_branch_with_exactly_the_rest(server: FakeGitHub) -> None:
    run(server, GROWN)
    push_on_main(server, OPTIMIZE, OPTIMIZE_TEXT.replace(BART_BLOCK, ""), "Remove bart by hand")
    outcome = run(server, GROWN)  # the same report: bart is no longer in main's ledger
    assert outcome.plan.rebuild and outcome.plan.selection.notes["bart-gather-fold"] == "not in the base branch's ledger"
    repo = client(server).get_repo(REPO)
    main, tip = server.branch_sha(REPO, "main"), repo.get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in tip.parents] == [main]
    assert tip.message.startswith("exportbot: remove 1 workaround ledger entry\n\nRemoves: t5-cast-folding\n")
    assert read_trailers(tip.message) == (True, main)
    # The tip's only parent is main, so the PR's diff is main → tip: exactly t5's block, nothing else.
    main_text = server.read_file(REPO, "main", OPTIMIZE) or ""
    assert only_removed(main_text, server.read_file(REPO, BRANCH, OPTIMIZE) or "", T5_BLOCK)
    assert server.read_file(REPO, BRANCH, SKIPS) == SKIPS_TEXT
    assert proposed(server) == ["t5-cast-folding"] and pulls(server)[0].title.endswith("1 workaround ledger entry")
    settle(server, GROWN, CONFIG_NO_DASH)


def test_an_entry_taken_out_rebuilds_instead_of_adding_a_commit_that_restores_it(server: FakeGitHub) -> None:
    run(server, GROWN)
    run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed"}))
    tip = client(server).get_repo(REPO).get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in tip.parents] == [server.branch_sha(REPO, "main")]
    assert only_removed(OPTIMIZE_TEXT, server.read_file(REPO, BRANCH, OPTIMIZE) or "", T5_BLOCK)


# ── 6. Every stop says where, what was written, and what a rerun does ──
def test_stops_name_the_step_what_was_written_and_whether_a_rerun_completes(server: FakeGitHub) -> None:
    server.inject(f"/repos/{REPO}/pulls", Fault.error(502), method="POST")
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    sha = server.branch_sha(REPO, BRANCH) or ""
    assert stopped.value.explain() == (
        "stopped at step 'open pull request': GitHub answered HTTP 502: Server Error; already written: pushed "
        f"{sha[:12]} to {BRANCH}; a rerun completes it (every step compares with what the repository already holds)"
    )
    server.inject(f"/repos/{REPO}/pulls", Fault.error(403, "Resource not accessible by integration"), method="POST")
    with pytest.raises(ShrinkStopped) as refused:
        run(server, FIRST)
    line = refused.value.explain()
    assert "GitHub answered HTTP 403: Resource not accessible by integration" in line
    assert "already written: nothing" in line and "a rerun will not complete it: the token lacks 'pull-requests: write'" in line
    server.inject(f"/repos/{REPO}", Fault.error(401, "Bad credentials"), method="GET")
    with pytest.raises(ShrinkStopped) as bad_token:
        run(server, FIRST)
    assert "the token was refused (invalid or expired)" in bad_token.value.explain()
    with pytest.raises(ShrinkStopped) as elsewhere:
        run(server, FIRST | {"repository": "acme/nowhere"}, BotConfig(repository="acme/nowhere"))
    assert "check --repo / [tool.exportbot] repository" in elsewhere.value.explain()
    settle(server, FIRST, CONFIG_NO_DASH)


def test_no_network_is_a_stop_that_points_to_local(tmp_path: Path) -> None:
    with pytest.raises(ShrinkStopped) as stopped:
        shrink.open_or_update_pr(FIRST, CONFIG_NO_DASH, make_github("http://127.0.0.1:9", None), False)
    line = stopped.value.explain()
    assert line.startswith(f"stopped at step 'read repository {REPO}': the read failed {READ_TRIES} times (ConnectionError")
    assert "once http://127.0.0.1:9 is reachable (--local plans against the checkout without a network)" in line


def test_cli_stop_is_one_line_without_a_traceback(server: FakeGitHub, tmp_path: Path) -> None:
    server.inject(f"/repos/{REPO}/git/trees/*", Fault.malformed(), times=None)
    result = invoke(server, tmp_path, FIRST, "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 1
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("stopped at step 'read the tree of ") and "malformed JSON" in line
    assert "JSONDecodeError" not in result.output and "Traceback" not in result.output and TOKEN not in result.output


def test_an_invalid_base_ledger_stops_before_any_write(server: FakeGitHub) -> None:
    push_on_main(server, SKIPS, SKIPS_TEXT.replace('scope = "all"', 'scope = "sometimes"'))
    before = writes(server)
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    line = stopped.value.explain()
    assert "stopped at step 'read the ledger of main'" in line and "fix the ledger on main first" in line
    assert writes(server) == before


# ── 7. The report is checked field by field before any request ──
def _set(path: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(FIRST))
    target: Any = data
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is KeyError:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return data


BAD_FIELDS = [
    ("entries.0.upstream_state", "closed", "entries[0] (t5-cast-folding).upstream_state: expected an object, got a string 'closed'"),
    ("entries.0.evidence.0.max_abs_diff", "2e-06", "entries[0] (t5-cast-folding).evidence[0].max_abs_diff: expected a finite number, got a string '2e-06'"),
    ("runs", "2", "report.runs: expected an integer of at least 1, got a string '2'"),
    ("entries.0.models", [], "entries[0] (t5-cast-folding).models: expected a non-empty array, got an array"),
    ("entries.0.verdict", "maybe", "entries[0] (t5-cast-folding).verdict: expected one of"),
    ("entries.1.evidence", {}, "entries[1] (bart-gather-fold).evidence: expected an array, got an object"),
    ("pins.torch", 2.13, "report.pins.torch: expected a string, got a number 2.13"),
    ("partial", "no", "report.partial: expected true or false, got a string 'no'"),
    ("selection", "complete", "report.selection: expected an object, got a string 'complete'"),
    ("registry_digest", KeyError, "report.registry_digest: missing"),
    ("base_commit", "HEAD", "report.base_commit: expected a 40-digit commit SHA, got a string 'HEAD'"),
    ("selection.entries", ["bart-gather-fold"], "entries[0] (t5-cast-folding).id: 't5-cast-folding' is not in the report's selection.entries"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "message"), BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_a_bad_field_is_exit_2_naming_it_before_any_request(server: FakeGitHub, tmp_path: Path, path: str,
                                                          value: Any, message: str) -> None:  # fmt: skip
    with pytest.raises(ReportError, match="^" + re.escape(message)):
        check_report(_set(path, value))
    result = invoke(server, tmp_path, _set(path, value), "--apply", env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1
    assert server.requests == []


# ── 8. --local: the exact diff and body against the checkout, no network ──
def test_local_plan_prints_diff_commit_and_body_without_network_or_token(tmp_path: Path, monkeypatch) -> None:
    root = checkout(tmp_path)
    monkeypatch.chdir(root)
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(FIRST))
    unreachable = "http://127.0.0.1:9"  # nothing listens there: any request would fail the run
    for args in (["--local"], ["--dry-run", "--config", str(root / "pyproject.toml")]):
        if args[0] == "--dry-run":
            (root / "pyproject.toml").write_text("")  # no repository anywhere: a dry run plans locally
        result = CliRunner().invoke(pr_command, ["--report", str(report_file), "--github-url", unreachable, *args],
                                    env={"GITHUB_TOKEN": "", "GH_TOKEN": "", "GITHUB_REPOSITORY": ""})  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"planned against the local checkout {root} at {git(root, 'rev-parse', 'HEAD')[:12]}" in result.output
        assert f"--- a/{OPTIMIZE}" in result.output and '-id = "t5-cast-folding"' in result.output
        assert f"--- a/{VERIFIED}" in result.output and "-[t5-cast-folding]" in result.output
        assert "--- commit message:\nexportbot: remove 1 workaround ledger entry" in result.output
        assert "--- PR body:" in result.output and "<!-- exportbot:entry {" in result.output
    assert (root / OPTIMIZE).read_text() == OPTIMIZE_TEXT  # the working tree is only read
    refused = CliRunner().invoke(pr_command, ["--report", str(report_file), "--local", "--apply"])
    assert refused.exit_code == 2 and "--local only plans" in refused.output


# ── 9. The shrink commit drops the removed entries' verification records ──
def test_shrink_commit_drops_removed_entries_from_verified_toml(server: FakeGitHub) -> None:
    repo = client(server).get_repo(REPO)
    repo.create_file(VERIFIED, "Record verifications", VERIFIED_TEXT, branch="main")
    run(server, GROWN)
    text = server.read_file(REPO, BRANCH, VERIFIED) or ""
    assert "[led-global-attention]" in text and "[t5-cast-folding]" not in text and "[bart-gather-fold]" not in text
    assert text.startswith("# Written by `exportbot audit --update-verification`.\n")
    assert server.read_file(REPO, "main", VERIFIED) == VERIFIED_TEXT
    settle(server, GROWN, CONFIG_NO_DASH)


# ── #21 item 6: the fake's 422/409 answers, met through races with another actor ──
def _main_sha(server: FakeGitHub) -> str:
    return server.branch_sha(REPO, "main") or ""


def test_422_pull_request_already_exists(server: FakeGitHub) -> None:
    server.before(f"/repos/{REPO}/pulls", lambda fake: fake.add_pull(REPO, "Opened by another run", head=BRANCH),
                  method="POST")  # fmt: skip
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    assert server.count(f"/repos/{REPO}/pulls", method="POST", status=422) == 1
    line = stopped.value.explain()
    assert "A pull request already exists" in line and "(another run opened the PR meanwhile)" in line
    assert "a rerun finds that PR and updates it" in line
    settle(server, FIRST, CONFIG_NO_DASH)
    assert proposed(server) == ["t5-cast-folding"] and len(pulls(server)) == 1


def test_422_no_commits_between(server: FakeGitHub) -> None:
    def reset(fake: FakeGitHub) -> None:
        client(fake).get_repo(REPO).get_git_ref(f"heads/{BRANCH}").edit(_main_sha(fake), force=True)

    server.before(f"/repos/{REPO}/pulls", reset, method="POST")
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    assert server.count(f"/repos/{REPO}/pulls", method="POST", status=422) == 1
    assert "No commits between main and exportbot/shrink" in str(stopped.value)
    assert "a rerun pushes the removals again" in stopped.value.explain()
    settle(server, FIRST, CONFIG_NO_DASH)


def test_422_head_invalid_when_the_branch_vanishes_before_the_pr_opens(server: FakeGitHub) -> None:
    server.before(f"/repos/{REPO}/pulls", lambda fake: client(fake).get_repo(REPO).get_git_ref(
        f"heads/{BRANCH}").delete(), method="POST")  # fmt: skip
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    assert server.count(f"/repos/{REPO}/pulls", method="POST", status=422) == 1
    line = stopped.value.explain()
    assert "stopped at step 'open pull request': GitHub answered HTTP 422: Validation Failed" in line
    assert f"already written: pushed {line.split('pushed ')[1][:12]} to {BRANCH}; a rerun completes it" in line
    settle(server, FIRST, CONFIG_NO_DASH)


def test_422_reference_already_exists(server: FakeGitHub) -> None:
    server.before(f"/repos/{REPO}/git/refs", lambda fake: client(fake).get_repo(REPO).create_git_ref(
        f"refs/heads/{BRANCH}", _main_sha(fake)), method="POST")  # fmt: skip
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, FIRST)
    assert server.count(f"/repos/{REPO}/git/refs", method="POST", status=422) == 1  # the race's create won
    assert "(the branch was created meanwhile)" in stopped.value.explain()
    assert pulls(server) == []
    settle(server, FIRST, CONFIG_NO_DASH)


def test_422_not_a_fast_forward_then_the_branch_is_left_alone(server: FakeGitHub) -> None:
    run(server, FIRST)

    def human_push(fake: FakeGitHub) -> None:
        repo = client(fake).get_repo(REPO)
        tip = repo.get_git_commit(fake.branch_sha(REPO, BRANCH) or "")
        blob = InputGitTreeElement("README.md", "100644", "blob", content="# by hand\n")
        human = repo.create_git_commit("Tweak", repo.create_git_tree([blob], tip.tree), [tip])
        repo.get_git_ref(f"heads/{BRANCH}").edit(human.sha)

    server.before(f"/repos/{REPO}/git/refs/heads/{BRANCH}", human_push, method="PATCH")
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, GROWN)
    assert server.count(f"/repos/{REPO}/git/refs/heads/{BRANCH}", method="PATCH", status=422) == 1
    assert "(someone pushed to the branch meanwhile)" in stopped.value.explain()
    settle(server, GROWN, CONFIG_NO_DASH)
    [pull] = pulls(server)
    assert len(server.comments_of(REPO, pull.number)) == 1 and proposed(server) == ["t5-cast-folding"]


def test_422_reference_does_not_exist_after_the_branch_was_deleted(server: FakeGitHub) -> None:
    run(server, FIRST)
    server.before(f"/repos/{REPO}/git/refs/heads/{BRANCH}", lambda fake: client(fake).get_repo(REPO).get_git_ref(
        f"heads/{BRANCH}").delete(), method="PATCH")  # fmt: skip
    with pytest.raises(ShrinkStopped) as stopped:
        run(server, GROWN)
    assert server.count(f"/repos/{REPO}/git/refs/heads/{BRANCH}", method="PATCH", status=422) == 1
    assert "(the branch was deleted meanwhile)" in stopped.value.explain()
    # GitHub closed the PR with its branch: a PR closed unmerged is a "no" for t5 until upstream or pins
    # move; bart, which it never proposed, gets a new PR.
    settle(server, GROWN, CONFIG_NO_DASH)
    assert run(server, GROWN).plan.selection.turned_down == {"t5-cast-folding": 1}
    assert proposed(server) == ["bart-gather-fold"] and len(pulls(server)) == 2


def test_409_empty_repository_is_not_something_a_rerun_fixes(fake_github: FakeGitHub) -> None:
    fake_github.add_repo(REPO, files={}, empty=True)
    with pytest.raises(ShrinkStopped) as stopped:
        run(fake_github, FIRST)
    assert fake_github.count(f"/repos/{REPO}/git/ref/heads/main", status=409) == 1  # not retried
    line = stopped.value.explain()
    assert "HTTP 409: Git Repository is empty." in line and "a rerun will not complete it: push a first commit" in line
    assert writes(fake_github) == 0


def test_audit_json_carries_the_identity_and_exportbot_pr_accepts_it(tmp_path: Path, monkeypatch) -> None:
    """A real `exportbot audit --json` run (offline tracker, nothing due, so nothing is exported)."""
    from bot.cli.audit import audit_command

    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    root = checkout(tmp_path)
    stacks = {"onnx": ["torch", "transformers", "onnx", "onnxscript", "onnxruntime"], "dynamo": ["torch", "transformers"]}
    records = ""
    for entry, backend in (("t5-cast-folding", "onnx"), ("bart-gather-fold", "onnx"), ("led-global-attention", "dynamo")):
        versions = "".join(f'{name} = "{PINS[name]}"\n' for name in stacks[backend])
        records += f'[{entry}]\nverified_on = 2026-11-29\nverdict = "still-needed"\nupstream_state = "open"\n' \
                   f'[{entry}.versions]\n{versions}\n'  # fmt: skip
    (root / VERIFIED).write_text(records)
    (root / "constraints.txt").write_text("".join(f"{name}=={version}\n" for name, version in PINS.items()))
    states = {}
    for owner, name, number in (("microsoft", "onnxscript", 123), ("microsoft", "onnxscript", 456),
                                ("huggingface", "transformers", 789)):  # fmt: skip
        states[f"github.com/{owner}/{name}#{number}"] = {
            "url": f"https://github.com/{owner}/{name}/issues/{number}", "owner": owner, "repo": name,
            "number": number, "kind": "issue", "state": "open", "state_reason": None, "closed_at": None,
            "merged": None, "title": "bug", "reachable": True, "error": None, "etag": None}  # fmt: skip
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"format": "exportbot-tracker-snapshot", "version": 1, "hosts": ["github.com"],
                                    "base_url": "https://api.github.com", "taken_at": "2026-12-01T00:00:00Z",
                                    "states": states}))  # fmt: skip
    out = tmp_path / "audit.json"
    for args, selection in (([], "complete"), (["--entry", "bart-gather-fold"], ["bart-gather-fold"])):
        if args:  # --entry forces a re-run: stand in for the audit itself (no export in this test)
            monkeypatch.setattr("bot.cli.audit.run_audit", lambda *_, **__: AuditReport([], dict(PINS), "aee41f0ad3ec", 1))
        result = CliRunner().invoke(audit_command, ["--registry", str(root / "registry"), "--tracker", str(snapshot),
                                                    "--json", str(out), *args])  # fmt: skip
        assert result.exit_code in (0, 3), result.output
        data = json.loads(out.read_text())
        assert check_report(data) is not None
        assert (data["repository"], data["base_commit"]) == (REPO, git(root, "rev-parse", "HEAD"))
        assert data["registry_digest"] == local_registry_digest(root / "registry")
        assert data["selection"] == {"entries": selection, "workarounds": []}
        assert [row["id"] for row in data["entries"]] == ([] if args else list(ENTRY_IDS))
