"""``exportbot pin-check publish``: the sticky comment and the check run of someone else's pin move, on the fake
GitHub through the real PyGithub client, from a result file as the untrusted ``pin-check run`` job writes it
(the run itself, with real environments and exports, is in tests/test_watch_real.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, fake_github_fixture  # noqa: F401 (the fake_github fixture)
from github import Auth, Github

import bot.cli.pr as pr_cli
from bot.cli.watch import pin_check_group
from bot.github import shrink_session
from bot.github.pin_check import CHECK_NAME, PIN_CHECK_MARKER, ResultError, check_result

REPO = "acme/exportbot"
SKIPS = "registry/export_skips.toml"
ENTRY = '[[entry]]\nid = "dinov2-resize"\nmodels = ["Dinov2WithRegistersModel"]\n'


def result(regressions: int = 0, **changes: Any) -> dict[str, Any]:
    data = {
        "schema": 1, "moves": {"onnxscript": ["0.7.0", "0.7.1"]}, "removals": ["dinov2-resize"],
        "regressions": [{"export": "BertModel onnx/static", "status": "failed", "error": "RuntimeError: broken",
                         "command": "exportbot export BertModel --backend onnx --static"}] * regressions,
        "withheld": [], "checked": ["entries re-run at the candidate: 1 (1 removable)"],
        "patch": f"--- a/{SKIPS}\n+++ b/{SKIPS}\n@@ -1,3 +0,0 @@\n-" + ENTRY.replace("\n", "\n-").rstrip("-"),
        "files": {SKIPS: ""}, "problem": None,
    }  # fmt: skip
    return data | changes


@pytest.fixture(autouse=True)
def no_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pr_cli, "SECONDS_BETWEEN_REQUESTS", 0)
    monkeypatch.setattr(pr_cli, "SECONDS_BETWEEN_WRITES", 0)
    monkeypatch.setattr(shrink_session, "READ_BACKOFF", 0)


@pytest.fixture
def pull(fake_github: FakeGitHub) -> tuple[FakeGitHub, int, str]:
    fake_github.add_repo(REPO, files={"constraints.txt": "onnxscript==0.7.0\n", SKIPS: ENTRY})
    number = fake_github.add_pull(REPO, "Bump onnxscript from 0.7.0 to 0.7.1", head="dependabot/pip/onnxscript-0.7.1",
                                  files={"constraints.txt": "onnxscript==0.7.1\n"})  # fmt: skip
    return fake_github, number, fake_github.branch_sha(REPO, "dependabot/pip/onnxscript-0.7.1") or ""


def publish(server: FakeGitHub, tmp_path: Path, data: Any, number: int, sha: str, *args: str) -> Any:
    path = tmp_path / "pin-check.json"
    path.write_text(json.dumps(data))
    options = ["publish", "--result", str(path), "--pr", str(number), "--head-sha", sha, "--repo", REPO,
               "--github-url", server.url, *args]  # fmt: skip
    return CliRunner().invoke(pin_check_group, options, env={"GITHUB_TOKEN": "ghp_FAKEtoken", "CI": "true"})


def comments(server: FakeGitHub, number: int) -> list[str]:
    return [c for c in server.comments_of(REPO, number) if PIN_CHECK_MARKER in c]


def writes(server: FakeGitHub) -> int:
    return sum(1 for r in server.requests if r.method != "GET")


def test_one_sticky_comment_and_one_check_run_that_regressions_fail(pull, tmp_path):
    server, number, sha = pull
    done = publish(server, tmp_path, result(regressions=1), number, sha)
    assert done.exit_code == 0, done.output
    [comment] = comments(server, number)
    assert "Regressions (1): the check fails" in comment and "`RuntimeError: broken`" not in comment
    assert "`failed: RuntimeError: broken`" in comment and "`exportbot export BertModel --backend onnx --static`" in comment
    assert "```diff\n--- a/registry/export_skips.toml" in comment  # the commit to apply
    [run] = server.check_runs_of(REPO, sha)
    assert (run["name"], run["status"], run["conclusion"]) == (CHECK_NAME, "completed", "failure")
    assert run["output"]["title"] == "1 regression(s), 1 removal(s) allowed"

    before = writes(server)
    again = publish(server, tmp_path, result(regressions=1), number, sha)
    assert again.exit_code == 0 and "nothing to change" in again.output and writes(server) == before

    fixed = publish(server, tmp_path, result(), number, sha)
    assert fixed.exit_code == 0 and len(comments(server, number)) == 1  # edited in place, never a second one
    [run] = server.check_runs_of(REPO, sha)
    assert run["conclusion"] == "success" and "Regressions" not in comments(server, number)[0]


def test_removals_are_pushed_only_to_a_branch_of_this_repository(pull, tmp_path, fake_github):
    server, number, sha = pull
    done = publish(server, tmp_path, result(), number, sha, "--push")
    assert done.exit_code == 0, done.output
    head = server.branch_sha(REPO, "dependabot/pip/onnxscript-0.7.1")
    assert head != sha and server.read_file(REPO, "dependabot/pip/onnxscript-0.7.1", SKIPS) == ""
    assert server.read_file(REPO, "dependabot/pip/onnxscript-0.7.1", "constraints.txt") == "onnxscript==0.7.1\n"
    assert f"Pushed to this PR's branch as commit {head[:12]}" in comments(server, number)[0]

    fork = server.add_pull(REPO, "Bump onnxscript", head="fork-branch", head_repo="someone/exportbot")
    fork_sha = server.branch_sha(REPO, "fork-branch") or ""
    done = publish(server, tmp_path, result(), fork, fork_sha, "--push")
    assert "not pushed: the PR's branch is in another repository" in done.output
    assert server.branch_sha(REPO, "fork-branch") == fork_sha and "```diff" in comments(server, fork)[0]


def test_a_dry_run_reads_only(pull, tmp_path):
    server, number, sha = pull
    done = publish(server, tmp_path, result(regressions=1), number, sha, "--dry-run")
    assert done.exit_code == 0 and f"would comment on #{number}" in done.output and writes(server) == 0


@pytest.mark.parametrize(("change", "message"), [
    ({"files": {".github/workflows/ci.yml": "evil"}}, "'.github/workflows/ci.yml' is not a ledger, verification or pin file"),
    ({"regressions": [{"export": 1}]}, "regressions: expected an array of objects"),
    ({"moves": {"onnxscript": "0.7.1"}}, "moves: expected an object"),
    ({"schema": 2}, "not a pin-check result of schema 1"),
])  # fmt: skip
def test_an_untrusted_result_is_checked_before_any_request(pull, tmp_path, change, message):
    server, number, sha = pull
    with pytest.raises(ResultError, match=message):
        check_result(result() | change)
    done = publish(server, tmp_path, result() | change, number, sha)
    assert done.exit_code == 2 and message in done.output and server.requests == []


def test_client_sees_the_check_run_through_pygithub(pull, tmp_path):
    server, number, sha = pull
    publish(server, tmp_path, result(), number, sha)
    repo = Github(base_url=server.url, auth=Auth.Token("t"), retry=None).get_repo(REPO)
    [run] = list(repo.get_commit(sha).get_check_runs(check_name=CHECK_NAME))
    assert run.conclusion == "success" and run.output.title == "no regression, 1 removal(s) allowed"


def test_a_result_naming_another_prs_head_is_refused(pull, tmp_path):
    """The artifact names the PR, the workflow_run event names the commit it checked: they must agree, or an
    artifact could make the check land on another PR."""
    server, number, _ = pull
    other = "0" * 40
    done = publish(server, tmp_path, result(), number, other)
    assert done.exit_code == 1 and "its head is " in done.output and "not the commit checked (000000000000)" in done.output
    assert writes(server) == 0
