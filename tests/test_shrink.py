"""The rolling shrink PR (bot.github.shrink, bot.github.prwriter, bot.config) through real PyGithub against the fake server.

Every scenario is run twice or more where it matters, because the property under test is that the
repository is the only state: a second run with the same report must find nothing to write.
"""

from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import (
    FakeGitHub,
    Fault,
    fake_github_fixture,  # noqa: F401 (provides the fake_github fixture)
)
from github import Auth, Github, InputGitTreeElement

from bot.audit.report import ReportError, check_report, registry_digest
from bot.cli import pr as shrink
from bot.cli.pr import pr_command
from bot.config import BotConfig, ConfigError, load_config, parse_config
from bot.github import shrink_session as shrink_github
from bot.github.prwriter import (
    parse_pr_body,
    pr_body,
    proposal_from_report,
    read_trailers,
    select_proposals,
    shrink_changes,
)
from bot.github.shrink import open_or_update_pr
from bot.github.shrink_plan import ShrinkOutcome
from bot.github.shrink_session import ShrinkStopped
from exporters.ledger import load_ledger

TOKEN = "ghp_FAKE0123456789abcdefTOKENdoNOTleak"
REPO = "acme/exportbot"
BRANCH = "exportbot/shrink"
SKIPS, OPTIMIZE = "registry/export_skips.toml", "registry/onnx_disable_optimize.toml"
SOURCE = "exporters/onnx/exporter.py"
CONFIG = BotConfig(repository=REPO)

T5_BLOCK = """\
# The optimizer folds the Cast inside the relative-position bucket.
[[entry]]
id = "t5-cast-folding"
models = ["T5ForConditionalGeneration"]
backend = "onnx"
scope = "all"
upstream = "https://github.com/microsoft/onnxscript/issues/123"
dependency = "onnxscript"
reason = "Constant folding drops a Cast."
failure = 'Cast'
added = 2026-11-01

"""
BART_BLOCK = """\
[[entry]]
id = "bart-gather-fold"
models = ["BartForConditionalGeneration"]
backend = "onnx"
scope = "static"
upstream = "https://github.com/microsoft/onnxscript/issues/456"
dependency = "onnxscript"
reason = "Gather folding breaks shapes."
failure = 'Gather'
added = 2026-11-02
"""
OPTIMIZE_TEXT = (
    "# ONNX_DISABLE_OPTIMIZE: classes exported with the optimizer off.\n\n" + T5_BLOCK + BART_BLOCK
)
SKIPS_TEXT = """\
# EXPORT_SKIPS: classes that cannot be exported.

[[entry]]
id = "led-global-attention"
models = ["LEDForConditionalGeneration"]
backend = "dynamo"
scope = "all"
upstream = "https://github.com/huggingface/transformers/issues/789"
dependency = "transformers"
reason = "Data-dependent global attention."
model_change = "Pad global attention to a static maximum."
failure = 'GuardOnDataDependentSymNode'
added = 2026-11-03
"""
GONE_BLOCK = """\
@register_fx_node_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/11")
def _fix_gone(graph):
    \"\"\"Fixed upstream in the meantime.\"\"\"
    return graph


"""
SOURCE_TEXT = f"""\
\"\"\"ONNX workarounds.\"\"\"

from exporters.utils import register_fx_node_fix


# ── Stage 3: FX node fixes ──
{GONE_BLOCK}@register_fx_node_fix("onnx", upstream="https://github.com/pytorch/pytorch/issues/12")
def _fix_shared(graph):
    \"\"\"Also called by a neighbour, so it cannot go on its own.\"\"\"
    return graph


def neighbour(graph):
    return _fix_shared(graph)
"""
PINS = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.2",
        "onnxruntime": "1.32.0", "executorch": "1.5.1", "torchao": "0.18.0"}  # fmt: skip
DIGEST = registry_digest({"onnx_disable_optimize.toml": OPTIMIZE_TEXT.encode(),
                         "export_skips.toml": SKIPS_TEXT.encode()})
ENTRIES = {
    "t5-cast-folding": ("ONNX_DISABLE_OPTIMIZE", "T5ForConditionalGeneration", "onnx", "all", 123),
    "bart-gather-fold": ("ONNX_DISABLE_OPTIMIZE", "BartForConditionalGeneration", "onnx", "static", 456),
    "led-global-attention": ("EXPORT_SKIPS", "LEDForConditionalGeneration", "dynamo", "all", 789),
}


def report(verdicts: dict[str, str], *, states: dict[str, str] | None = None, pins: dict[str, str] | None = None,
           runs: int = 2, generated_at: str = "2026-12-01T06:00:00Z") -> dict[str, Any]:  # fmt: skip
    """A schema-1 audit report: every ledger entry, ``not-due`` unless ``verdicts`` says otherwise."""
    rows = []
    for entry_id, (list_name, model, backend, scope, number) in ENTRIES.items():
        verdict = verdicts.get(entry_id, "not-due")
        modes = {"all": ["static", "dynamic"], "static": ["static"], "dynamic": ["dynamic"]}[scope]
        status = {"removable": "pass", "still-needed": "failed"}.get(verdict)
        evidence = [
            {"model": model, "mode": mode, "run": run, "status": status, "error": None,
             "max_abs_diff": 2.1e-06 if status == "pass" else None, "seconds": 8.0 + run}
            for mode in modes
            for run in range(1, runs + 1)
        ] if status else []  # fmt: skip
        repo = "huggingface/transformers" if backend == "dynamo" else "microsoft/onnxscript"
        rows.append({
            "id": entry_id, "list": list_name, "models": [model], "backend": backend, "scope": scope,
            "upstream": f"https://github.com/{repo}/issues/{number}",
            "upstream_state": {"summary": (states or {}).get(entry_id, "closed:completed")},
            "due": bool(status), "due_reasons": [], "moved_pins": {}, "verdict": verdict,
            "reasons": [f"{verdict} because the test says so"], "evidence": evidence,
        })  # fmt: skip
    return {"schema": 2, "generated_at": generated_at, "partial": False, "rate_limited_until": None,
            "exporter_version": "aee41f0ad3ec", "pins": pins or PINS, "candidate": None, "runs": runs,
            "counts": {}, "exit_code": 3, "entries": rows, "repository": REPO, "base_commit": None,
            "registry_digest": DIGEST, "selection": {"entries": "complete", "workarounds": []}}  # fmt: skip


def only(data: dict[str, Any], *entry_ids: str) -> dict[str, Any]:
    """``data`` cut to ``entry_ids``, as ``audit --entry ID`` writes it."""
    rows = [row for row in data["entries"] if row["id"] in entry_ids]
    return data | {"entries": rows, "selection": {"entries": sorted(entry_ids), "workarounds": []}}


def with_workarounds(data: dict[str, Any], verdicts: dict[str, str]) -> dict[str, Any]:
    """``data`` plus ``audit --workarounds`` rows for the two workarounds of SOURCE_TEXT."""
    rows = []
    for name, verdict in verdicts.items():
        status = "pass" if verdict == "removable" else "failed"
        rows.append({
            "id": name, "kind": "fx_node_fix", "backend": "onnx", "source": SOURCE,
            "removal": "used elsewhere in the module: line 18 (_fix_shared)" if name == "_fix_shared" else None,
            "exports": [{"model": "BartModel", "backend": "onnx", "mode": "static"}],
            "upstream": f"https://github.com/pytorch/pytorch/issues/{11 if name == '_fix_gone' else 12}",
            "dependency": "torch", "upstream_state": {"summary": "closed:completed"}, "due": True,
            "due_reasons": [], "moved_pins": {}, "verdict": verdict, "reasons": [f"{verdict} in the test"],
            "evidence": [{"model": "BartModel", "mode": "static", "run": run, "status": status,
                          "max_abs_diff": 3e-06 if status == "pass" else None} for run in (1, 2)],
        })  # fmt: skip
    return data | {"workarounds": rows, "selection": data["selection"] | {"workarounds": "complete"}}


def client(server: FakeGitHub) -> Github:
    return Github(base_url=server.url, auth=Auth.Token(TOKEN), retry=None, seconds_between_requests=0,
                  seconds_between_writes=0)  # fmt: skip


def run(
    server: FakeGitHub, data: dict[str, Any], config: BotConfig = CONFIG, **options: Any
) -> ShrinkOutcome:
    return open_or_update_pr(data, config, client(server), True, **options)


def writes(server: FakeGitHub) -> int:
    return sum(1 for r in server.requests if r.method != "GET")


def pulls(server: FakeGitHub, state: str = "all") -> list[Any]:
    return list(client(server).get_repo(REPO).get_pulls(state=state))


def only_removed(old: str, new: str, *blocks: str) -> bool:
    """The diff from ``old`` to ``new`` adds nothing and removes exactly the blocks' lines (and blanks)."""
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))[2:]
    added = [line for line in diff if line.startswith("+")]
    removed = sorted(line[1:] for line in diff if line.startswith("-") and line[1:].strip())
    return not added and removed == sorted(line for b in blocks for line in b.splitlines() if line.strip())


@pytest.fixture(name="server")
def server_fixture(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(
        REPO,
        files={OPTIMIZE: OPTIMIZE_TEXT, SKIPS: SKIPS_TEXT, SOURCE: SOURCE_TEXT, "README.md": "# exportbot\n"},
    )
    return fake_github


@pytest.fixture(autouse=True)
def no_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shrink, "SECONDS_BETWEEN_REQUESTS", 0)
    monkeypatch.setattr(shrink, "SECONDS_BETWEEN_WRITES", 0)
    monkeypatch.setattr(shrink_github, "READ_BACKOFF", 0)
    for name in ("CI", "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_REPOSITORY"):
        monkeypatch.delenv(name, raising=False)


# ---- configuration and pure parts --------------------------------------------------------------------


def test_config_defaults_values_and_errors(tmp_path: Path) -> None:
    assert parse_config({}) == BotConfig()
    config = parse_config(
        {"repository": "a/b", "labels": ["x"], "runs": 3, "timeout": 1.5, "dashboard": True}
    )
    assert (config.repository, config.labels, config.runs, config.timeout, config.dashboard) == (
        "a/b", ("x",), 3, 1.5, True)  # fmt: skip
    for table, key in [({"lables": []}, "lables"), ({"runs": "2"}, "runs"), ({"runs": True}, "runs"),
                       ({"repository": "nope"}, "repository"), ({"labels": "x"}, "labels"),
                       ({"branch": "a..b"}, "branch"), ({"dashboard": 1}, "dashboard")]:  # fmt: skip
        with pytest.raises(ConfigError, match=repr(key)):
            parse_config(table)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[tool.exportbot]\nrepository = "o/r"\nreviewers = ["al"]\n')
    assert load_config(pyproject) == BotConfig(repository="o/r", reviewers=("al",))
    assert load_config(None) == BotConfig()


def test_reproduce_locally_prints_the_command_the_rerun_ran() -> None:
    data = report({"t5-cast-folding": "removable"})
    command = "exportbot export T5ForConditionalGeneration --backend onnx --static --repro t5-cast-folding --opset 18"
    for evidence in data["entries"][0]["evidence"]:
        if evidence["mode"] == "static":
            evidence["command"] = command
    proposal = proposal_from_report(data["entries"][0], data)
    body = pr_body([proposal], 2, BRANCH)
    assert f"{command}\n" in body  # as recorded, with the options the re-run passed
    assert "exportbot export T5ForConditionalGeneration --backend onnx --dynamic --repro t5-cast-folding\n" in body
    assert parse_pr_body(body) == [proposal]  # the command survives the hidden block


def test_body_round_trips_and_edits_only_touch_copies(tmp_path: Path) -> None:
    data = report({"t5-cast-folding": "removable"})
    data["entries"][0]["reasons"] = ["passes --> <!-- even with comment delimiters | pipes"]
    proposal = proposal_from_report(data["entries"][0], data)
    body = pr_body([proposal], 2, BRANCH)
    assert parse_pr_body(body) == [proposal]
    assert body.count("-->") == body.count("<!--")  # the reason cannot close the hidden block early
    # Reproduce locally: what the audit's re-run ran, the entry's reproducer (--repro), never --ignore-ledger,
    # which exports the class's default tiny model (another model for an entry with [entry.repro]).
    assert "exportbot export T5ForConditionalGeneration --backend onnx --dynamic --repro t5-cast-folding" in body
    assert "--ignore-ledger" not in body
    assert "https://github.com/microsoft/onnxscript/issues/123" in body and "onnxscript 0.7.2" in body
    assert "| `T5ForConditionalGeneration` | static | 2 of 2 | 2.1e-06, 2.1e-06 |" in body
    assert parse_pr_body("<!-- exportbot:entry {not json} -->") == []
    probe = {"id": "_fix_gone", "kind": "fx_node_fix", "verdict": "removable"}  # lacks backend, exports...
    with pytest.raises(ReportError, match=r"^workarounds\[0\] \(_fix_gone\)\.backend: missing$"):
        check_report({**data, "workarounds": [probe]})
    with pytest.raises(ReportError, match="schema 2"):
        check_report({"schema": 1, "entries": []})

    (tmp_path / "onnx_disable_optimize.toml").write_text(OPTIMIZE_TEXT)
    (tmp_path / "export_skips.toml").write_text(SKIPS_TEXT)
    changes = shrink_changes(tmp_path, ["t5-cast-folding"])
    assert list(changes) == [tmp_path / "onnx_disable_optimize.toml"]
    assert (tmp_path / "onnx_disable_optimize.toml").read_text() == OPTIMIZE_TEXT  # working tree untouched
    assert changes[tmp_path / "onnx_disable_optimize.toml"] == OPTIMIZE_TEXT.replace(T5_BLOCK, "")

    both = report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"})
    capped = select_proposals(both, load_ledger(tmp_path), [proposal], [], 2, max_proposals=1)
    assert [p.id for p in capped.proposals] == ["t5-cast-folding"]  # already proposed: keeps its place
    assert capped.notes["bart-gather-fold"].startswith("waiting: the PR holds at most 1")


# ---- the command line --------------------------------------------------------------------------------


def invoke(server: FakeGitHub, tmp_path: Path, data: dict[str, Any], *args: str, env: dict[str, str]) -> Any:
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(data))
    pyproject = tmp_path / "pyproject.toml"
    if not pyproject.exists():
        pyproject.write_text(f'[tool.exportbot]\nrepository = "{REPO}"\n')
    options = ["--report", str(report_file), "--github-url", server.url, "--config", str(pyproject), *args]
    return CliRunner().invoke(pr_command, options, env=env)


def test_dry_run_prints_diff_and_body_and_writes_nothing(server: FakeGitHub, tmp_path: Path) -> None:
    result = invoke(server, tmp_path, report({"t5-cast-folding": "removable"}), env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 0, result.output
    assert f"--- a/{OPTIMIZE}" in result.output and '-id = "t5-cast-folding"' in result.output
    assert "--- PR body:" in result.output and "<!-- exportbot:entry {" in result.output
    assert f"would open a PR {BRANCH} → main" in result.output
    assert writes(server) == 0 and server.requests and all(r.authenticated for r in server.requests)
    assert TOKEN not in result.output and not [r for r in server.requests if TOKEN in repr(r)]

    refused = invoke(server, tmp_path, report({}), "--apply", env={})
    assert refused.exit_code == 2 and "--apply needs a token" in refused.output
    (tmp_path / "pyproject.toml").write_text("[tool.exportbot]\nlables = []\n")
    bad = invoke(server, tmp_path, report({}), env={})
    assert bad.exit_code == 2 and "unknown key 'lables'" in bad.output and len(bad.output.splitlines()) == 1


def test_ci_run_opens_one_labelled_pr_with_minimal_diff_then_repeats_change_nothing(
    server: FakeGitHub, tmp_path: Path
) -> None:
    data = report({"t5-cast-folding": "removable"})
    result = invoke(server, tmp_path, data, env={"CI": "true", "GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output and not [r for r in server.requests if TOKEN in repr(r)]
    [pull] = pulls(server)
    assert (pull.head.ref, pull.base.ref, pull.draft) == (BRANCH, "main", False)
    assert server.labels_of(REPO, pull.number) == ["exportbot", "ledger-shrink"]
    branch_text = server.read_file(REPO, BRANCH, OPTIMIZE) or ""
    assert only_removed(OPTIMIZE_TEXT, branch_text, T5_BLOCK)
    assert server.read_file(REPO, BRANCH, SKIPS) == SKIPS_TEXT
    assert server.read_file(REPO, "main", OPTIMIZE) == OPTIMIZE_TEXT
    tip = client(server).get_repo(REPO).get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert read_trailers(tip.message) == (True, server.branch_sha(REPO, "main"))
    assert [p.id for p in parse_pr_body(pull.body)] == ["t5-cast-folding"]

    sha, before = server.branch_sha(REPO, BRANCH), writes(server)
    for _ in range(5):
        outcome = run(server, data)
        assert outcome.done == [] and outcome.plan.steps() == []
    assert (writes(server), server.branch_sha(REPO, BRANCH), len(pulls(server))) == (before, sha, 1)
    assert server.comments_of(REPO, pull.number) == []


def test_new_entry_adds_a_commit_and_rewrites_the_body_of_the_same_pr(server: FakeGitHub) -> None:
    run(server, report({"t5-cast-folding": "removable"}))
    first_tip, before = server.branch_sha(REPO, BRANCH), writes(server)
    outcome = run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"}))
    [pull] = pulls(server)
    assert outcome.pr_url == pull.html_url and writes(server) - before == 4  # tree, commit, ref, PR edit
    tip = client(server).get_repo(REPO).get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in tip.parents] == [first_tip]
    assert [p.id for p in parse_pr_body(pull.body)] == ["t5-cast-folding", "bart-gather-fold"]
    assert pull.title == "exportbot: remove 2 workaround ledger entries"
    assert only_removed(OPTIMIZE_TEXT, server.read_file(REPO, BRANCH, OPTIMIZE) or "", T5_BLOCK, BART_BLOCK)


def test_base_moving_elsewhere_changes_nothing_and_a_ledger_change_on_base_is_merged(
    server: FakeGitHub,
) -> None:
    data = report({"t5-cast-folding": "removable"})
    run(server, data)
    repo = client(server).get_repo(REPO)
    readme = repo.get_contents("README.md", ref="main")
    repo.update_file("README.md", "Docs", "# exportbot\n\nMore.\n", readme.sha, branch="main")
    before, tip = writes(server), server.branch_sha(REPO, BRANCH)
    run(server, data)
    assert (writes(server), server.branch_sha(REPO, BRANCH)) == (before, tip)  # no rebase for its own sake

    added = SKIPS_TEXT + "\n" + SKIPS_TEXT.split("\n\n", 1)[1].replace("led-global-attention", "gpt-skip").replace(
        "LEDForConditionalGeneration", "GPT2LMHeadModel")  # fmt: skip
    repo.update_file(SKIPS, "Add a skip", added, repo.get_contents(SKIPS, ref="main").sha, branch="main")
    run(server, data)
    head = repo.get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    # A merge of the new base keeps the PR's diff to exactly the removal.
    assert [p.sha for p in head.parents] == [tip, server.branch_sha(REPO, "main")]
    assert server.read_file(REPO, BRANCH, SKIPS) == added
    assert server.read_file(REPO, BRANCH, OPTIMIZE) == OPTIMIZE_TEXT.replace(T5_BLOCK, "")
    assert server.read_file(REPO, BRANCH, "README.md") == "# exportbot\n\nMore.\n"


def test_entries_no_longer_removable_are_taken_out_and_kept_ones_stay(server: FakeGitHub) -> None:
    both = {"t5-cast-folding": "removable", "bart-gather-fold": "removable"}
    run(server, report(both))
    before = writes(server)
    run(server, report({}))  # everything not-due: nothing speaks against the proposals
    assert writes(server) == before

    run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed"}))
    [pull] = pulls(server, "open")
    assert [p.id for p in parse_pr_body(pull.body)] == ["t5-cast-folding"]
    assert only_removed(OPTIMIZE_TEXT, server.read_file(REPO, BRANCH, OPTIMIZE) or "", T5_BLOCK)

    outcome = run(server, report({"t5-cast-folding": "changed"}))
    assert outcome.done == [f"closed #{pull.number}"] and pulls(server, "open") == []
    assert parse_pr_body(client(server).get_repo(REPO).get_pull(pull.number).body) == []
    reopened = run(server, report({"t5-cast-folding": "removable"}))  # closed by the bot: no veto
    assert [p.number for p in pulls(server, "open")] == [pull.number + 1]
    assert not [step for step in reopened.done if step.startswith("pushed")]  # the branch already fits


def test_human_commit_is_never_overwritten_and_gets_one_comment(server: FakeGitHub) -> None:
    run(server, report({"t5-cast-folding": "removable"}))
    repo = client(server).get_repo(REPO)
    tip = repo.get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    blob = InputGitTreeElement("README.md", "100644", "blob", content="# exportbot, by hand\n")
    human = repo.create_git_commit("Tweak the README", repo.create_git_tree([blob], tip.tree), [tip])
    repo.get_git_ref(f"heads/{BRANCH}").edit(human.sha)

    grown = report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"})
    for _ in range(3):
        outcome = run(server, grown)
        assert outcome.plan.blocked and not outcome.plan.parents
    [pull] = pulls(server)
    assert server.branch_sha(REPO, BRANCH) == human.sha
    [comment] = server.comments_of(REPO, pull.number)
    assert human.sha in comment and "--recreate" in comment
    assert [p.id for p in parse_pr_body(repo.get_pull(pull.number).body)] == ["t5-cast-folding"]

    run(server, grown, recreate=True)
    tip = repo.get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in tip.parents] == [server.branch_sha(REPO, "main")]
    assert server.read_file(REPO, BRANCH, "README.md") == "# exportbot\n"
    assert len(parse_pr_body(repo.get_pull(pull.number).body)) == 2


def test_closed_unmerged_pr_is_not_proposed_again_until_upstream_state_changes(server: FakeGitHub) -> None:
    data = report({"t5-cast-folding": "removable"}, states={"t5-cast-folding": "open"})
    run(server, data)
    [pull] = pulls(server)
    client(server).get_repo(REPO).get_pull(pull.number).edit(state="closed")
    before = writes(server)
    for _ in range(2):
        outcome = run(server, data)
        assert outcome.plan.selection.turned_down == {"t5-cast-folding": pull.number}
    assert writes(server) == before and pulls(server, "open") == []

    run(server, report({"t5-cast-folding": "removable"}))  # upstream now closed:completed
    assert len(pulls(server, "open")) == 1
    assert len(pulls(server)) == 2


def test_a_new_pr_after_one_closed_unmerged_starts_from_the_base_not_the_rejected_commit(server: FakeGitHub) -> None:
    """The branch outlives a PR a maintainer closed unmerged; the next PR must not carry that rejected commit
    and a second commit re-adding its entries: one fresh commit on the base, whatever it proposes."""
    run(server, report({"t5-cast-folding": "removable"}, states={"t5-cast-folding": "open"}))
    [closed] = pulls(server)
    rejected = server.branch_sha(REPO, BRANCH)
    client(server).get_repo(REPO).get_pull(closed.number).edit(state="closed")
    base = server.branch_sha(REPO, "main")

    run(server, report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"}, states={"t5-cast-folding": "open"}))
    repo = client(server).get_repo(REPO)
    head = repo.get_git_commit(server.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in head.parents] == [base] and head.sha != rejected
    assert proposed_ids(server) == ["bart-gather-fold"]  # t5 stays turned down
    assert only_removed(OPTIMIZE_TEXT, server.read_file(REPO, BRANCH, OPTIMIZE) or "", BART_BLOCK)


def proposed_ids(server: FakeGitHub) -> list[str]:
    [pull] = pulls(server, "open")
    return [p.id for p in parse_pr_body(pull.body)]


def test_pr_creation_failing_after_the_push_is_completed_by_the_next_run(server: FakeGitHub) -> None:
    data = report({"t5-cast-folding": "removable"})
    server.inject(f"/repos/{REPO}/pulls", Fault.error(502), method="POST")
    with pytest.raises(ShrinkStopped, match="open pull request: GitHub answered HTTP 502") as stopped:
        run(server, data)
    assert stopped.value.done[0].startswith("pushed ")
    sha = server.branch_sha(REPO, BRANCH)
    assert sha is not None and pulls(server) == []

    outcome = run(server, data)
    [pull] = pulls(server)
    assert outcome.done == [f"opened #{pull.number}", f"labelled #{pull.number}: exportbot, ledger-shrink"]
    assert server.branch_sha(REPO, BRANCH) == sha
    run(server, data)
    assert len(pulls(server)) == 1


def test_rate_limit_mid_update_stops_cleanly_and_the_next_run_finishes(server: FakeGitHub) -> None:
    run(server, report({"t5-cast-folding": "removable"}))
    grown = report({"t5-cast-folding": "removable", "bart-gather-fold": "removable"})
    server.inject(f"/repos/{REPO}/pulls/*", Fault.rate_limited(reset_in=3600), method="PATCH")
    with pytest.raises(ShrinkStopped, match="rate limit reached; it resets at"):
        run(server, grown)
    sha = server.branch_sha(REPO, BRANCH)
    [pull] = pulls(server)
    assert len(parse_pr_body(pull.body)) == 1

    waits: list[float] = []
    server.inject(f"/repos/{REPO}/pulls/*", Fault.too_many_requests(retry_after=7), method="PATCH")
    outcome = run(server, grown, sleep=waits.append)
    assert waits == [7.0] and outcome.done == [f"updated #{pull.number}"]
    assert server.branch_sha(REPO, BRANCH) == sha
    assert len(parse_pr_body(pulls(server)[0].body)) == 2


def test_incomplete_evidence_opens_a_draft_and_reviewer_trouble_is_a_warning(server: FakeGitHub) -> None:
    config = BotConfig(repository=REPO, reviewers=("alice",), labels=("bot",))
    outcome = run(server, report({"bart-gather-fold": "removable"}, runs=1), config)
    [pull] = pulls(server)
    assert pull.draft and "Evidence is incomplete" in pull.body
    assert server.count(f"/repos/{REPO}/pulls/{pull.number}/requested_reviewers", method="POST") == 1
    assert outcome.warnings and "request reviewers" in outcome.warnings[0]
    assert server.labels_of(REPO, pull.number) == ["bot"]


def test_dashboard_is_created_once_and_edited_in_place(server: FakeGitHub) -> None:
    config = BotConfig(repository=REPO, dashboard=True)
    data = report({"t5-cast-folding": "removable", "bart-gather-fold": "still-needed"})
    outcome = run(server, data, config)
    assert outcome.dashboard_step == "created dashboard #2"
    issue = client(server).get_repo(REPO).get_issue(2)
    assert issue.title == "exportbot ledger dashboard" and server.labels_of(REPO, 2) == ["exportbot"]
    assert "`bart-gather-fold`: closed upstream, still failing at onnxscript 0.7.2" in issue.body
    assert pulls(server)[0].html_url in issue.body

    before = writes(server)
    assert run(server, data, config).dashboard_step == "dashboard #2 is up to date"
    assert writes(server) == before
    changed = copy.deepcopy(data)
    changed["entries"][2]["verdict"] = "changed"
    assert run(server, changed, config).dashboard_step == "updated dashboard #2"
    assert writes(server) == before + 1
    issues = client(server).get_repo(REPO).get_issues(state="all")
    assert [i.number for i in issues if i.title == config.dashboard_title] == [2]


# ---- registered workarounds (audit --workarounds) ---------------------------------------------------


def test_removable_workaround_is_deleted_from_its_source_and_one_in_use_is_listed_by_hand(
    server: FakeGitHub,
) -> None:
    config = BotConfig(repository=REPO, dashboard=True)
    data = with_workarounds(report({}), {"_fix_gone": "removable", "_fix_shared": "removable"})
    outcome = run(server, data, config)
    [pull] = pulls(server)
    assert pull.title == "exportbot: remove 2 registered workarounds"
    assert only_removed(SOURCE_TEXT, server.read_file(REPO, BRANCH, SOURCE) or "", GONE_BLOCK)
    assert server.read_file(REPO, BRANCH, OPTIMIZE) == OPTIMIZE_TEXT
    assert list(outcome.plan.changes) == [SOURCE] and set(outcome.plan.by_hand) == {"_fix_shared"}
    body = pull.body or ""
    assert "deleted from `exporters/onnx/exporter.py` in this PR" in body
    assert "**Delete by hand** (this PR does not touch the code): used elsewhere" in body
    assert "exportbot export BartModel --backend onnx --static --without _fix_gone" in body
    assert "| `BartModel` | static | 2 of 2 | 3e-06, 3e-06 |" in body
    proposed = parse_pr_body(body)
    assert [(p.id, p.source, p.exports) for p in proposed] == [
        ("_fix_gone", SOURCE, (("BartModel", "static"),)),
        ("_fix_shared", SOURCE, (("BartModel", "static"),)),
    ]
    dashboard = client(server).get_repo(REPO).get_issue(2).body or ""
    assert "## Registered workarounds" in dashboard and "`_fix_shared`: removable, ready to delete by hand" in dashboard
    assert f"| `_fix_gone` | onnx | [closed:completed](https://github.com/pytorch/pytorch/issues/11) | BartModel (static) | removable | {pull.html_url} |" in dashboard

    sha, before = server.branch_sha(REPO, BRANCH), writes(server)
    for _ in range(3):  # the source file's blob on the branch is compared too: nothing to write again
        assert run(server, data, config).plan.steps() == []
    assert (writes(server), server.branch_sha(REPO, BRANCH)) == (before, sha)

    # The next audit finds nothing new (not-due): the PR keeps both, from its own hidden blocks.
    quiet = with_workarounds(report({}), {"_fix_gone": "not-due", "_fix_shared": "not-due"})
    assert run(server, quiet, config).plan.steps() == []


def test_workarounds_that_can_only_go_by_hand_open_no_pr_but_reach_the_dashboard(server: FakeGitHub) -> None:
    config = BotConfig(repository=REPO, dashboard=True)
    data = with_workarounds(report({}), {"_fix_shared": "removable", "_fix_gone": "still-needed"})
    outcome = run(server, data, config)
    assert pulls(server) == [] and server.branch_sha(REPO, BRANCH) is None
    assert outcome.plan.selection.notes["_fix_shared"] == "removable; delete by hand (not self-contained)"
    dashboard = client(server).get_repo(REPO).get_issue(1).body or ""
    assert "- `_fix_shared`: removable, ready to delete by hand (used elsewhere" in dashboard
    assert "| `_fix_gone` | onnx |" in dashboard and "| still-needed | — |" in dashboard


def test_backend_scoped_workaround_rows_run_on_their_backends_stack():
    data = with_workarounds(report({}), {"_fix_gone": "removable"})
    data["workarounds"][0]["backend"] = "executorch.xnnpack"  # a backend-scoped fix (exporter_executorch)
    proposal = proposal_from_report(check_report(data)["workarounds"][0], data)
    assert list(proposal.pins) == ["torch", "transformers", "executorch", "torchao"]
    assert parse_pr_body(pr_body([proposal], 2, BRANCH)) == [proposal]
