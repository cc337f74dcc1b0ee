"""``exportbot audit --candidate PKG==VER`` (bot.run.candidate, bot.run.venvs): removals and regressions of an unpinned release.

The sample selection, the regression verdicts, the plan and the exit code are checked on small inputs
with stub runners; ``test_candidate_audit_in_a_real_isolated_environment`` (slow) builds a real
environment with another onnxscript release and exports in it.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import fake_github_fixture  # noqa: F401 (provides the fake_github fixture)
from test_audit import PINS, write_registry

from bot.audit.plan import Export, entry_subject, plan_entry
from bot.audit.regression_sample import SampledExport, choose_sample
from bot.audit.report import ReportError, check_report
from bot.audit.verdict import verdict
from bot.audit.verification import Verification
from bot.cli.audit import audit_command
from bot.run.audit_run import EXIT_REGRESSION, AuditReport
from bot.run.candidate import (
    HOLDS,
    REGRESSION,
    STALE,
    CandidateCheck,
    CandidateEnvironment,
    check_regressions,
)
from bot.run.venvs import pin_mismatches
from exporters.ledger import load_ledger

REPO_ROOT = Path(__file__).resolve().parents[1]
ONNX_PINS = {k: PINS[k] for k in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime")}


def record(model: str, backend: str = "onnx", mode: str = "static", status: str = "pass", seconds: float = 5.0,
           **versions: str) -> dict[str, Any]:  # fmt: skip
    return {"model": model, "backend": backend, "mode": mode, "status": status, "seconds": seconds,
            "versions": {**ONNX_PINS, "executorch": "1.5.1", "torchao": "0.18.0", **versions}}  # fmt: skip


def test_regression_sample_fills_with_passing_exports_at_the_pins_spread_and_fastest_first():
    pins = {**ONNX_PINS, "executorch": "1.5.1", "torchao": "0.18.0"}
    records = [
        record("SlowModel", seconds=30),
        record("FastModel", seconds=2),
        record("FastModel", seconds=2),  # the same export twice (a rerun): sampled once
        record("DynModel", mode="dynamic", seconds=9),
        record("BrokenModel", status="failed", seconds=1),  # did not pass: nothing to regress
        record("OldModel", seconds=1, onnxscript="0.6.0"),  # made at other pins: says nothing about today
        record("TorchPlusCpu", seconds=3, torch="2.13.0+cpu"),  # the same release as the pin
        record("EtModel", backend="executorch", seconds=1),  # onnxscript is not in ExecuTorch's stack
    ]

    def sample(package: str, limit: int) -> list[Export]:
        return [item.export for item in choose_sample(package, pins, records, limit=limit).chosen]

    assert sample("onnxscript", 3) == [  # round-robin over (onnx, dynamic), (onnx, static); fastest first in each
        Export("DynModel", "onnx", True), Export("FastModel", "onnx", False), Export("TorchPlusCpu", "onnx", False),
    ]
    assert len(sample("onnxscript", 50)) == 4
    assert Export("EtModel", "executorch", False) in sample("torch", 50)
    assert sample("onnxscript", 0) == []


def test_regression_rows_tell_a_regression_from_a_stale_record_and_a_pass():
    def runner(status: str, version: str) -> Any:
        def run(item: SampledExport) -> dict[str, Any]:
            failed = status != "pass"
            model, backend, dynamic = item.export
            return {"model": model, "backend": backend, "dynamic": dynamic, "status": status,
                    "error": "ValueError: boom" if failed else None, "max_abs_diff": None if failed else {"y": 1e-6},
                    "versions": {"onnxscript": version}}  # fmt: skip

        return run

    sample = [SampledExport(Export("BertModel", "onnx", False), reasons=("fastest",))]
    [holds] = check_regressions(sample, ["onnxscript"], runner("pass", "0.8.0"), runner("pass", "0.7.2"))
    assert (holds.result, holds.ran_with, holds.pinned) == (HOLDS, "0.8.0", None)  # no second export
    [broken] = check_regressions(sample, ["onnxscript"], runner("failed", "0.8.0"), runner("pass", "0.7.2"))
    assert broken.result == REGRESSION and broken.pinned["status"] == "pass"
    [stale] = check_regressions(sample, ["onnxscript"], runner("failed", "0.8.0"), runner("failed", "0.7.2"))
    assert stale.result == STALE

    environment = CandidateEnvironment((("onnxscript", "0.8.0"),), Path("/nowhere/python"), layered=True)
    check = CandidateCheck(environment, ["sweeps/catalogue/onnx-static-shard-6-of-8.jsonl"], [holds, broken, stale],
                           ["t5-cast-folding"])
    report = AuditReport([], dict(PINS), "aee41f0ad3ec", 1, "onnxscript==0.8.0", candidate_check=check)
    assert report.exit_code() == EXIT_REGRESSION  # a broken export outweighs any removal
    data = report.as_dict()["candidate_check"]
    assert data["regressions"] == 1 and data["removable"] == ["t5-cast-folding"]
    assert [row["result"] for row in data["sample"]] == [HOLDS, REGRESSION, STALE]
    assert data["sample"][0]["why"] == ["fastest"] and data["sample"][0]["repro"] is None
    with pytest.raises(ReportError, match=r"unpinned candidate onnxscript==0\.8\.0"):
        check_report(report.as_dict())  # exportbot pr proposes nothing from a candidate audit


def test_plan_under_a_candidate_speaks_of_the_candidates_stack(tmp_path):
    registry = write_registry(tmp_path, [{
        "list": "ONNX_DISABLE_OPTIMIZE", "id": "t5", "models": ["T5Model"], "backend": "onnx", "scope": "static",
        "upstream": "https://github.com/microsoft/onnxscript/issues/1", "dependency": "onnxscript",
        "reason": "r", "failure": "x", "added": "2026-01-01",
    }])  # fmt: skip
    subject = entry_subject(load_ledger(registry).entries[0])
    at_pins = {"t5": Verification("t5", datetime.date(2026, 1, 2), dict(ONNX_PINS), "x", "still-needed", "open")}
    plan = plan_entry(subject, None, PINS, at_pins, candidate="onnxscript==0.8.0")
    assert plan.due and plan.candidate == "onnxscript==0.8.0"
    assert plan.versions["onnxscript"] == "0.8.0" and plan.moved_pins == {"onnxscript": ("0.7.2", "0.8.0")}
    unrelated = plan_entry(subject, None, PINS, at_pins, candidate="executorch==1.6.0")
    assert unrelated.candidate is None and unrelated.versions["onnxscript"] == "0.7.2"


def test_a_candidate_equal_to_the_verified_release_is_no_move_and_never_removable(tmp_path):
    """The false removal seen with a "too slow" entry: verified still-needed at onnx 1.21.0 (a non-pinned
    stack), audited with --candidate onnx==1.21.0 while the pin is 1.23.2. The move pins → candidate is no
    move of the entry: its reproducer passing there contradicts the verification and is never a removal."""
    registry = write_registry(tmp_path, [{
        "list": "ONNX_DISABLE_OPTIMIZE", "id": "resize-folding", "models": ["BertModel"], "backend": "onnx",
        "scope": "static", "upstream": "https://github.com/onnx/onnx/issues/1", "dependency": "onnx",
        "reason": "r", "failure": "timeout", "added": "2026-01-01",
    }])  # fmt: skip
    subject = entry_subject(load_ledger(registry).entries[0])
    verified = {"resize-folding": Verification("resize-folding", datetime.date(2026, 1, 2),
                                               dict(ONNX_PINS) | {"onnx": "1.21.0"}, "x", "still-needed", "open")}
    plan = plan_entry(subject, None, PINS, verified, candidate="onnx==1.21.0")
    assert plan.due and plan.moved_pins == {} and plan.versions["onnx"] == "1.21.0"
    passed = {"model": "BertModel", "backend": "onnx", "dynamic": False, "status": "pass", "repro": "resize-folding",
              "workaround_off": ["resize-folding"], "optimize": True, "max_abs_diff": {"y": 1e-6},
              "versions": dict(ONNX_PINS) | {"onnx": "1.21.0"}}  # fmt: skip
    result = verdict(subject, plan, None, [passed])
    assert result.verdict == "not-reproduced" and "no pin of its stack moved since" in result.reasons[0]


def test_candidate_refuses_publishing_and_bad_specs(tmp_path):
    registry = write_registry(tmp_path, [])
    base = ["--registry", str(registry), "--tracker", str(REPO_ROOT / "registry" / "upstream-snapshot.json")]
    for extra, message in (
        (["--candidate", "onnx==1.24.0", "--open-prs"], "--open-prs cannot go with --candidate"),
        (["--candidate", "onnx>=1.24"], "--candidate must be PKG==VERSION"),
    ):  # fmt: skip
        result = CliRunner().invoke(audit_command, [*base, *extra])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_candidate_audit_in_a_real_isolated_environment(tmp_path):
    """A real environment with onnxscript 0.7.1 layered on the pinned one; an ONNX ledger entry (the project's
    ledger has none left since Gemma 3's vmap entry was superseded: the real-release ledger's Dinov2 one) is
    re-run there and one export that passes at the pins is checked for a regression.
    About 1 to 2 minutes: the layered install takes seconds, each export 5 to 30 s."""
    from bot.audit.pins import read_pins
    from bot.run.candidate import workaround_dependencies

    pins = read_pins(REPO_ROOT / "constraints.txt")
    assert pin_mismatches(pins) == [], "the layered environment needs the pinned .venv"
    bert = next(
        line for line in (REPO_ROOT / "sweeps" / "catalogue" / "onnx-static-shard-6-of-8.jsonl").read_text().splitlines()
        if '"model": "BertModel"' in line and '"dynamic": false' in line and '"status": "pass"' in line
    )  # fmt: skip
    results = tmp_path / "last-sweep.jsonl"
    results.write_text(bert + "\n")
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(audit_command, [
        "--tracker", str(REPO_ROOT / "registry" / "upstream-snapshot.json"),
        "--registry", str(REPO_ROOT / "tests" / "real_releases" / "registry"),
        "--candidate", "onnxscript==0.7.1", "--entry", "dinov2-registers-antialias-resize-onnx", "--runs", "1",
        "--cache-dir", str(tmp_path / "venvs"), "--regression-results", str(results),
        "--regression-sample", "1", "--timeout", "600", "--json", str(out),
    ])  # fmt: skip
    report = json.loads(out.read_text())
    check = report["candidate_check"]
    assert check["environment"] == "layered on the pinned environment" and check["problem"] is None
    [row] = check["sample"]
    assert (row["model"], row["mode"], row["ran_with"], row["result"]) == ("BertModel", "static", "0.7.1", HOLDS)
    # the one export the budget of 1 allows: chosen first because it fired a workaround declaring onnxscript when the
    # record says so (the sample's priority order), else as the fastest passing export
    fired = sorted(n for n in json.loads(bert).get("workarounds_fired") or {} if workaround_dependencies().get(n) == "onnxscript")
    assert row["why"] == ([f"workaround {', '.join(fired)} (dependency = onnxscript)"] if fired else ["fastest"])
    assert row["repro"] is None
    # every ledger reproducer on the ONNX stack was considered: the EXPORT_SKIPS ones only run where skipped
    assert any("dinov2-registers-antialias-resize-onnx" in line for line in check["left_out"])
    [entry] = report["entries"]
    assert entry["due"] and "candidate onnxscript==0.7.1" in entry["due_reasons"]
    # never verified in that registry: nothing was seen failing, so nothing moved since (never a removal)
    assert entry["moved_pins"] == {}
    assert entry["verdict"] in ("still-needed", "changed", "not-reproduced"), entry["reasons"]
    assert result.exit_code == {"not-reproduced": 4, "changed": 4, "still-needed": 0}[entry["verdict"]], result.output


def test_a_candidate_audit_records_its_verifications_marked_as_not_the_pins(tmp_path, fake_github):
    """``audit --candidate onnx==1.21.0 --update-verification``: a real bug recorded at the release it belongs
    to, at the versions the re-runs ran with, marked as a non-pinned stack; the next audit at the pins sees
    that stack move (onnx 1.21.0 → 1.23.2) and re-runs it."""
    from test_audit import FakeRunner, tracker

    from bot.audit.verification import load_verification, save_verification
    from bot.run.audit_run import run_audit, verification_records

    registry = write_registry(tmp_path, [{
        "list": "ONNX_DISABLE_OPTIMIZE", "id": "resize", "models": ["BertModel"], "backend": "onnx", "scope": "static",
        "upstream": "https://github.com/onnx/onnx/issues/1", "dependency": "onnx", "reason": "r",
        "failure": "Resize", "added": "2026-01-01",
    }])  # fmt: skip
    ledger = load_ledger(registry)

    class AtCandidate(FakeRunner):
        def __call__(self, entry_id: str):
            run = super().__call__(entry_id)
            return lambda *args: run(*args) | {"versions": dict(PINS) | {"onnx": "1.21.0"}}

    report = run_audit(ledger, tracker(fake_github), PINS, {}, None, entry_runner=AtCandidate("failed", "Resize: slow"),
                       candidate="onnx==1.21.0", runs=1)  # fmt: skip
    [record] = verification_records(report, datetime.date(2026, 12, 5))
    assert (record.verdict, record.candidate, record.versions["onnx"]) == ("still-needed", "onnx==1.21.0", "1.21.0")
    save_verification(registry, [record])
    text = (registry / "verified.toml").read_text()
    assert 'candidate = "onnx==1.21.0"' in text and 'onnx = "1.21.0"' in text
    loaded = load_verification(registry)
    assert loaded["resize"].candidate == "onnx==1.21.0"
    again = plan_entry(entry_subject(ledger.entries[0]), None, PINS, loaded)
    assert again.due and again.moved_pins == {"onnx": ("1.21.0", "1.23.2")}
    at_pins = Verification("resize", datetime.date(2026, 12, 6), dict(ONNX_PINS), "x", "still-needed", "none")
    save_verification(registry, [at_pins])
    assert "candidate" not in (registry / "verified.toml").read_text()  # verified at the pins again: unmarked
