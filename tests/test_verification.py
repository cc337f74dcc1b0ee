"""What ``audit --update-verification`` remembers: every re-run verdict (not-reproduced included), with the
versions the re-runs recorded, never the pin file's; and the interpreter check that runs before them."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.audit.verdict import NOT_REPRODUCED, STILL_NEEDED
from bot.audit.verification import Verification, load_verification, save_verification
from bot.run.audit_run import run_audit, verification_records
from bot.run.environment import EnvironmentCheck, EnvironmentMismatch, mismatches
from exporters.ledger import load_ledger

PINS = {"torch": "2.13.0", "transformers": "5.23.0"}
TODAY = datetime.date(2026, 12, 1)
FAILURE = "Could not guard on data-dependent expression"


def ledger(tmp_path: Path, *ids: str):
    models = ("BertModel", "GPT2Model", "T5Model")  # one class each: entries may not gate a class twice
    text = "".join(
        f'[[entry]]\nid = "{i}"\nmodels = ["{model}"]\nbackend = "dynamo"\nscope = "static"\n'
        f'dependency = "torch"\nreason = "r"\nmodel_change = "m"\nfailure = "{FAILURE}"\nadded = 2026-01-01\n\n'
        for i, model in zip(ids, models, strict=False)
    )
    (tmp_path / "export_skips.toml").write_text(text)
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    return load_ledger(tmp_path)


class NoTracker:
    def state(self, url: str) -> Any:
        raise AssertionError("no upstream to ask")


def runner(results: dict[str, dict[str, Any]], calls: list[str]):
    """Entry id → the outcome its reproducer gives (the versions it records included)."""

    def entry_runner(entry_id: str):
        def run_export(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
            calls.append(entry_id)
            return {"model": model, "backend": backend, "dynamic": dynamic, "repro": entry_id,
                    "workaround_off": [entry_id], "max_abs_diff": {}, **results[entry_id]}  # fmt: skip

        return run_export

    return entry_runner


RAN = {"torch": "2.13.0+cpu", "transformers": "5.23.0"}


def test_records_take_versions_from_the_outcomes(tmp_path: Path):
    results = {
        "fails": {"status": "failed", "error": f"{FAILURE} Eq(u0, 1)", "versions": RAN},
        "passes": {"status": "pass", "versions": RAN, "max_abs_diff": {"out": 0.0}},
        "killed": {"status": "timeout", "error": "timed out after 5 s"},  # a killed child records nothing
    }
    calls: list[str] = []
    report = run_audit(
        ledger(tmp_path, *results), NoTracker(), PINS, {}, None, runs=1,
        entry_runner=runner(results, calls),
        check_environment=lambda subject: {"torch": "2.13.0+cu130", "transformers": "5.23.0"},
    )  # fmt: skip
    records = {r.entry_id: r for r in verification_records(report, TODAY)}
    assert records["fails"].verdict == STILL_NEEDED and records["fails"].versions == RAN
    assert records["passes"].verdict == NOT_REPRODUCED and records["passes"].versions == RAN
    assert records["killed"].versions == {"torch": "2.13.0+cu130", "transformers": "5.23.0"}  # the checked interpreter
    assert records["killed"].verdict == "changed"
    save_verification(tmp_path, records.values())
    stored = load_verification(tmp_path)
    assert stored["passes"].verdict == NOT_REPRODUCED and stored["passes"].versions["torch"] == "2.13.0+cpu"


def test_a_not_reproduced_record_is_not_rerun_next_time(tmp_path: Path):
    recorded = {"e": Verification("e", TODAY, RAN, "x", NOT_REPRODUCED, "none")}
    calls: list[str] = []
    report = run_audit(ledger(tmp_path, "e"), NoTracker(), PINS, recorded, None,
                       entry_runner=runner({"e": {"status": "pass", "versions": RAN}}, calls))  # fmt: skip
    assert calls == [] and report.entries[0].verdict.verdict == "not-due"
    assert verification_records(report, TODAY) == []  # nothing re-run: the record stays as it is


def test_records_without_a_rerun_are_not_written(tmp_path: Path):
    report = run_audit(ledger(tmp_path, "e"), NoTracker(), PINS,
                       {"e": Verification("e", TODAY, RAN, "x", STILL_NEEDED, "none")}, None,
                       entry_runner=runner({}, []))  # fmt: skip
    assert verification_records(report, TODAY) == []


def test_environment_mismatch_stops_before_any_rerun(tmp_path: Path):
    calls: list[str] = []

    def wrong_interpreter(subject):
        raise EnvironmentMismatch("torch 2.12.0 (pinned 2.13.0)")

    with pytest.raises(EnvironmentMismatch):
        run_audit(ledger(tmp_path, "e"), NoTracker(), PINS, {}, None,
                  entry_runner=runner({"e": {"status": "pass"}}, calls), check_environment=wrong_interpreter)  # fmt: skip
    assert calls == []


@pytest.mark.parametrize(
    ("installed", "expected"),
    [({"torch": "2.13.0", "transformers": "5.23.0"}, []),
     ({"torch": "2.13.0+cpu", "transformers": "5.23.0"}, []),
     ({"torch": "2.12.0", "transformers": "5.23.0"}, ["torch 2.12.0 (pinned 2.13.0)"]),
     ({"transformers": "5.22.0"}, ["torch not installed (pinned 2.13.0)", "transformers 5.22.0 (pinned 5.23.0)"])],
)  # fmt: skip
def test_mismatches(installed, expected):
    assert mismatches(["torch", "transformers"], PINS, installed) == expected


def test_unpinned_stack_package_is_a_mismatch():
    assert mismatches(["torch", "onnx"], PINS, {"torch": "2.13.0", "onnx": "1.23.2"}) == [
        "onnx (not pinned in constraints.txt)"
    ]


def test_environment_check_asks_the_interpreter(tmp_path: Path):
    """A real subprocess of this interpreter: the test environment holds the pins, so the check passes and
    returns what the interpreter has; with another pin it names the package."""
    from importlib import metadata

    from bot.audit.plan import ENTRY, Export, Subject

    subject = Subject("e", ENTRY, "dynamo", (Export("BertModel", "dynamo", False),), ("torch", "transformers"))
    have = {"torch": metadata.version("torch"), "transformers": metadata.version("transformers")}
    pins = {"torch": have["torch"].split("+")[0], "transformers": have["transformers"]}
    assert EnvironmentCheck(sys.executable, pins)(subject) == have
    with pytest.raises(EnvironmentMismatch, match=r"of e: torch .* \(pinned 0\.1\)"):
        EnvironmentCheck(sys.executable, pins | {"torch": "0.1"})(subject)
