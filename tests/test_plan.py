"""bot.plan, table-driven: upstream state × last verification × pins × candidate → due or not, and why (pure)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from bot.plan import ENTRY, Export, Subject, entry_subject, plan_entry, same_version
from bot.tracker import UpstreamState
from bot.verification import Verification
from exporters.ledger import UpstreamRef, load_ledger

PINS = {"torch": "2.13.0", "transformers": "5.23.0"}
REF = UpstreamRef("pytorch", "pytorch", 1, "issue")
SUBJECT = Subject("e", ENTRY, "dynamo", (Export("BertModel", "dynamo", False),), ("torch", "transformers"),
                  "https://github.com/pytorch/pytorch/issues/1", "torch", "boom", "EXPORT_SKIPS")  # fmt: skip
STATES = {
    "none": None,
    "open": UpstreamState(REF, "issue", "open"),
    "closed:completed": UpstreamState(REF, "issue", "closed", "completed"),
    "closed:not_planned": UpstreamState(REF, "issue", "closed", "not_planned"),
    "unknown": UpstreamState(REF, None, None, reachable=False, error="timeout"),
}


def recorded(versions: dict[str, str] | None, verdict: str = "still-needed", state: str = "open") -> dict[str, Verification]:
    if versions is None:
        return {}
    return {"e": Verification("e", datetime.date(2026, 1, 2), versions, "x", verdict, state)}


AT_PINS = dict(PINS)
LOCAL_TAG = {"torch": "2.13.0+cpu", "transformers": "5.23.0"}  # what a re-run records: the same release
OLD_TORCH = {"torch": "2.12.0", "transformers": "5.23.0"}

# (id, upstream, record, candidate, force, due, reason phrase, moved, last verdict)
ROWS = [
    ("never-verified", "open", recorded(None), None, False, True, "never verified", {}, None),
    ("nothing-moved", "open", recorded(AT_PINS), None, False, False, "nothing moved since the last verification", {},
     "still-needed"),
    ("local-tag-is-not-a-move", "open", recorded(LOCAL_TAG), None, False, False, "nothing moved", {}, "still-needed"),
    ("pin-moved", "open", recorded(OLD_TORCH), None, False, True, "torch 2.12.0 → 2.13.0",
     {"torch": ("2.12.0", "2.13.0")}, "still-needed"),
    ("pin-moved+unknown-tracker", "unknown", recorded(OLD_TORCH), None, False, True, "torch 2.12.0 → 2.13.0",
     {"torch": ("2.12.0", "2.13.0")}, "still-needed"),
    ("closed-is-a-trigger", "closed:completed", recorded(AT_PINS), None, False, True, "upstream closed:completed", {},
     "still-needed"),
    ("closed-and-rechecked", "closed:completed", recorded(AT_PINS, state="closed:completed"), None, False, False,
     "still failing at these pins", {}, "still-needed"),
    ("not-reproduced-and-closed-is-not-rerun", "closed:completed", recorded(AT_PINS, "not-reproduced", "closed:completed"),
     None, False, False, "not reproduced at these pins", {}, "not-reproduced"),
    ("not-reproduced-not-rerun", "open", recorded(AT_PINS, "not-reproduced"), None, False, False, "nothing moved", {},
     "not-reproduced"),
    ("not-planned-blocks", "closed:not_planned", recorded(OLD_TORCH), None, False, False, "a human decides",
     {"torch": ("2.12.0", "2.13.0")}, "still-needed"),
    ("force", "open", recorded(AT_PINS), None, True, True, "forced", {}, "still-needed"),
    ("candidate-in-stack", "open", recorded(AT_PINS), "torch==2.14.0", False, True, "candidate torch==2.14.0",
     {"torch": ("2.13.0", "2.14.0")}, "still-needed"),
    ("candidate-outside-stack", "open", recorded(AT_PINS), "onnx==1.24.0", False, False, "nothing moved", {},
     "still-needed"),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "records", "candidate", "force", "due", "phrase", "moved", "last"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])  # fmt: skip
def test_plan_table(upstream, records, candidate, force, due, phrase, moved, last):
    plan = plan_entry(SUBJECT, STATES[upstream], PINS, records, force=force, candidate=candidate)
    assert (plan.due, plan.moved_pins, plan.last_verdict) == (due, moved, last), plan.reasons
    assert any(phrase in reason for reason in plan.reasons), plan.reasons


def test_candidate_stands_in_the_versions():
    plan = plan_entry(SUBJECT, STATES["open"], PINS, recorded(AT_PINS), candidate="torch==2.14.0")
    assert plan.versions == {"torch": "2.14.0", "transformers": "5.23.0"} and plan.candidate == "torch==2.14.0"


@pytest.mark.parametrize(
    ("recorded_version", "pinned", "same"),
    [("2.13.0", "2.13.0", True), ("2.13.0+cpu", "2.13.0", True), ("2.12.0+cpu", "2.13.0", False),
     (None, "2.13.0", False), ("2.13.0", None, False), (None, None, True), ("not installed", "2.13.0", False)],
)  # fmt: skip
def test_same_version(recorded_version, pinned, same):
    assert same_version(recorded_version, pinned) is same


def test_entry_subject_reruns_the_modes_of_its_reproducer(tmp_path: Path):
    entry = (
        '[[entry]]\nid = "e"\nmodels = ["BertModel", "GPT2Model"]\nbackend = "dynamo"\nscope = "all"\n'
        'dependency = "torch"\nreason = "r"\nmodel_change = "m"\nfailure = "x"\nadded = 2026-01-01\n'
    )
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(entry)
    plain = entry_subject(load_ledger(tmp_path).by_id("e"))
    assert [(e.model, e.dynamic) for e in plain.exports] == [
        ("BertModel", False), ("BertModel", True), ("GPT2Model", False), ("GPT2Model", True)
    ]
    (tmp_path / "export_skips.toml").write_text(entry + "\n[entry.repro.export]\ndynamic = true\n")
    narrowed = entry_subject(load_ledger(tmp_path).by_id("e"))
    assert [(e.model, e.dynamic) for e in narrowed.exports] == [("BertModel", True), ("GPT2Model", True)]
    assert narrowed.list_name == "EXPORT_SKIPS"
