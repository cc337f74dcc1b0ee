"""Upstream drafts: a draft's script runs in a fresh process where exportbot cannot be imported, its output is
matched against the item's failure, the item's status follows (verified / unverified / stale / nothing), CI picks
the drafts a commit changed, and ``exportbot upstream status --json`` reports every item. Real subprocesses, real
git."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_json_output import assert_same_shape, documented

from bot.audit.drafts import (
    NOTHING,
    STALE,
    STATUSES,
    UNVERIFIED,
    VERIFIED,
    DraftError,
    DraftNotes,
    DraftRecord,
    ProbeRun,
    TrackedItem,
    cause_pattern,
    item_status,
    parse_notes,
)
from bot.cli.upstream import upstream_group
from bot.run.drafts import changed_draft_ids, run_script

EXPECTED = r"The size of tensor a \(\d+\) must match"
ITEM = TrackedItem("demo-entry", "entry", "dynamo", "transformers", None, "demo", "registry/export_skips.toml",
                   "EXPORT_SKIPS entry (dynamo, scope all)", ("DemoModel",), EXPECTED)  # fmt: skip
FAILING = """\
import importlib.util, torch
print("exportbot importable:", any(importlib.util.find_spec(n) for n in ("exporters", "bot")))
torch.ones(3) + torch.ones(4)
"""


def test_a_draft_script_runs_without_exportbot_and_its_failure_is_matched():
    run = run_script("demo-entry", FAILING, EXPECTED, timeout=120)
    assert run.exit_code == 1 and run.matched and not run.exportbot_importable
    assert "exportbot importable: False" in run.output  # the script itself could not import it either
    assert "RuntimeError: The size of tensor a (3) must match the size of tensor b (4)" in run.output
    assert 'File "demo-entry.py", line 3' in run.output  # paths shortened: the same text on any machine
    pins = {"torch": run.versions["torch"]}
    status = item_status(ITEM, FAILING, None, DraftRecord(run), pins)
    assert status.status == VERIFIED, status.reason


def test_a_script_that_fails_otherwise_is_unverified_and_one_that_passes_is_stale():
    other = run_script("demo-entry", "raise ValueError('another bug')\n", EXPECTED, timeout=60)
    assert other.exit_code == 1 and not other.matched
    pins = {"torch": other.versions.get("torch", "?")}
    said = item_status(ITEM, "raise ValueError('another bug')\n", None, DraftRecord(other), pins)
    assert said.status == UNVERIFIED and "ValueError: another bug" in said.reason

    fixed = "print('works now')\n"
    passing = run_script("demo-entry", fixed, EXPECTED, timeout=60)
    assert passing.exit_code == 0 and not passing.matched
    stale = item_status(ITEM, fixed, None, DraftRecord(passing), pins)
    assert stale.status == STALE and "no longer fails" in stale.reason
    assert item_status(ITEM, None, None, None, pins).status == NOTHING


def test_a_changed_script_must_run_again_before_it_counts():
    run = run_script("demo-entry", FAILING, EXPECTED, timeout=120)
    pins = {"torch": run.versions["torch"]}
    edited = FAILING + "# edited\n"
    status = item_status(ITEM, edited, None, DraftRecord(run), pins)
    assert status.status == UNVERIFIED and "changed" in status.reason


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def test_ci_verifies_only_the_drafts_a_commit_changed(tmp_path: Path):
    drafts = tmp_path / "docs" / "upstream-drafts"
    (drafts / "scripts").mkdir(parents=True)
    (drafts / "notes").mkdir()
    for name in ("a", "b", "c"):
        (drafts / "scripts" / f"{name}.py").write_text(f"print({name!r})\n")
    runs = {"schema": 1, "runs": {}}
    (drafts / "runs.json").write_text(json.dumps(runs))
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base", "--allow-empty")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "drafts")
    base = git(tmp_path, "rev-parse", "HEAD").strip()
    assert changed_draft_ids(base, drafts) == []
    (drafts / "scripts" / "b.py").write_text("print('b, edited')\n")
    (drafts / "notes" / "c.md").write_text("---\ntitle: c\n---\n")
    (drafts / "README.md").write_text("index\n")  # the index is no draft of its own
    assert changed_draft_ids(base, drafts) == ["b", "c"]
    assert changed_draft_ids("HEAD~1", drafts) == ["a", "b", "c"]


def test_status_json_reports_every_item_once_with_the_counts():
    done = CliRunner().invoke(upstream_group, ["status", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert set(data["counts"]) == set(STATUSES)
    assert sum(data["counts"].values()) == len(data["items"]) == len({item["id"] for item in data["items"]})
    assert {item["status"] for item in data["items"]} <= set(STATUSES)
    assert all(item["reason"] for item in data["items"])
    assert_same_shape(data, documented("upstream-tracking.md", "`exportbot upstream status --json`"))


def test_verify_starts_no_script_past_its_budget_and_names_the_drafts_left(monkeypatch):
    import types

    import bot.cli.upstream as upstream_cli
    from bot.run.tracking import Drafts

    drafts = Drafts(None)
    ids = sorted(i for i in drafts.files.scripts if i in drafts.files.runs and i in drafts.by_id)[:3]
    ran: list[str] = []

    def recorded(drafts, item, timeout, *, probe):  # the script's recorded run: this test is about the budget
        ran.append(item.id)
        return drafts.files.runs[item.id]

    clock = iter([0.0, 0.0, 100.0, 2000.0])  # started, then before each script: the third starts past 900 s
    monkeypatch.setattr(upstream_cli, "_run", recorded)
    monkeypatch.setattr(upstream_cli, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    done = CliRunner().invoke(upstream_group, ["verify", *ids, "--budget", "900"])
    assert done.exit_code == 0, done.output
    assert ran == ids[:2]
    assert f"budget of 900 s spent: not verified in this run: {ids[2]}" in done.stderr


def test_a_draft_that_imports_exportbot_is_a_problem_of_render_check():
    from bot.audit.drafts import render_pages

    scripts = {"demo-entry": "import torch\n\ndef patched():\n    from exporters.executorch.symbolic import x\n",
               "clean": "import torch, transformers\n"}  # fmt: skip
    _, _, problems = render_pages([ITEM], scripts, {}, {}, {})
    assert problems == ["docs/upstream-drafts/scripts/clean.py: names no ledger entry or registered workaround",
                        "docs/upstream-drafts/scripts/demo-entry.py imports exporters.executorch.symbolic: a draft "
                        "imports only the upstream stack (it runs where exportbot is not installed)"]  # fmt: skip



def test_a_crashed_probe_is_said_by_how_it_ended_not_by_its_progress_lines():
    from bot.run.drafts import probe_cause

    crashed = {"status": "crashed", "error": "killed by signal 8 (SIGFPE): [   0.0s] LongT5: importing executorch\n"
                                             "[   1.7s] LongT5: building model",
               "cause": "killed by signal 8 (SIGFPE): [   0.0s] LongT5: importing executorch"}  # fmt: skip
    assert probe_cause(crashed) == "killed by signal 8 (SIGFPE)"
    failed = {"status": "failed", "error": "RuntimeError: boom [1, 2]", "cause": "RuntimeError: boom [1, 2]"}
    assert probe_cause(failed) == "RuntimeError: boom [1, 2]"


def test_a_script_that_prints_a_caught_error_is_not_stale():
    script = ("from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode\ntry:\n"
              "    raise GuardOnDataDependentSymNode('Could not guard on data-dependent expression u19 < 1')\n"
              "except Exception as error:\n    print(f'{type(error).__name__}: {error}')\n")  # fmt: skip
    run = run_script("demo-entry", script, EXPECTED, timeout=120)
    assert run.exit_code == 0 and not run.matched
    said = item_status(ITEM, script, None, DraftRecord(run), {"torch": run.versions["torch"]})
    assert said.status == UNVERIFIED and "GuardOnDataDependentSymNode:" in said.reason


def test_a_timed_out_probe_leaves_the_script_to_show_the_bug_but_a_probe_error_must_agree():
    workaround = TrackedItem("_patch_demo", "workaround", "executorch", "torch", None, "demo", "exporters/x.py",
                             "register_patch (executorch)", ("DemoModel",))  # fmt: skip
    notes = DraftNotes(failure=EXPECTED)
    run = run_script("_patch_demo", FAILING, EXPECTED, timeout=120)
    pins = {"torch": run.versions["torch"]}
    timed_out = ProbeRun("exportbot export DemoModel --without _patch_demo", run.ran_on, "timeout",
                         "timed out after 240 s", "timed out after 240 s")  # fmt: skip
    said = item_status(workaround, FAILING, notes, DraftRecord(run, timed_out), pins)
    assert said.status == VERIFIED, said.reason
    other = ProbeRun(timed_out.command, run.ran_on, "failed", "ValueError: another bug", "ValueError: another bug")
    said = item_status(workaround, FAILING, notes, DraftRecord(run, other), pins)
    assert said.status == UNVERIFIED and "does not match what its --without probe recorded" in said.reason


def test_a_probe_cause_with_a_scratch_path_matches_the_same_error_at_another_path():
    probe = ("Fail: [ONNXRuntimeError] : 1 : FAIL : Load model from /tmp/exportbot-rerun-ab_c/.out.staging-x1/model.onnx "
             "failed:Node (node_squeeze) Op (Squeeze) [ShapeInferenceError] Dimension of input 2 must be 1 instead of 8")
    script = ("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : Load model from "
              "/tmp/tmpq9z/squeeze.onnx failed:Node (node_squeeze) Op (Squeeze) [ShapeInferenceError] Dimension of "
              "input 2 must be 1 instead of 8")
    assert re.search(cause_pattern(probe), script)


def test_an_entry_failure_in_exportbot_wording_is_checked_against_the_notes_failure_of_the_script():
    # The ledger records what exportbot printed; a script importing only the upstream stack cannot print it.
    exportbot_wording = r"component 'decode' failed on onnx: [\s\S]*The size of tensor a \(\d+\) must match"
    entry = TrackedItem("demo-decode", "entry", "onnx", "transformers", None, "demo", "registry/export_skips.toml",
                        "EXPORT_SKIPS entry (onnx, scope all)", ("DemoModel",), exportbot_wording)  # fmt: skip
    run = run_script("demo-decode", FAILING, exportbot_wording, timeout=120)
    pins = {"torch": run.versions["torch"]}
    said = item_status(entry, FAILING, None, DraftRecord(run), pins)
    assert said.status == UNVERIFIED and "fails otherwise than" in said.reason
    run = run_script("demo-decode", FAILING, EXPECTED, timeout=120)
    said = item_status(entry, FAILING, DraftNotes(failure=EXPECTED), DraftRecord(run), pins)
    assert said.status == VERIFIED, said.reason
    assert entry.failure == exportbot_wording  # the ledger's regex is what exportbot's real run printed, untouched


def test_a_notes_failure_that_matches_any_output_is_refused():
    with pytest.raises(DraftError, match="matches an empty output"):
        parse_notes('+++\nfailure = "(Error)?"\n+++\n', "notes/demo.md")
    assert parse_notes('+++\nfailure = "Error: \\\\w+"\n+++\n', "notes/demo.md").failure == r"Error: \w+"


def test_a_workaround_of_exportbots_own_code_is_internal_not_nothing():
    from bot.audit.drafts import INTERNAL
    from bot.run.drafts import tracked_items

    items = {item.id: item for item in tracked_items()}
    said = item_status(items["_layer_types_of_cache_maps"], None, None, None, {})
    assert said.status == INTERNAL and said.draft is None
    assert "not an upstream bug" in said.reason and "register_pytree_types" in said.reason
    plain = next(item for item in items.values() if item.upstream is None and item.internal is None)
    assert item_status(plain, None, None, None, {}).status == NOTHING  # only a stated reason makes an item internal


def test_a_script_killed_by_a_signal_says_so_and_matches_a_probes_crash():
    # A crash prints nothing of its own; the probe of the same bug recorded how its process ended.
    script = "import os, signal\nprint('dividing by zero in a kernel')\nos.kill(os.getpid(), signal.SIGFPE)\n"
    expected = cause_pattern("killed by signal 8 (SIGFPE)")
    run = run_script("_fix_demo", script, expected, timeout=120)
    assert run.exit_code == -8 and run.matched, run.output
    assert run.output.endswith("[killed by signal 8 (SIGFPE)]")


def test_drafting_an_internal_workaround_is_refused_in_one_line():
    result = CliRunner().invoke(upstream_group, ["draft", "_layer_types_of_cache_maps", "--no-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "exportbot's own code (internal): no upstream issue to draft" in result.output
    assert len(result.output.strip().splitlines()) == 1
