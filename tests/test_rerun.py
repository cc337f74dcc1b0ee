"""bot.run.reruns: the command line and environment of each re-run, through a real subprocess of a stand-in
interpreter that records what it was given (no export), and what becomes of a run that hangs or dies.
Also: no PR path ever proposes removing an entry whose evidence is ``not-reproduced``."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bot.audit.plan import ENTRY, Export, Subject, plan_entry
from bot.audit.verdict import STILL_NEEDED, verdict
from bot.github.prwriter import Proposal, parse_pr_body, pr_body, select_proposals
from bot.run.reruns import probe_superseders, rerun_subject, subprocess_runner
from bot.sweep.records import TIMEOUT
from exporters.ledger import load_ledger

# Stands in for ``python -m bot export ...``: writes its argv and EXPORTBOT_REGISTRY as the outcome record.
STAND_IN = """\
import json, os, sys, time
args = sys.argv[1:]
if os.environ.get("STAND_IN_MODE") == "hang":
    time.sleep(60)
if os.environ.get("STAND_IN_MODE") == "die":
    print("Traceback: boom", file=sys.stderr)
    sys.exit(3)
if os.environ.get("STAND_IN_MODE") == "segfault":
    import signal
    print("validating model.pte", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
record = args[args.index("--outcome-json") + 1]
with open(record, "w") as handle:
    json.dump({"status": "pass", "args": args, "registry": os.environ.get("EXPORTBOT_REGISTRY"),
               "offline": os.environ.get("HF_HUB_OFFLINE")}, handle)
"""


@pytest.fixture
def interpreter(tmp_path: Path) -> Path:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    return python


def leave_out(args: list[str]) -> list[str]:
    """The flags after the shape mode, up to the outcome record: what the re-run leaves out."""
    start = args.index("--static") + 1 if "--static" in args else args.index("--dynamic") + 1
    return args[start : args.index("--outcome-json")]


# (id, runner options, flags that must follow the mode, registry the child must read)
ROWS = [
    ("entry-reproducer", {"repro": "e", "registry": "REG"}, ["--repro", "e"], "REG"),
    ("entry-without-registry", {"repro": "e"}, ["--repro", "e"], None),
    ("probe", {"without": ("_fix_a",)}, ["--without", "_fix_a"], None),
    ("two-probes", {"without": ("_fix_a", "_fix_b")}, ["--without", "_fix_a", "--without", "_fix_b"], None),
    ("supersession-probe", {"repro": "e", "without": ("_fix_a", "_fix_b"), "registry": "REG"},
     ["--repro", "e", "--without", "_fix_a", "--without", "_fix_b"], "REG"),
    ("plain", {"plain": True}, [], None),
    ("no-entry-named", {}, ["--ignore-ledger"], None),
]


@pytest.mark.parametrize(("options", "flags", "registry"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_command_line_and_registry(tmp_path, interpreter, monkeypatch, options, flags, registry):
    monkeypatch.delenv("EXPORTBOT_REGISTRY", raising=False)
    if options.get("registry"):
        options = options | {"registry": tmp_path / "registry"}
    outcome = subprocess_runner(30, python=interpreter, **options)("BertModel", "onnx", True)
    args = outcome["args"]
    assert args[:6] == ["-m", "bot", "export", "BertModel", "--backend", "onnx"] and "--dynamic" in args
    assert leave_out(args) == flags
    assert outcome["registry"] == (str((tmp_path / "registry").resolve()) if registry else None)
    assert outcome["offline"] == "1"


def test_a_hung_export_is_a_timeout_naming_its_reproducer(interpreter, monkeypatch):
    monkeypatch.setenv("STAND_IN_MODE", "hang")
    outcome = subprocess_runner(1, python=interpreter, repro="e")("BertModel", "dynamo", False)
    assert outcome == {"model": "BertModel", "backend": "dynamo", "dynamic": False, "repro": "e",
                       "workarounds_disabled": [], "status": TIMEOUT, "error": "timed out after 1 s",
                       "command": "exportbot export BertModel --backend dynamo --static --repro e"}  # fmt: skip


def test_a_slowness_entrys_budget_replaces_the_audit_timeout(interpreter, monkeypatch):
    """The false removal of a "too slow" entry: with a long --timeout its slow export passed. Its budget_s is
    the limit instead, whatever --timeout says, and running past it reads as the recorded timeout."""
    monkeypatch.setenv("STAND_IN_MODE", "hang")  # the stand-in sleeps 60 s: slower than the budget, not --timeout
    started = time.monotonic()
    outcome = subprocess_runner(3600, python=interpreter, repro="e", budget_s=1)("BertModel", "onnx", False)
    assert time.monotonic() - started < 30
    assert (outcome["status"], outcome["error"]) == (TIMEOUT, "timed out after 1 s (the entry's budget_s)")
    subject = Subject("e", ENTRY, "onnx", (Export("BertModel", "onnx", False),), ("onnx",), failure="timed out after")
    plan = plan_entry(subject, None, {"onnx": "1.21.0"}, {}, force=True)
    assert verdict(subject, plan, None, [outcome]).verdict == STILL_NEEDED


def test_the_outcome_names_the_command_the_rerun_ran(interpreter):
    outcome = subprocess_runner(30, python=interpreter, repro="e", extra_args=("--opset", "18"))("T5Model", "onnx", True)
    assert outcome["command"] == "exportbot export T5Model --backend onnx --dynamic --repro e --opset 18"


def test_a_child_that_dies_is_a_crash_with_its_last_words(interpreter, monkeypatch):
    monkeypatch.setenv("STAND_IN_MODE", "die")
    outcome = subprocess_runner(30, python=interpreter, repro="e")("BertModel", "dynamo", False)
    assert outcome["status"] == "crashed"
    assert outcome["error"] == "exited with code 3 without an outcome: Traceback: boom"


def test_a_segfault_reads_as_the_sweep_records_it_so_a_failure_copied_from_a_sweep_still_matches(
    interpreter, monkeypatch
):
    """One crash, one text: the sweep writes ``killed by signal 11 (SIGSEGV)``; an entry whose ``failure`` was
    copied from that record must read the audit's re-run of the same crash as still-needed, not changed."""
    monkeypatch.setenv("STAND_IN_MODE", "segfault")
    outcome = subprocess_runner(30, python=interpreter, repro="e")("ResNetModel", "executorch", False)
    sweep_text = "killed by signal 11 (SIGSEGV)"  # a crashed sweep record's error (docs/sweep-results.md)
    assert (outcome["status"], outcome["error"]) == ("crashed", f"{sweep_text}: validating model.pte")
    subject = Subject("e", ENTRY, "executorch", (Export("ResNetModel", "executorch", False),), ("torch",),
                      failure=re.escape(sweep_text))  # fmt: skip
    plan = plan_entry(subject, None, {"torch": "2.13.0"}, {}, force=True)
    assert verdict(subject, plan, None, [outcome]).verdict == STILL_NEEDED


def test_rerun_subject_repeats_every_export():
    calls: list[tuple[str, bool]] = []

    def run_export(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
        calls.append((model, dynamic))
        return {"model": model, "status": "pass"}

    subject = Subject("e", ENTRY, "dynamo", (Export("A", "dynamo", False), Export("B", "dynamo", True)), ("torch",))
    outcomes = rerun_subject(subject, run_export, runs=2)
    assert calls == [("A", False), ("A", False), ("B", True), ("B", True)]
    assert [o["run"] for o in outcomes] == [1, 2, 1, 2]


# ── No PR proposes a removal on not-reproduced evidence ──
def test_not_reproduced_is_never_proposed_and_is_taken_out_of_an_open_pr(tmp_path: Path):
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(
        '[[entry]]\nid = "e"\nmodels = ["BertModel"]\nbackend = "dynamo"\nscope = "static"\ndependency = "torch"\n'
        'reason = "r"\nmodel_change = "m"\nfailure = "x"\nadded = 2026-01-01\n'
    )
    pins = {"torch": "2.13.0", "transformers": "5.23.0"}
    evidence = [{"model": "BertModel", "mode": "static", "run": r, "status": "pass", "max_abs_diff": 0.0} for r in (1, 2)]
    row = {"id": "e", "list": "EXPORT_SKIPS", "models": ["BertModel"], "backend": "dynamo", "scope": "static",
           "upstream": None, "upstream_state": {"summary": "none"}, "verdict": "not-reproduced",
           "reasons": ["all 2 runs pass ... never removed on this evidence"], "evidence": evidence}  # fmt: skip
    report = {"schema": 1, "pins": pins, "entries": [row], "generated_at": "2026-12-01T00:00:00Z"}
    base = load_ledger(tmp_path)
    fresh = select_proposals(report, base, [], [], runs_required=2)
    assert fresh.proposals == () and fresh.notes["e"] == "not removable: not-reproduced"
    earlier = Proposal("e", "EXPORT_SKIPS", ("BertModel",), "dynamo", "static", None, "none", pins,
                       evidence=tuple(evidence))  # fmt: skip
    kept = select_proposals(report, base, [earlier], [], runs_required=2)
    assert kept.proposals == () and kept.notes["e"].startswith("taken out: not-reproduced")
    # The same row, removable, is proposed: the guard is the verdict, not a broken fixture.
    assert [p.id for p in select_proposals({**report, "entries": [row | {"verdict": "removable"}]}, base, [], [], 2).proposals] == ["e"]


# ── Supersession probes (evidence2): which registered workaround took an entry's job over ──
def test_probe_superseders_follows_what_fired_until_the_recorded_failure_is_back():
    """Flint's two steps: without the batched_mm experts another op fails after the histc rewrite fired;
    without both, histc is back. The second mode tries the first mode's proof first."""
    subject = Subject("flint", ENTRY, "executorch", (Export("F", "executorch", False), Export("F", "executorch", True)),
                      ("torch",), failure="histc")  # fmt: skip
    passing = [{"model": "F", "backend": "executorch", "dynamic": d, "status": "pass",
                "workarounds_fired": {"_batched_mm": 1, "_strided": 2}} for d in (False, True)]  # fmt: skip
    asked: list[tuple[tuple[str, ...], bool]] = []

    def run_without(names):
        def run_export(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
            asked.append((tuple(names), dynamic))
            base = {"model": model, "backend": backend, "dynamic": dynamic, "workarounds_disabled": list(names)}
            if set(names) >= {"_batched_mm", "_histc"}:
                return base | {"status": "failed", "error": "aten.histc.default is not in Core ATen opset"}
            if "_batched_mm" in names:
                return base | {"status": "failed", "error": "empty_permuted", "workarounds_fired": {"_histc": 1}}
            return base | {"status": "pass"}

        return run_export

    probes = probe_superseders(subject, passing, run_without, budget=6)
    assert asked == [(("_batched_mm",), False), (("_strided",), False), (("_batched_mm", "_histc"), False),
                     (("_batched_mm", "_histc"), True)]  # fmt: skip
    assert [p["run"] for p in probes] == [1, 1, 1, 1]
    assert len(probe_superseders(subject, passing, run_without, budget=2)) == 2  # the budget bounds the entry


def test_supersession_is_proposed_and_its_pr_section_names_the_takeover(tmp_path: Path):
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(
        '[[entry]]\nid = "e"\nmodels = ["BertModel"]\nbackend = "dynamo"\nscope = "static"\ndependency = "torch"\n'
        'reason = "r"\nmodel_change = "m"\nfailure = "x"\nadded = 2026-01-01\n'
    )
    pins = {"torch": "2.13.0", "transformers": "5.23.0"}
    evidence = [{"model": "BertModel", "mode": "static", "run": r, "status": "pass", "max_abs_diff": 0.0} for r in (1, 2)]
    tried = [{"model": "BertModel", "mode": "static", "status": "failed", "error": "RuntimeError: other", "without": ["_a"],
              "proves": False},
             {"model": "BertModel", "mode": "static", "status": "failed", "error": "ValueError: x again",
              "without": ["_a", "_b"], "proves": True}]  # fmt: skip
    row = {"id": "e", "list": "EXPORT_SKIPS", "models": ["BertModel"], "backend": "dynamo", "scope": "static",
           "upstream": None, "upstream_state": {"summary": "none"}, "verdict": "superseded",
           "reasons": ["all 2 runs pass ... took over: _a, _b"], "evidence": evidence, "superseded_by": ["_a", "_b"],
           "supersession": tried}  # fmt: skip
    report = {"schema": 1, "pins": pins, "entries": [row], "generated_at": "2026-12-01T00:00:00Z"}
    [proposal] = select_proposals(report, load_ledger(tmp_path), [], [], runs_required=2).proposals
    assert proposal.superseded_by == ("_a", "_b")
    assert proposal.takeover == ({"model": "BertModel", "mode": "static", "without": ["_a", "_b"], "status": "failed",
                                  "error": "ValueError: x again"},)  # fmt: skip
    body = pr_body([proposal], 2, "exportbot/shrink")
    assert "**Superseded by** registered workarounds `_a`, `_b`" in body
    assert "| `BertModel` | static | `_a`, `_b` | failed: ValueError: x again |" in body
    assert "exportbot export BertModel --backend dynamo --static --repro e --without _a --without _b" in body
    [back] = parse_pr_body(body)
    assert back == proposal  # the takeover round-trips through the hidden block
