"""Necessity probes of registered workarounds: the index, ``audit --workarounds``, removal, bisect.

Two probes export for real: T5 through ONNX without ``_fix_reshape_of_strided`` in an isolated
subprocess (still needed: the recorded "Cannot view a tensor with shape" failure), and a throwaway
workaround registered by this file that fires in BertModel's Dynamo export but changes nothing
(removable, then deleted from its source file). Everything else runs on small fixtures and fakes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import fake_github_fixture  # noqa: F401 (provides the fake_github fixture)
from test_audit import PINS, REPO, tracker, web, write_registry

from bot.audit.pins import constraints_with
from bot.audit.plan import Export, workaround_subject
from bot.audit.releases import newer_versions
from bot.audit.workaround_index import (
    FiredExport,
    build_index,
    index_from_dict,
    load_index,
    probe_subject,
    select_probes,
)
from bot.audit.workaround_removal import NotSelfContained, remove_workaround_source, remove_workaround_text
from bot.cli.audit import audit_command
from bot.cli.bisect import bisect_command
from bot.cli.workarounds import workarounds_group
from bot.outcome import ExportRequest
from bot.run import bisect as bisect_module
from bot.run.audit_run import EXIT_NOTHING, EXIT_REMOVABLE, run_audit
from bot.run.bisect import (
    FAILED,
    PASSED,
    UNINSTALLABLE,
    Probe,
    first_passing,
    released_versions,
)
from bot.run.index import parse_index_versions
from bot.run.reruns import subprocess_runner
from bot.run.runner import export_one
from bot.run.venvs import Uninstallable, ensure_venv
from bot.sweep.records import SCHEMA
from bot.sweep.results import read_results
from exporters import load_all_workarounds
from exporters import utils as workaround_registry
from exporters.ledger import load_ledger
from exporters.utils import all_workarounds

ROOT = Path(__file__).resolve().parents[1]
RESHAPE_FIX = "_fix_reshape_of_strided"


def record(model: str, mode: str, status: str, fired: dict[str, int]) -> dict[str, Any]:
    """A sweep record with the fields the index reads (docs/sweep-results.md)."""
    return {"schema": SCHEMA, "model": model, "backend": "onnx", "mode": mode, "dynamic": mode == "dynamic",
            "status": status, "workarounds_fired": fired, "versions": {"torch": "2.13.0"}}  # fmt: skip


def workaround(name: str) -> workaround_registry.Workaround:
    load_all_workarounds()
    return next(w for w in all_workarounds() if w.name == name)


# ── Real probe of a real workaround ──
def test_t5_onnx_without_reshape_fix_is_still_needed(tmp_path, fake_github):
    number = fake_github.add_issue(REPO)  # open upstream; the workaround was never verified: due
    subject = workaround_subject(
        workaround(RESHAPE_FIX), [Export("T5ForConditionalGeneration", "onnx", False)]
    )
    subject = dataclasses.replace(subject, upstream=web(number))
    ledger = load_ledger(write_registry(tmp_path, []))
    report = run_audit(
        ledger, tracker(fake_github), PINS, {}, run_export=lambda *_: pytest.fail("no ledger re-run expected"),
        runs=1, workarounds=[(workaround(RESHAPE_FIX), subject)],
        probe_runner=lambda name: subprocess_runner(300, without=(name,)),
    )  # fmt: skip
    [row] = report.workarounds
    assert row.verdict.verdict == "still-needed", row.verdict
    assert "Cannot view a tensor with shape" in row.verdict.reasons[0]  # the error is shown
    [run] = row.verdict.evidence
    assert run["model"] == "T5ForConditionalGeneration" and run["status"] == "failed"
    data = report.as_dict()
    assert data["entries"] == [] and data["workarounds"][0]["id"] == RESHAPE_FIX
    assert data["workaround_counts"]["still-needed"] == 1 and report.exit_code() == EXIT_NOTHING


# ── A workaround proven unnecessary: fires, is not needed, is removable, is deleted ──
THROWAWAY = "_throwaway_sdpa_passthrough"
THROWAWAY_SOURCE = '''\
"""Throwaway workarounds for tests/test_probes.py."""

from exporters.utils import register_patch


def _unrelated_helper():
    return 1


# Kept: a comment above the workaround is not deleted with it.
@register_patch(
    "dynamo",
    "torch.nn.functional.scaled_dot_product_attention",
    upstream="{upstream}",
    dependency="torch",
)
def {name}(original):
    """Pass SDPA through unchanged: the bug it worked around was fixed long ago."""
    return original


def _another_helper():
    return 2
'''


def inprocess_runner(without: tuple[str, ...]):
    """Exports in this process: the throwaway is registered only here, not in a fresh subprocess."""

    def run(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
        return export_one(ExportRequest(model, backend, dynamic, without=without)).as_dict()

    return run


def test_unneeded_workaround_is_removable_and_deleted_from_source(tmp_path, fake_github, monkeypatch):
    number = fake_github.add_issue(REPO, state="closed", state_reason="completed")
    source = tmp_path / "throwaway_workarounds.py"
    source.write_text(THROWAWAY_SOURCE.format(upstream=web(number), name=THROWAWAY))
    load_all_workarounds()
    monkeypatch.setattr(
        workaround_registry, "_PATCHES", {k: list(v) for k, v in workaround_registry._PATCHES.items()}
    )
    spec = importlib.util.spec_from_file_location("throwaway_workarounds", source)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers the throwaway
    throwaway = workaround(THROWAWAY)

    # The "sweep": one export with every workaround; the throwaway fires in it.
    outcome = inprocess_runner(())("BertModel", "dynamo", False)
    assert outcome["status"] == "pass" and outcome["workarounds_fired"].get(THROWAWAY), outcome
    results = tmp_path / "sweep.jsonl"
    results.write_text(json.dumps(outcome | {"schema": SCHEMA, "mode": "static"}) + "\n")
    index = build_index(read_results(results), {THROWAWAY: {"kind": "patch", "backend": "dynamo"}})
    subject = probe_subject(throwaway, index)
    assert subject.exports == (Export("BertModel", "dynamo", False),)

    ledger = load_ledger(write_registry(tmp_path, []))
    report = run_audit(ledger, tracker(fake_github), PINS, {}, run_export=inprocess_runner(()), runs=1,
                       workarounds=[(throwaway, subject)], probe_runner=lambda name: inprocess_runner((name,)))  # fmt: skip
    [row] = report.workarounds
    assert row.verdict.verdict == "removable", row.verdict
    assert "closed:completed" in row.verdict.reasons[0] and report.exit_code() == EXIT_REMOVABLE
    # This test file names the throwaway too, so the shrink PR would list it to delete by hand.
    assert "tests/test_probes.py" in (row.as_dict()["removal"] or "")
    assert row.as_dict()["source"] == str(source.resolve())  # outside the repository: an absolute path

    before = source.read_text()
    after = remove_workaround_source(source, THROWAWAY)
    assert source.read_text() == after and THROWAWAY not in after and "register_patch(" not in after
    cut = before.index('@register_patch(\n    "dynamo"')
    end = before.index("def _another_helper")
    assert after == before[:cut] + "\n\n" + before[end:]  # only the decorated function went
    assert "# Kept: a comment above" in after and "_unrelated_helper" in after


# ── Index ──
def test_index_from_jsonl_fixture_cli(tmp_path):
    results = tmp_path / "onnx.jsonl"
    records = [
        record("BertModel", "static", "pass", {RESHAPE_FIX: 2, "_gone_fix": 1}),
        record("BertModel", "dynamic", "failed", {RESHAPE_FIX: 2}),
        record("T5Model", "static", "pass", {}),
        record("T5Model", "static", "pass", {RESHAPE_FIX: 6}),  # a rerun: the later record wins
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "docs" / "workaround-index.md"
    result = CliRunner().invoke(workarounds_group, ["index", str(results), "--out", str(out)])
    assert result.exit_code == 0, result.output
    index = load_index(out.with_suffix(".json"))
    assert index.exports_of(RESHAPE_FIX) == (
        FiredExport("BertModel", "onnx", "dynamic", "failed", 2),
        FiredExport("BertModel", "onnx", "static", "pass", 2),
        FiredExport("T5Model", "onnx", "static", "pass", 6),
    )
    rows = {row.name: row for row in index.rows}
    assert "_gone_fix" not in rows and index.removed == {"_gone_fix": 1}  # fired, deleted since: counted only
    never_fired = {w.name for w in all_workarounds()} - {RESHAPE_FIX}
    assert never_fired and all(rows[name].exports == () for name in never_fired)  # registered, never fired
    markdown = out.read_text()
    assert f"| `{RESHAPE_FIX}` | fx_node_fix | onnx |" in markdown and "since these records were made (fired in that many exports): `_gone_fix` (1)." in markdown
    assert index_from_dict(json.loads(out.with_suffix(".json").read_text()), "x") == index


def test_index_without_results_reads_the_committed_record_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shards = tmp_path / "sweeps" / "catalogue"
    shards.mkdir(parents=True)
    (shards / "onnx-static-shard-1-of-1.jsonl").write_text(json.dumps(record("BertModel", "static", "pass", {RESHAPE_FIX: 2})) + "\n")
    (shards / "onnx-static-extra.rerun.jsonl").write_text(json.dumps(record("T5Model", "static", "pass", {RESHAPE_FIX: 1})) + "\n")
    result = CliRunner().invoke(workarounds_group, ["index", "--out", "index.md"])
    assert result.exit_code == 0, result.output
    index = load_index(tmp_path / "index.json")
    assert index.exports_of(RESHAPE_FIX) == (FiredExport("BertModel", "onnx", "static", "pass", 2),)
    assert index.sources == ("sweeps/catalogue/*-shard-*-of-*.jsonl", "sweeps/generation/*-shard-*-of-*.jsonl")
    assert (tmp_path / "index.md").read_text().splitlines()[2].startswith(
        "Generated by `exportbot workarounds index --out index.md`")


def test_probe_selection_spreads_over_modes_and_classes_and_skips_failures():
    exports = [FiredExport(m, "onnx", mode, status, 1)
               for m, mode, status in [("A", "dynamic", "failed"), ("A", "static", "pass"), ("B", "static", "pass"),
                                       ("C", "dynamic", "pass"), ("C", "static", "pass"), ("D", "static", "pass")]]  # fmt: skip
    assert select_probes(exports, 3) == [
        Export("A", "onnx", False),
        Export("C", "onnx", True),
        Export("B", "onnx", False),
    ]
    assert len(select_probes(exports, 10)) == 5


def test_a_generation_export_is_indexed_but_never_a_probe():
    exports = [FiredExport("AGen", "onnx", "generate", "pass", 1), FiredExport("B", "onnx", "static", "pass", 1)]
    assert select_probes(exports, 3) == [Export("B", "onnx", False)]  # not AGen as a static export


def test_audit_cli_workarounds_without_indexed_exports_is_unknown(tmp_path, fake_github):
    registry = write_registry(tmp_path, [])
    index_file = tmp_path / "index.json"
    index_file.write_text(json.dumps({"schema": 1, "workarounds": []}))
    report_file = tmp_path / "report.json"
    args = ["--registry", str(registry), "--github-url", fake_github.url, "--web-host", "github.com",
            "--workarounds", "--index", str(index_file), "--entry", RESHAPE_FIX,
            "--json", str(report_file)]  # fmt: skip
    result = CliRunner().invoke(audit_command, args)
    assert result.exit_code == EXIT_NOTHING, result.output
    [row] = json.loads(report_file.read_text())["workarounds"]
    assert row["verdict"] == "unknown" and "fired in no passing export" in row["reasons"][-1]
    unknown = CliRunner().invoke(audit_command, ["--registry", str(registry), "--entry", RESHAPE_FIX])
    assert unknown.exit_code == 2 and "needs --workarounds" in unknown.output


# ── Removal from source ──
def test_removal_from_the_onnx_exporter_keeps_every_other_byte(tmp_path):
    copy = tmp_path / "exporter_onnx.py"
    original = (ROOT / "exporters" / "onnx" / "exporter.py").read_text()
    copy.write_text(original)
    edited = remove_workaround_source(copy, RESHAPE_FIX, write=False)
    lines = original.splitlines(keepends=True)
    definition = next(i for i, line in enumerate(lines) if line.startswith(f"def {RESHAPE_FIX}("))
    start = definition - 1  # its one-line decorator
    assert lines[start].startswith("@register_fx_node_fix(")
    # Up to the next top-level statement; the blank lines before that statement stay.
    end = next(i for i in range(definition + 1, len(lines)) if lines[i][:1] not in ("", " ", "\n"))
    while lines[end - 1] == "\n":
        end -= 1
    assert f"def {RESHAPE_FIX}" in "".join(lines[start:end])
    assert edited == "".join(lines[:start] + lines[end:]) and copy.read_text() == original


def test_removal_refuses_what_is_not_self_contained(tmp_path):
    source = textwrap.dedent("""\
        @register_patch("onnx", "torch.x")
        def _used(original):
            return original


        TABLE = {"fix": _used}


        def _plain():
            return 1
    """)
    with pytest.raises(NotSelfContained, match=r"used elsewhere in the module: line 6"):
        remove_workaround_text(source, "_used")
    with pytest.raises(NotSelfContained, match="not registered"):
        remove_workaround_text(source, "_plain")
    with pytest.raises(NotSelfContained, match="no top-level function"):
        remove_workaround_text(source, "_missing")
    module, caller = tmp_path / "fixes.py", tmp_path / "caller.py"
    module.write_text(source.replace('TABLE = {"fix": _used}', "TABLE = {}"))
    caller.write_text("from fixes import _used\n")
    with pytest.raises(NotSelfContained, match=r"caller\.py:1"):
        remove_workaround_source(module, "_used", elsewhere=[caller])
    assert "_used" in module.read_text()  # nothing written


def test_removal_takes_a_standalone_registration_and_its_blank_lines():
    source = 'import x\n\n\ndef _fix(program):\n    return None\n\n\nregister_fx_program_fix("onnx")(_fix)\n\n\nY = 1\n'
    assert remove_workaround_text(source, "_fix") == "import x\n\n\nY = 1\n"


# ── Bisect: the pure search on a fake index ──
def fake_probe(passing_from: str, uninstallable: tuple[str, ...] = ()):
    tried: list[str] = []

    def probe(version: str) -> Probe:
        tried.append(version)
        if version in uninstallable:
            return Probe(version, UNINSTALLABLE, "ResolutionImpossible")
        passes = tuple(map(int, version.split("."))) >= tuple(map(int, passing_from.split(".")))
        return Probe(version, PASSED if passes else FAILED)

    return probe, tried


VERSIONS = ["0.7.3", "0.7.4", "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.9.1", "1.0.0"]


@pytest.mark.parametrize("fixed", VERSIONS)
def test_first_passing_finds_every_fix_in_few_probes(fixed):
    probe, tried = fake_probe(fixed)
    result = first_passing(VERSIONS, probe)
    assert result.first_passing == fixed and result.untested == ()
    assert len(tried) <= 4 and len(set(tried)) == len(tried)


def test_first_passing_when_nothing_passes_probes_only_the_newest():
    probe, tried = fake_probe("9.9.9")
    result = first_passing(VERSIONS, probe)
    assert result.first_passing is None and result.last_failing == "1.0.0" and tried == ["1.0.0"]


def test_first_passing_skips_uninstallable_versions():
    probe, tried = fake_probe("0.8.1", uninstallable=("1.0.0", "0.8.0", "0.8.2"))
    result = first_passing(VERSIONS, probe)
    assert tried[:2] == ["1.0.0", "0.9.1"]  # the newest cannot be installed: the next newest is probed
    assert result.first_passing == "0.8.1" and result.last_failing == "0.7.4"
    assert result.untested == ("0.8.0",)  # the fix may be in 0.8.0: reported, not guessed
    assert set(result.skipped) <= {"1.0.0", "0.8.0", "0.8.2"}


def test_first_passing_all_uninstallable():
    probe, _ = fake_probe("0.8.0", uninstallable=tuple(VERSIONS))
    result = first_passing(VERSIONS, probe)
    assert result.first_passing is None and result.last_failing is None and result.untested == tuple(VERSIONS)


def test_version_listing_and_constraints():
    output = (
        "torch (2.15.0)\nAvailable versions: 2.15.0, 2.14.1, 2.14.0rc1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.0\n"
    )
    assert newer_versions(parse_index_versions(output), "2.13.0") == ["2.14.0", "2.14.1", "2.15.0"]
    pins = "# comment\ntorch==2.13.0  # trailing\nONNXScript==0.7.2\n"
    assert (  # only the version changes: the name as written and comments stay (the bump PR's minimal diff)
        constraints_with(pins, "onnxscript", "0.8.0")
        == "# comment\ntorch==2.13.0  # trailing\nONNXScript==0.8.0\n"
    )
    assert constraints_with(pins, "torch", "2.14.0") == "# comment\ntorch==2.14.0  # trailing\nONNXScript==0.7.2\n"
    assert constraints_with("torch==2.13.0\n", "onnx", "1.24.0") == "torch==2.13.0\nonnx==1.24.0\n"


def test_bisect_command_writes_fixed_in_into_the_ledger_entry(tmp_path, monkeypatch):
    from test_audit import skip_entry

    registry = write_registry(tmp_path, [skip_entry("bert", None)])
    available = ["2.15.0", "2.14.1", "2.14.0", "2.13.0", "2.12.0"]
    monkeypatch.setattr(bisect_module, "released_versions", lambda package: available)

    class FakeProbe:
        def __init__(self, subject, package, *_args, **_options) -> None:
            assert subject.id == "bert" and package == "torch"
            self.seen: list[dict[str, Any]] = []

        def __call__(self, version: str) -> Probe:
            outcome = {"2.15.0": UNINSTALLABLE, "2.14.1": PASSED}.get(version, FAILED)
            return Probe(version, outcome)

    monkeypatch.setattr(bisect_module, "ExportProbe", FakeProbe)
    result = CliRunner().invoke(
        bisect_command, ["bert", "--registry", str(registry), "--json", str(tmp_path / "b.json")]
    )
    assert result.exit_code == 0, result.output
    assert load_ledger(registry).by_id("bert").fixed_in == "torch>=2.14.1"
    assert json.loads((tmp_path / "b.json").read_text())["first_passing"] == "2.14.1"


@pytest.mark.slow
def test_bisect_a_real_package_history(tmp_path):
    """``import attrs`` works since attrs 21.3.0; 21.2.1 was never released (uninstallable: skipped)."""
    versions = newer_versions(released_versions("attrs"), "20.3.0")
    versions = sorted([*versions, "21.2.1"], key=lambda v: tuple(map(int, v.split("."))))

    def probe(version: str) -> Probe:
        try:
            python = ensure_venv(tmp_path / f"attrs-{version}", f"attrs=={version}\n", ["attrs"])
        except Uninstallable as error:
            return Probe(version, UNINSTALLABLE, str(error))
        done = subprocess.run([str(python), "-c", "import attrs"], capture_output=True)
        return Probe(version, PASSED if done.returncode == 0 else FAILED)

    result = first_passing(versions, probe)
    assert result.first_passing == "21.3.0" and result.last_failing == "21.2.0"
    assert result.untested == ("21.2.1",)
