"""``exportbot watch`` without exports: which releases are proposed (bot.audit.releases), what the index says
(bot.run.index against a local package index on 127.0.0.1), what a bump PR proposes (bot.audit.bump) and the
rolling bump PR itself on the fake GitHub through the real PyGithub client (bot.github.bump), from recorded
candidate-audit reports. The same run with real releases, environments and exports: tests/test_watch_real.py.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fake_github import FakeGitHub, fake_github_fixture  # noqa: F401 (the fake_github fixture)
from github import Auth, Github
from package_index import PackageIndex

from bot.audit.bump import decide_bump
from bot.audit.releases import Release, groups, newer_finals, plan_watch
from bot.audit.report import registry_digest
from bot.audit.verification import Verification
from bot.config import BotConfig
from bot.github.bump import propose_bump, read_bump
from bot.run.index import IndexSession, configured_index

NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
PINS = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.0",
        "onnxruntime": "1.32.0", "executorch": "1.5.1", "torchao": "0.18.0"}  # fmt: skip
COUPLED = {"executorch": ("torch",), "torchao": ("torch",)}


def released(package: str, *versions: str, age_days: float | None = 30) -> list[Release]:
    when = None if age_days is None else NOW - age_days * DAY
    return [Release(package, v, when) for v in versions]


# ── Which releases are proposed ──
def test_the_newest_final_release_old_enough_is_proposed_and_the_rest_say_why_not():
    offered = {
        "onnxscript": [*released("onnxscript", "0.7.0", "0.7.1"), *released("onnxscript", "0.7.2", age_days=1),
                       *released("onnxscript", "0.8.0rc1", "0.7.3.dev20261007")],
        "onnx": released("onnx", "1.23.2", "1.24.0", age_days=None),  # the index gives no upload time
        "transformers": released("transformers", "5.23.0"),
    }  # fmt: skip
    plan = plan_watch(PINS, offered, COUPLED, NOW, 3.0)
    [onnxscript] = plan.candidates
    assert (onnxscript.group, onnxscript.moves, onnxscript.specs) == ("onnxscript", {"onnxscript": ("0.7.0", "0.7.1")},
                                                                      ("onnxscript==0.7.1",))  # fmt: skip
    assert onnxscript.waiting == ("onnxscript 0.7.2: 1.0 days old (minimum 3)",)  # pre/dev releases never listed
    assert plan.quiet["onnx"] == "onnx 1.24.0: the index gives no upload time, so its age cannot be shown"
    assert plan.quiet["transformers"] == "nothing newer than transformers 5.23.0"
    assert [c.specs for c in plan_watch(PINS, offered, COUPLED, NOW, 0).candidates] == [("onnx==1.24.0",),
                                                                                         ("onnxscript==0.7.2",)]


def test_coupled_packages_form_one_group_moved_together():
    assert groups(["torch", "transformers", "executorch", "torchao"], COUPLED) == {
        "torch": ("torch", "executorch", "torchao"), "transformers": ("transformers",)}  # fmt: skip
    offered = {"torch": released("torch", "2.14.0"), "executorch": released("executorch", "1.6.0"),
               "torchao": released("torchao", "0.18.0")}  # fmt: skip
    [torch] = plan_watch(PINS, offered, COUPLED, NOW, 3.0, ["torch", "transformers", "executorch", "torchao"]).candidates
    assert torch.group == "torch" and torch.specs == ("torch==2.14.0", "executorch==1.6.0")
    assert torch.describe() == "torch 2.13.0 → 2.14.0, executorch 1.5.1 → 1.6.0"


def test_newer_finals_keeps_post_releases_and_drops_local_builds():
    offered = [Release("torch", v) for v in ("2.13.0+cpu", "2.13.0.post1", "2.12.0", "not-a-version")]
    assert [r.version for r in newer_finals("2.13.0", offered)] == ["2.13.0.post1"]


# ── What the index says ──
def fake_wheel(folder: Path, name: str, version: str) -> None:
    """A wheel file named as a release of ``name`` (its content is never installed: the index only lists it)."""
    stem = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{stem}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_index_is_asked_through_pip_with_upload_times_from_its_json_pages(tmp_path, monkeypatch):
    for version in ("1.0.0", "1.1.0", "1.2.0rc1"):
        fake_wheel(tmp_path, "exportbot-probe", version)
    uploaded = {"1.1.0": NOW - 2 * DAY}
    with PackageIndex(tmp_path, uploaded) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        session = IndexSession()
        releases = session.releases("exportbot-probe")
        assert session.index_url == index.url
        long_ago = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)  # package_index's default upload time
        assert {r.version: r.uploaded for r in releases} == {"1.1.0": NOW - 2 * DAY, "1.0.0": long_ago}  # no --pre
        assert session.releases("exportbot-absent") == []
        assert (session.pip_runs, session.http_requests) == (3, 2)  # config once, versions per package; one page each
    assert configured_index(":env:.index-url='http://a/simple'\nglobal.index-url='http://b/simple'\n") == "http://a/simple"
    assert configured_index("global.extra-index-url='file:///x'\n") is None


def test_watch_list_prints_the_candidates_and_stops(tmp_path):
    fake_wheel(tmp_path, "onnxscript", "0.7.0")
    fake_wheel(tmp_path, "onnxscript", "0.7.1")
    pins = tmp_path / "constraints.txt"
    pins.write_text("".join(f"{k}=={v}\n" for k, v in PINS.items()))
    with PackageIndex(tmp_path) as index:
        env = os.environ | {"PIP_INDEX_URL": index.url, "PIP_CONFIG_FILE": os.devnull}
        env.pop("PIP_FIND_LINKS", None)
        done = subprocess.run([sys.executable, "-m", "bot", "watch", "--list", "--pins", str(pins), "--json", "-"],
                              capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["candidates"] == [{"group": "onnxscript", "moves": {"onnxscript": ["0.7.0", "0.7.1"]}, "waiting": []}]
    assert listed["index"]["http_requests"] == 7 and "onnxscript 0.7.0 → 0.7.1" in done.stderr
    assert "nothing newer than onnx 1.23.2" in done.stderr


# ── The bump PR ──
REPO = "acme/exportbot"
BRANCH = "exportbot/bump-onnxscript"
ENTRY_TEXT = """\
[[entry]]
id = "dinov2-resize"
models = ["Dinov2WithRegistersModel"]
backend = "onnx"
scope = "static"
upstream = "https://github.com/microsoft/onnxscript/pull/2916"
dependency = "onnxscript"
reason = "Antialiased Resize without exclude_outside."
model_change = "none"
failure = 'last_hidden_state: mismatch'
added = 2026-12-01
"""
SKIPS = "# EXPORT_SKIPS\n\n" + ENTRY_TEXT
VERIFIED = ('[dinov2-resize]\nverified_on = 2026-12-01\nverdict = "still-needed"\nupstream_state = "unknown"\n'
            'candidate = "onnxscript==0.7.0"\n\n[dinov2-resize.versions]\nonnxscript = "0.7.0"\n')  # fmt: skip
PIN_TEXT = "# pins\n" + "".join(f"{k}=={v}\n" for k, v in PINS.items())
CONFIG = BotConfig(repository=REPO, runs=1, dashboard=True)


def candidate_report(verdict: str = "removable", regressions: int = 0, version: str = "0.7.1") -> dict[str, Any]:
    """A candidate audit's report (``AuditReport.as_dict()``), as bot.run.watch makes it."""
    status = "pass" if verdict == "removable" else "failed"
    evidence = [{"model": "Dinov2WithRegistersModel", "mode": "static", "run": 1, "status": status,
                 "max_abs_diff": 1.4e-6 if status == "pass" else None, "error": None, "seconds": 40.0,
                 "command": "exportbot export Dinov2WithRegistersModel --backend onnx --static --repro dinov2-resize"}]
    sample = [{"model": "BertModel", "backend": "onnx", "mode": "static", "repro": None, "why": ["listed"],
               "result": "regression", "ran_with": version, "pinned": {"status": "pass"},
               "candidate": {"status": "failed", "error": "RuntimeError: optimize_ir is broken", "error_type": None,
                             "command": "exportbot export BertModel --backend onnx --static"}}] * regressions
    texts = {"export_skips.toml": SKIPS.encode(), "onnx_disable_optimize.toml": b""}
    return {
        "schema": 2, "generated_at": "2026-12-05T06:00:00Z", "partial": False, "exporter_version": "abc123",
        "pins": dict(PINS), "candidate": f"onnxscript=={version}", "runs": 1, "repository": REPO, "base_commit": None,
        "registry_digest": registry_digest(texts), "selection": {"entries": ["dinov2-resize"], "workarounds": []},
        "entries": [{"id": "dinov2-resize", "list": "EXPORT_SKIPS", "models": ["Dinov2WithRegistersModel"],
                     "backend": "onnx", "scope": "static", "upstream": "https://github.com/microsoft/onnxscript/pull/2916",
                     "upstream_state": {"summary": "unknown"}, "due": True, "due_reasons": [f"candidate onnxscript=={version}"],
                     "moved_pins": {"onnxscript": ["0.7.0", version]}, "verdict": verdict,
                     "reasons": [f"{verdict} at onnxscript {version}"], "evidence": evidence}],
        "workarounds": [],
        "candidate_check": {"candidate": f"onnxscript=={version}", "environment": "layered on the pinned environment",
                            "sample": sample, "left_out": [], "regressions": regressions},
    }  # fmt: skip


@pytest.fixture
def repo(fake_github: FakeGitHub) -> Any:
    fake_github.add_repo(REPO, files={"constraints.txt": PIN_TEXT, "registry/export_skips.toml": SKIPS,
                                      "registry/onnx_disable_optimize.toml": "", "registry/verified.toml": VERIFIED})  # fmt: skip
    fake_github.add_issue(REPO, "exportbot ledger dashboard", labels=("exportbot",),
                          body="<!-- exportbot:dashboard -->\nUpdated in place by exportbot.\n\n"
                               "<!-- exportbot:dashboard-rows [] -->\n")  # fmt: skip
    return fake_github


def client(server: FakeGitHub) -> Github:
    return Github(base_url=server.url, auth=Auth.Token("ghp_FAKEtoken"), retry=None, seconds_between_requests=0,
                  seconds_between_writes=0)  # fmt: skip


def bump(server: FakeGitHub, report: dict[str, Any], tmp_path: Path, apply: bool = True) -> Any:
    """One group's watch step after its audit: read the branch, skip or plan, write."""
    moves = {"onnxscript": ("0.7.0", report["candidate"].split("==")[1])}
    run = read_bump(CONFIG, "onnxscript", client(server), tmp_path, sleep=lambda s: None)
    skipped = run.skip_reason(moves, "onnxscript")
    if skipped is not None:
        return skipped
    decision = decide_bump("onnxscript", moves, report)
    records = [Verification("dinov2-resize", datetime.date(2026, 12, 5), {"onnxscript": moves["onnxscript"][1]},
                            "abc123", "still-needed", "unknown")] if not decision.removals else []  # fmt: skip
    return propose_bump(run, decision, report, records, ["checked: 1 entry"], apply)


def writes(server: FakeGitHub) -> int:
    return sum(1 for r in server.requests if r.method != "GET")


def test_a_release_that_allows_a_removal_opens_one_bump_pr_and_a_second_run_writes_nothing(repo, tmp_path):
    outcome = bump(repo, candidate_report(), tmp_path)
    github = client(repo).get_repo(REPO)
    [pull] = list(github.get_pulls(state="open"))
    assert (pull.head.ref, pull.draft) == (BRANCH, False)
    assert pull.title == "exportbot: bump onnxscript 0.7.0 → 0.7.1, removing 1 workaround"
    assert repo.read_file(REPO, BRANCH, "constraints.txt") == PIN_TEXT.replace("onnxscript==0.7.0", "onnxscript==0.7.1")
    assert repo.read_file(REPO, BRANCH, "registry/export_skips.toml") == "# EXPORT_SKIPS\n"
    assert "dinov2-resize" not in (repo.read_file(REPO, BRANCH, "registry/verified.toml") or "")
    body = pull.body
    assert "| `onnxscript` | 0.7.0 | 0.7.1 |" in body and "### Removals this release allows (1)" in body
    assert "exportbot export Dinov2WithRegistersModel --backend onnx --static --repro dinov2-resize" in body
    assert "- **Re-run at:** torch 2.13.0, transformers 5.23.0, onnx 1.23.2, onnxscript 0.7.1" in body
    commit = github.get_git_commit(repo.branch_sha(REPO, BRANCH) or "")
    assert commit.message.startswith("exportbot: bump onnxscript 0.7.0 → 0.7.1, removing 1 workaround\n\nMoves: "
                                     "onnxscript 0.7.0 → 0.7.1\nRemoves: dinov2-resize\n")  # fmt: skip
    assert [p.sha for p in commit.parents] == [repo.branch_sha(REPO, "main")]
    dashboard = github.get_issue(1).body or ""
    assert f"`onnxscript`: onnxscript 0.7.0 → 0.7.1: open {pull.html_url}, 1 removal(s)" in dashboard
    assert outcome.applied and outcome.done[-1].startswith("updated dashboard")

    before = writes(repo)
    again = bump(repo, candidate_report(), tmp_path)
    assert again == f"#{pull.number} already proposes these versions: nothing new" and writes(repo) == before


def test_a_human_closed_bump_is_not_proposed_again_for_that_version_and_a_later_one_is(repo, tmp_path):
    bump(repo, candidate_report(), tmp_path)
    github = client(repo).get_repo(REPO)
    [first] = list(github.get_pulls(state="open"))
    rejected = repo.branch_sha(REPO, BRANCH)
    github.get_pull(first.number).edit(state="closed")
    before = writes(repo)
    assert bump(repo, candidate_report(), tmp_path) == (
        f"#{first.number} proposing these versions was closed unmerged: not proposed again (a later release is)")
    assert writes(repo) == before

    bump(repo, candidate_report(version="0.7.2"), tmp_path)
    [second] = list(github.get_pulls(state="open"))
    assert second.number != first.number and second.title.startswith("exportbot: bump onnxscript 0.7.0 → 0.7.2")
    head = github.get_git_commit(repo.branch_sha(REPO, BRANCH) or "")
    assert head.sha != rejected and [p.sha for p in head.parents] == [repo.branch_sha(REPO, "main")]


def test_a_newer_release_replaces_the_open_prs_content(repo, tmp_path):
    bump(repo, candidate_report(), tmp_path)
    bump(repo, candidate_report(version="0.7.2"), tmp_path)
    github = client(repo).get_repo(REPO)
    [pull] = list(github.get_pulls(state="open"))
    assert "0.7.2" in pull.title and "| `onnxscript` | 0.7.0 | 0.7.2 |" in pull.body and "0.7.1" not in pull.body
    head = github.get_git_commit(repo.branch_sha(REPO, BRANCH) or "")
    assert [p.sha for p in head.parents] == [repo.branch_sha(REPO, "main")]  # rebuilt: one commit on the base
    assert repo.read_file(REPO, BRANCH, "constraints.txt") == PIN_TEXT.replace("onnxscript==0.7.0", "onnxscript==0.7.2")


def test_a_regression_makes_a_draft_naming_it_with_no_removal_and_the_dashboard_shows_it(repo, tmp_path):
    bump(repo, candidate_report(regressions=1), tmp_path)
    github = client(repo).get_repo(REPO)
    [pull] = list(github.get_pulls(state="open"))
    assert pull.draft and pull.title == "exportbot: bump onnxscript 0.7.0 → 0.7.1: 1 regression (draft)"
    assert "### Regressions (1)" in pull.body and "no removal is proposed on a regressed stack" in pull.body
    assert "| `BertModel onnx/static` | failed: RuntimeError: optimize_ir is broken |" in pull.body
    assert "`exportbot export BertModel --backend onnx --static`" in pull.body and "withheld: `dinov2-resize`" in pull.body
    assert repo.read_file(REPO, BRANCH, "registry/export_skips.toml") == SKIPS  # no removal
    assert repo.read_file(REPO, BRANCH, "constraints.txt") == PIN_TEXT.replace("onnxscript==0.7.0", "onnxscript==0.7.1")
    assert "1 regression(s): BertModel onnx/static" in (github.get_issue(1).body or "")


def test_a_still_needed_entry_is_recorded_at_the_new_versions(repo, tmp_path):
    bump(repo, candidate_report(verdict="still-needed"), tmp_path)
    verified = repo.read_file(REPO, BRANCH, "registry/verified.toml") or ""
    assert 'onnxscript = "0.7.1"' in verified and "candidate =" not in verified  # at the pins once merged
    assert 'verified_on = 2026-12-05' in verified


def test_a_dry_run_reads_only_and_local_needs_no_github(repo, tmp_path):
    before = writes(repo)
    outcome = bump(repo, candidate_report(), tmp_path, apply=False)
    assert writes(repo) == before and not outcome.applied
    assert "open a PR exportbot/bump-onnxscript → main" in outcome.plan.steps()
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "export_skips.toml").write_text(SKIPS)
    (tmp_path / "registry" / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "constraints.txt").write_text(PIN_TEXT)
    run = read_bump(CONFIG, "onnxscript", None, tmp_path)
    decision = decide_bump("onnxscript", {"onnxscript": ("0.7.0", "0.7.1")}, candidate_report())
    local = propose_bump(run, decision, candidate_report(), [], [], apply=False)
    assert "-onnxscript==0.7.0\n+onnxscript==0.7.1" in local.diff and '-id = "dinov2-resize"' in local.diff


def test_publish_writes_a_recorded_run_without_auditing_again(repo, tmp_path, monkeypatch):
    """The workflow's job that may write (watch --publish) never installs a release: it plans the PR from the
    read-only job's record against the repository as it is now."""
    from click.testing import CliRunner

    import bot.cli.pr as pr_cli
    from bot.cli.watch import watch_command

    monkeypatch.setattr(pr_cli, "SECONDS_BETWEEN_WRITES", 0)
    monkeypatch.setattr(pr_cli, "SECONDS_BETWEEN_REQUESTS", 0)
    record = {"index": {}, "groups": [{
        "group": "onnxscript", "moves": {"onnxscript": ["0.7.0", "0.7.1"]}, "skipped": None, "problem": None,
        "report": candidate_report(), "checked": ["entries re-run at the candidate: 1 (1 removable)"], "records": [],
    }]}  # fmt: skip
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(record))
    (tmp_path / "pyproject.toml").write_text(f'[tool.exportbot]\nrepository = "{REPO}"\nruns = 1\n')
    options = ["--publish", str(path), "--config", str(tmp_path / "pyproject.toml"), "--github-url", repo.url, "--apply"]
    done = CliRunner().invoke(watch_command, options, env={"GITHUB_TOKEN": "ghp_FAKEtoken"})
    assert done.exit_code == 0, done.output
    [pull] = list(client(repo).get_repo(REPO).get_pulls(state="open"))
    assert pull.title == "exportbot: bump onnxscript 0.7.0 → 0.7.1, removing 1 workaround"
    assert "entries re-run at the candidate: 1 (1 removable)" in pull.body
    again = CliRunner().invoke(watch_command, options, env={"GITHUB_TOKEN": "ghp_FAKEtoken"})
    assert again.exit_code == 0 and "already proposes these versions" in again.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"groups": [{"group": "x", "report": {"entries": []}}]}')  # no records, no moves
    refused = CliRunner().invoke(watch_command, ["--publish", str(bad), "--config", str(tmp_path / "pyproject.toml")])
    assert refused.exit_code == 2 and "not a watch record" in refused.output


def test_a_release_that_cannot_be_installed_beside_the_pins_is_one_line_and_not_tried(tmp_path, monkeypatch):
    """Real pip against a local index that lists the release but cannot satisfy it beside the pins (its wheel
    asks for a numpy no index holds): the group's run ends with pip's reason in one line, nothing re-run."""
    from bot.audit.releases import GroupCandidate
    from bot.run.watch import WatchSettings, run_group
    from exporters.ledger import Ledger

    stem = "onnxscript-0.7.9"
    with zipfile.ZipFile(tmp_path / f"{stem}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{stem}.dist-info/METADATA", "Metadata-Version: 2.1\nName: onnxscript\nVersion: 0.7.9\n"
                                                     "Requires-Dist: numpy>=99\n")  # fmt: skip
        wheel.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{stem}.dist-info/RECORD", "")
    pins = {"onnxscript": "0.7.2"}
    with PackageIndex(tmp_path) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        candidate = GroupCandidate("onnxscript", ("onnxscript",), {"onnxscript": ("0.7.2", "0.7.9")})
        settings = WatchSettings(tmp_path, "onnxscript==0.7.2\n", 60, 1, 0, tmp_path / "venvs")
        run = run_group(candidate, Ledger(()), None, pins, {}, settings, lambda *a, **k: pytest.fail("audited"))  # type: ignore[arg-type]
    assert run.report is None and run.reruns == 0
    assert run.problem is not None and "\n" not in run.problem
    assert run.problem.startswith("onnxscript==0.7.9 cannot be installed beside the other pins: ERROR: Cannot install")


def test_the_candidate_audit_takes_what_the_moved_packages_touch_workarounds_by_their_dependency(tmp_path):
    """Every ledger entry whose backend stack has a moved package, and every workaround whose stack or declared
    dependency has one (a dynamo workaround with dependency = onnxscript is re-run for an onnxscript move)."""
    from bot.audit.plan import Export, workaround_subject
    from bot.audit.releases import GroupCandidate
    from bot.run.watch import moved_subjects
    from exporters.ledger import load_ledger
    from exporters.utils import Workaround

    (tmp_path / "export_skips.toml").write_text(SKIPS + ENTRY_TEXT.replace("dinov2-resize", "dynamo-only").replace(
        'backend = "onnx"', 'backend = "dynamo"'))  # fmt: skip
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    ledger = load_ledger(tmp_path)

    def workaround(name: str, backend: str, dependency: str | None) -> Any:
        found = Workaround(name, "patch", backend, lambda original: original, (), None, dependency)
        return found, workaround_subject(found, [Export("BertModel", backend, False)])

    workarounds = [workaround("_onnx_fix", "onnx", "onnxscript"), workaround("_dynamo_for_onnxscript", "dynamo", "onnxscript"),
                   workaround("_dynamo_torch", "dynamo", "torch")]  # fmt: skip
    moved = GroupCandidate("onnxscript", ("onnxscript",), {"onnxscript": ("0.7.0", "0.7.1")})
    entries, touched = moved_subjects(moved, ledger, workarounds)
    assert entries == ["dinov2-resize"]
    assert [w.name for w, _ in touched] == ["_onnx_fix", "_dynamo_for_onnxscript"]
