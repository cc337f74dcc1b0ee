"""``--json`` of ``sweep run/triage/coverage``, ``pr`` and ``bisect``: one JSON document on stdout and nothing
else, its values those of a real run (bot/cli/json_output.py; shapes in docs/sweep-results.md and
docs/audit-report.md).

The sweep runs for real in a subprocess (a warm-fork sweep of BertModel through Dynamo, GPT2Model made to
segfault, AlbertModel gated by a test ledger entry), once per module; triage and coverage read its results.
``pr`` plans against a real git checkout (--local) and writes through PyGithub to tests/fake_github.py;
``bisect`` searches with injected release lists, environments and export runners (no network).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, Fault, fake_github_fixture  # noqa: F401 (the fake_github fixture)
from test_audit import skip_entry, write_registry
from test_shrink import REPO, TOKEN, client, invoke, no_throttle, server_fixture  # noqa: F401 (fixtures)
from test_shrink_edges import FIRST, OPTIMIZE, VERIFIED, checkout, git
from test_sweep import SKIPS_TOML  # gates AlbertModel (albert-gated)

from bot.cli.bisect import bisect_command
from bot.cli.pr import PR_JSON_KEYS, pr_command, run_pr
from bot.cli.sweep import sweep_group
from bot.run import bisect as bisect_module
from bot.run.venvs import Uninstallable
from bot.run.worker import TEST_CRASH_ENV
from bot.sweep.results import read_results
from exporters.ledger import load_ledger

ROOT = Path(__file__).resolve().parents[1]
STATIC = {"backend": "dynamo", "mode": "static"}


DATA_KEYED = {"counts", "causes", "outcomes"}  # keyed by data (statuses, cause ids) or whole outcome records


def documented(doc: str, marker: str) -> Any:
    """The first ```json example after ``marker`` in docs/``doc``: the shape the page promises."""
    text = (ROOT / "docs" / doc).read_text()
    after = text[text.index(marker):]
    return json.loads(after.split("```json\n", 1)[1].split("```", 1)[0])


def assert_same_shape(real: Any, promised: Any, where: str = "") -> None:
    """Every object has the documented keys, no more and no fewer, down through lists of objects."""
    if isinstance(promised, dict):
        assert isinstance(real, dict) and list(real) == list(promised), f"{where}: {list(real)} != {list(promised)}"
        for key in promised:
            if key not in DATA_KEYED and real[key] is not None and promised[key] is not None:
                assert_same_shape(real[key], promised[key], f"{where}.{key}")
    elif isinstance(promised, list) and promised and real:
        for item in real:
            assert_same_shape(item, promised[0], f"{where}[]")


# ── sweep ──
@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``exportbot sweep run --json`` in a real process: its stdout, stderr, and the results file it wrote."""
    tmp = tmp_path_factory.mktemp("sweep-json")
    registry = tmp / "registry"
    registry.mkdir()
    (registry / "export_skips.toml").write_text(SKIPS_TOML)
    (registry / "onnx_disable_optimize.toml").write_text("")
    classes = tmp / "classes.txt"
    classes.write_text("BertModel\nGPT2Model  # made to segfault\nAlbertModel  # gated by albert-gated\n")
    results = tmp / "results.jsonl"
    env = os.environ | {"EXPORTBOT_REGISTRY": str(registry), TEST_CRASH_ENV: "GPT2Model", "HF_HUB_OFFLINE": "1",
                        "PYTHONPATH": str(ROOT), "COLUMNS": "80"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "bot", "sweep", "run", "--classes", str(classes), "--backend", "dynamo", "--static",
         "--jobs", "1", "--timeout", "180", "--results", str(results), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {"stdout": done.stdout, "stderr": done.stderr, "results": results, "tmp": tmp}


def test_sweep_run_json_is_all_of_stdout_and_matches_the_records(swept: dict[str, Any]) -> None:
    data = json.loads(swept["stdout"])  # the whole of stdout is one document: no table, no progress
    statuses = {r["model"]: r["status"] for r in read_results(swept["results"])}
    assert statuses == {"BertModel": "pass", "GPT2Model": "crashed", "AlbertModel": "skipped"}
    assert data == {
        "results": str(swept["results"]), "classes": 3, "exports_run": 3, "already_recorded": 0, "records": 3,
        "summary": [{**STATIC, "total": 3, "counts": {"pass": 1, "crashed": 1, "skipped": 1},
                     "pass_rate": 0.3333, "built_pass_rate": 0.3333}],
        "triage": {"failures": 1, "groups_total": 1, "groups": [
            {"signature": "crashed: SIGSEGV", "count": 1, "exports": [{"model": "GPT2Model", **STATIC}]}]},
    }  # fmt: skip
    assert "3 classes, 3 exports to run (0 already recorded)" in swept["stderr"]  # progress stays on stderr
    assert_same_shape(data, documented("sweep-results.md", "`exportbot sweep run ... --json`"))


def _failing_record(model: str, error: str) -> dict[str, Any]:
    return {"schema": 1, "model": model, "backend": "onnx", "dynamic": False, "mode": "static",
            "status": "failed", "seconds": 1.0, "error": error, "error_type": "RuntimeError", "versions": {}}  # fmt: skip


def test_sweep_triage_json_groups_every_failure_of_the_files(swept: dict[str, Any]) -> None:
    extra = swept["tmp"] / "onnx.jsonl"
    error = "Cannot view a tensor with shape [2, 8, 64]"  # one bug in two models: one signature
    extra.write_text("".join(json.dumps(_failing_record(m, error)) + "\n" for m in ("T5Model", "MT5Model")))
    result = CliRunner().invoke(sweep_group, ["triage", str(swept["results"]), str(extra), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    onnx = [{"model": m, "backend": "onnx", "mode": "static"} for m in ("MT5Model", "T5Model")]
    assert data == {"records": 5, "failures": 3, "groups_total": 2, "groups": [
        {"signature": "failed: RuntimeError: Cannot view a tensor with shape [N, N, N]", "count": 2, "exports": onnx},
        {"signature": "crashed: SIGSEGV", "count": 1, "exports": [{"model": "GPT2Model", **STATIC}]},
    ]}  # fmt: skip
    assert_same_shape(data, documented("sweep-results.md", "`exportbot sweep triage FILES... --json`"))
    top = json.loads(CliRunner().invoke(sweep_group, ["triage", str(extra), str(swept["results"]), "--json",
                                                      "--top", "1"]).stdout)  # fmt: skip
    assert top["groups_total"] == 2 and [g["count"] for g in top["groups"]] == [2]
    table = CliRunner().invoke(sweep_group, ["triage", str(swept["results"]), str(extra)])
    assert table.exit_code == 0 and "Top failure groups (2 of 2)" in table.stdout  # the text shows the same groups


def test_sweep_coverage_json_says_what_it_wrote_and_why_the_rest_do_not_pass(swept: dict[str, Any]) -> None:
    out = swept["tmp"] / "coverage.md"
    census = swept["tmp"] / "census.jsonl"
    census.write_text('{"model": "BertModel", "status": "ok"}\n{"model": "GPT2Model", "status": "ok"}\n'
                      '{"model": "FooModel", "status": "build-error", "error": "no config"}\n')  # fmt: skip
    causes = swept["tmp"] / "causes.toml"
    causes.write_text('[[cause]]\nid = "gpt2-test-segfault"\nsignature = "crashed: SIGSEGV"\nmodels = ["GPT2*"]\n'
                      'level = "resources"\nreason = "the test makes it segfault"\naction = "none"\n')  # fmt: skip
    args = ["coverage", str(swept["results"]), "--out", str(out), "--json"]
    result = CliRunner().invoke(sweep_group, [*args, "--census", str(census), "--causes", str(causes)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert_same_shape(data, documented("sweep-results.md", "`exportbot sweep coverage FILES... --json`"))
    assert data == {
        "out": str(out), "exports": 3,
        "summary": [{**STATIC, "total": 3, "counts": {"pass": 1, "crashed": 1, "skipped": 1},
                     "pass_rate": 0.3333, "built_pass_rate": 0.3333}],
        "census": {"classes": 3, "counts": {"ok": 2, "build-error": 1}},
        "not_passing": {"ledger": 1, "builder_gap": 0, "causes": {"gpt2-test-segfault": 1}, "untriaged": []},
    }  # fmt: skip
    text = out.read_text()
    assert "| BertModel | dynamo | static | pass |" in text and "| GPT2Model | dynamo | static | crashed |" in text
    assert "| gpt2-test-segfault | resources | 1 |" in text  # the file says what the JSON says
    plain = json.loads(CliRunner().invoke(sweep_group, [*args, "--causes", str(swept["tmp"] / "none.toml")]).stdout)
    assert plain["census"] is None and plain["not_passing"] == {"ledger": 1, "builder_gap": 0, "causes": {},
        "untriaged": [{"model": "GPT2Model", **STATIC, "signature": "crashed: SIGSEGV"}]}  # fmt: skip


# ── pr ──
def test_pr_local_json_is_the_plan_the_text_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = checkout(tmp_path)
    monkeypatch.chdir(root)
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(FIRST))
    result = CliRunner().invoke(pr_command, ["--report", str(report_file), "--local", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert tuple(data) == PR_JSON_KEYS
    assert_same_shape(data, documented("audit-report.md", "### `exportbot pr --json`"))
    assert data["status"] == "planned" and data["against"] == f"{root} at {git(root, 'rev-parse', 'HEAD')[:12]}"
    assert {e["id"]: e["in_pr"] for e in data["entries"]} == {
        "t5-cast-folding": True, "bart-gather-fold": False, "led-global-attention": False}  # fmt: skip
    assert data["files"] == [OPTIMIZE, VERIFIED]
    assert f"--- a/{OPTIMIZE}" in data["diff"] and '-id = "t5-cast-folding"' in data["diff"]
    assert data["commit_message"].startswith("exportbot: remove 1 workaround ledger entry")
    assert "<!-- exportbot:entry {" in data["body"] and data["pr_url"] is None and data["stopped"] is None
    text = CliRunner().invoke(pr_command, ["--report", str(report_file), "--local"]).stdout
    assert data["diff"] in text and f"--- PR title: {data['title']}\n" in text and data["body"] in text
    assert [f"would {step}" for step in data["steps"]] == [s for s in text.splitlines() if s.startswith("would ")]
    head = git(root, "rev-parse", "HEAD")[:12]
    assert data["steps"] == [f"commit the removals (parents {head}); create branch exportbot/shrink",
                             "open a PR exportbot/shrink → main", "add labels exportbot, ledger-shrink"]  # fmt: skip

    # `audit --json - --open-prs`: the report is stdout, so the PR's text goes to stderr, all of it
    capsys.readouterr()
    assert run_pr(FIRST, apply=None, local=True, text_to_stderr=True) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and data["diff"] in printed.err and data["body"] in printed.err


def test_pr_json_after_applying_and_after_a_stop(server: FakeGitHub, tmp_path: Path) -> None:
    applied = invoke(server, tmp_path, FIRST, "--apply", "--json", env={"GITHUB_TOKEN": TOKEN})
    assert applied.exit_code == 0, applied.output
    data = json.loads(applied.stdout)
    [pull] = client(server).get_repo(REPO).get_pulls(state="open")
    assert data["status"] == "applied" and data["pr_url"] == pull.html_url and data["against"] is None
    branch = client(server).get_repo(REPO).get_git_ref("heads/exportbot/shrink").object.sha
    assert data["steps"] == [f"pushed {branch[:12]} to exportbot/shrink", f"opened #{pull.number}",
                             f"labelled #{pull.number}: exportbot, ledger-shrink"]  # fmt: skip
    assert TOKEN not in applied.stdout

    server.inject(f"/repos/{REPO}/git/trees/*", Fault.malformed(), times=None)
    stopped = invoke(server, tmp_path, FIRST, "--apply", "--json", env={"GITHUB_TOKEN": TOKEN})
    assert stopped.exit_code == 1
    data = json.loads(stopped.stdout)
    assert tuple(data) == PR_JSON_KEYS and data["status"] == "stopped" and data["entries"] is None
    assert data["stopped"]["step"].startswith("read the tree of") and "malformed JSON" in data["stopped"]["problem"]
    assert data["stopped"]["written"] == [] and data["stopped"]["message"] in stopped.stderr


# ── bisect ──
@pytest.fixture
def bisect_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Torch releases after the 2.13.0 pin: 2.15.0 will not install, the bug is fixed in 2.14.1.

    The real :class:`bot.run.bisect.ExportProbe` runs; only its environments and export children are injected:
    each answers as an ``export --repro`` child at that version would."""
    registry = write_registry(tmp_path, [skip_entry("bert", None)])
    monkeypatch.setattr(bisect_module, "released_versions", lambda package: ["2.12.0", "2.13.0", "2.14.0",
                                                                             "2.14.1", "2.15.0"])  # fmt: skip

    def ensure_venv(directory: Path, constraints: str, requirements: Any, base: Any = None) -> Path:
        if "torch==2.15.0" in constraints:
            raise Uninstallable("torch 2.15.0 conflicts with the pins")
        return directory / "bin" / "python"

    def runner(timeout: float, **where: Any) -> Any:
        version = Path(where["python"]).parents[1].name.split("-")[1]

        def run(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
            fixed = version >= "2.14.1"
            return {"model": model, "backend": backend, "status": "pass" if fixed else "failed",
                    "error": None if fixed else "Could not guard on data-dependent expression Eq(u0, 0)",
                    "error_type": None if fixed else "GuardOnDataDependentSymNode", "versions": {"torch": version}}  # fmt: skip

        return run

    monkeypatch.setattr(bisect_module, "ensure_venv", ensure_venv)
    monkeypatch.setattr(bisect_module, "subprocess_runner", runner)
    return registry


def test_bisect_json_on_stdout_is_the_search_and_the_fix(bisect_world: Path, tmp_path: Path) -> None:
    args = ["bert", "--registry", str(bisect_world), "--cache-dir", str(tmp_path / "venvs")]
    result = CliRunner().invoke(bisect_command, [*args, "--json", "-", "--no-write"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the table and every line went to stderr
    assert "first passing release 2.14.1" in result.stderr and "bisect of torch after 2.13.0" in result.stderr
    assert_same_shape(data, documented("audit-report.md", "### `exportbot bisect --json FILE`"))
    probes = [(p["version"], p["outcome"]) for p in data["probes"]]
    assert probes == [("2.15.0", "uninstallable"), ("2.14.1", "pass"), ("2.14.0", "fail")]
    assert {k: data[k] for k in ("target", "kind", "package", "pinned", "candidates", "dry_run", "exports")} == {
        "target": "bert", "kind": "entry", "package": "torch", "pinned": "2.13.0",
        "candidates": ["2.14.0", "2.14.1", "2.15.0"], "dry_run": False,
        "exports": [{"model": "BertModel", "backend": "dynamo", "mode": "static"}]}  # fmt: skip
    assert (data["first_passing"], data["last_failing"], data["untested"]) == ("2.14.1", "2.14.0", [])
    assert (data["fixed_in"], data["written_to"]) == ("torch>=2.14.1", None)  # --no-write
    assert [(o["probed_version"], o["status"]) for o in data["outcomes"]] == [("2.14.1", "pass"), ("2.14.0", "failed")]
    assert load_ledger(bisect_world).by_id("bert").fixed_in is None

    saved = tmp_path / "bisect.json"
    written = CliRunner().invoke(bisect_command, [*args, "--json", str(saved)])
    assert written.exit_code == 0 and "bisect of torch after 2.13.0" in written.stdout  # a file: the table stays
    entry = load_ledger(bisect_world).by_id("bert")
    assert entry.fixed_in == "torch>=2.14.1"
    assert json.loads(saved.read_text()) == data | {"written_to": str(entry.path)}


def test_bisect_dry_run_json_lists_the_candidates_with_every_key(bisect_world: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(bisect_command, ["bert", "--registry", str(bisect_world), "--dry-run", "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dry_run"] is True and data["candidates"] == ["2.14.0", "2.14.1", "2.15.0"]
    assert (data["probes"], data["first_passing"], data["fixed_in"]) == ([], None, None)
    assert "3 newer release(s): 2.14.0, 2.14.1, 2.15.0" in result.stderr


def test_bad_input_with_json_is_one_line_on_stderr_and_nothing_on_stdout(bisect_world: Path) -> None:
    result = CliRunner().invoke(bisect_command, ["nope", "--registry", str(bisect_world), "--json", "-"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "'nope' is neither a ledger entry" in result.stderr


# ── every command ──
PRINTS_A_TABLE = {"export", "list-workarounds", "audit", "sweep run", "sweep triage", "sweep coverage", "pr", "bisect",
                  "generate", "watch", "upstream status", "upstream find"}  # fmt: skip
# messages, no table (pin-check run writes its JSON result to --out: the artifact the publish job reads)
PRINTS_LINES = {"lint", "sweep merge", "workarounds index", "workarounds remove", "pin-check run", "pin-check publish",
                "tiny-checkpoint", "upstream draft", "upstream verify", "upstream render", "upstream link"}


def test_every_command_that_prints_a_table_takes_json() -> None:
    """Issue #18: ``--json`` for every command that prints a table. A new command must be sorted into one set."""
    import click

    from bot.cli.main import main

    def leaves(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
        found: dict[str, click.Command] = {}
        for name, command in group.commands.items():
            path = f"{prefix} {name}".strip()
            found |= leaves(command, path) if isinstance(command, click.Group) else {path: command}
        return found

    commands = leaves(main)
    assert set(commands) == PRINTS_A_TABLE | PRINTS_LINES
    with_json = {path for path, command in commands.items() if any("--json" in p.opts for p in command.params)}
    assert with_json == PRINTS_A_TABLE
