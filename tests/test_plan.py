"""bot.audit.plan, table-driven: upstream state × last verification × pins × candidate → due or not, and why (pure).

The reasons are asserted whole: the audit report, the dashboard and the PR body show them to maintainers
("due: torch 2.12.0 → 2.13.0"), so each names the state word, the package, both versions or the date it
speaks about, and a plan that is not due says since when nothing moved.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from bot.audit.plan import (
    ENTRY,
    WORKAROUND,
    Export,
    Subject,
    as_subject,
    describe_state,
    entry_subject,
    is_unknown,
    needs_human,
    parse_candidate,
    plan_entry,
    same_version,
    workaround_subject,
)
from bot.audit.upstream import UpstreamState
from bot.audit.verification import Verification
from exporters.ledger import UpstreamRef, load_ledger
from exporters.utils import Workaround

PINS = {"torch": "2.13.0", "transformers": "5.23.0"}
REF = UpstreamRef("https://github.com/pytorch/pytorch/issues/1", "pytorch", "pytorch", 1)
SUBJECT = Subject("e", ENTRY, "dynamo", (Export("BertModel", "dynamo", False),), ("torch", "transformers"),
                  "https://github.com/pytorch/pytorch/issues/1", "torch", "boom", "EXPORT_SKIPS")  # fmt: skip
STATES = {
    "none": None,
    "open": UpstreamState(REF, "issue", "open"),
    "reopened": UpstreamState(REF, "issue", "open", "reopened"),
    "closed:completed": UpstreamState(REF, "issue", "closed", "completed"),
    "closed:not_planned": UpstreamState(REF, "issue", "closed", "not_planned"),
    "merged": UpstreamState(REF, "pull", "closed", merged=True),
    "closed:unmerged": UpstreamState(REF, "pull", "closed", merged=False),
    "unknown": UpstreamState(REF, None, None, reachable=False, error="timeout"),
    "not found": UpstreamState(REF, None, None, error="not found"),
}
ON = datetime.date(2026, 1, 2)


def recorded(versions: dict[str, str] | None, verdict: str = "still-needed", state: str = "open") -> dict[str, Verification]:
    if versions is None:
        return {}
    return {"e": Verification("e", ON, versions, "x", verdict, state)}


AT_PINS = dict(PINS)
LOCAL_TAG = {"torch": "2.13.0+cpu", "transformers": "5.23.0"}  # what a re-run records: the same release
OLD_TORCH = {"torch": "2.12.0", "transformers": "5.23.0"}
TORCH_MOVED = {"torch": ("2.12.0", "2.13.0")}
RECHECK = "recheck when a pin moves"
HUMAN = "a human decides what it means"
SINCE = f"nothing moved since {ON}"
NOTHING = "nothing moved since the last verification"

# (id, upstream, record, candidate, force, due, reasons, moved, last verdict)
ROWS = [
    ("never-verified", "open", recorded(None), None, False, True, ["never verified"], {}, None),
    ("never-verified+no-upstream", "none", recorded(None), None, False, True,
     ["no GitHub upstream to watch", "never verified"], {}, None),
    ("nothing-moved", "open", recorded(AT_PINS), None, False, False, [NOTHING], {}, "still-needed"),
    ("local-tag-is-not-a-move", "open", recorded(LOCAL_TAG), None, False, False, [NOTHING], {}, "still-needed"),
    ("nothing-moved+no-upstream", "none", recorded(AT_PINS), None, False, False,
     ["no GitHub upstream to watch", SINCE], {}, "still-needed"),
    ("nothing-moved+unknown-tracker", "unknown", recorded(AT_PINS), None, False, False,
     ["upstream state unknown (timeout)", SINCE], {}, "still-needed"),
    ("nothing-moved+404", "not found", recorded(AT_PINS), None, False, False,
     ["upstream state unknown (not found)", SINCE], {}, "still-needed"),
    ("pin-moved", "open", recorded(OLD_TORCH), None, False, True, ["torch 2.12.0 → 2.13.0"], TORCH_MOVED,
     "still-needed"),
    ("pin-moved+unknown-tracker", "unknown", recorded(OLD_TORCH), None, False, True,
     ["upstream state unknown (timeout)", "torch 2.12.0 → 2.13.0"], TORCH_MOVED, "still-needed"),
    ("pin-moved+404", "not found", recorded(OLD_TORCH), None, False, True,
     ["upstream state unknown (not found)", "torch 2.12.0 → 2.13.0"], TORCH_MOVED, "still-needed"),
    ("two-pins-moved", "open", recorded({"torch": "2.12.0", "transformers": "5.22.0"}), None, False, True,
     ["torch 2.12.0 → 2.13.0", "transformers 5.22.0 → 5.23.0"],
     {"torch": ("2.12.0", "2.13.0"), "transformers": ("5.22.0", "5.23.0")}, "still-needed"),
    ("newly-recorded-package", "open", recorded({"transformers": "5.23.0"}), None, False, True,
     ["torch (unpinned) → 2.13.0"], {"torch": (None, "2.13.0")}, "still-needed"),
    ("closed-is-a-trigger", "closed:completed", recorded(AT_PINS), None, False, True, ["upstream closed:completed"],
     {}, "still-needed"),
    ("merged-is-a-trigger", "merged", recorded(AT_PINS), None, False, True, ["upstream merged"], {}, "still-needed"),
    ("closed+pin-moved", "closed:completed", recorded(OLD_TORCH, state="closed:completed"), None, False, True,
     ["upstream closed:completed", "torch 2.12.0 → 2.13.0"], TORCH_MOVED, "still-needed"),
    ("closed-and-rechecked", "closed:completed", recorded(AT_PINS, state="closed:completed"), None, False, False,
     [f"upstream closed:completed, but still failing at these pins on {ON}; {RECHECK}", SINCE], {}, "still-needed"),
    ("closed-and-changed", "closed:completed", recorded(AT_PINS, "changed", "closed:completed"), None, False, False,
     [f"upstream closed:completed, but still failing at these pins on {ON}; {RECHECK}", SINCE], {}, "changed"),
    ("merged-and-rechecked", "merged", recorded(AT_PINS, state="merged"), None, False, False,
     [f"upstream merged, but still failing at these pins on {ON}; {RECHECK}", SINCE], {}, "still-needed"),
    ("not-reproduced-and-closed-is-not-rerun", "closed:completed",
     recorded(AT_PINS, "not-reproduced", "closed:completed"), None, False, False,
     [f"upstream closed:completed, but not reproduced at these pins on {ON}; {RECHECK}", SINCE], {},
     "not-reproduced"),
    ("closed-after-an-unknown-verdict-is-rerun", "closed:completed", recorded(AT_PINS, "unknown", "closed:completed"),
     None, False, True, ["upstream closed:completed"], {}, "unknown"),
    ("not-reproduced-not-rerun", "open", recorded(AT_PINS, "not-reproduced"), None, False, False, [NOTHING], {},
     "not-reproduced"),
    ("not-planned-blocks", "closed:not_planned", recorded(OLD_TORCH), None, False, False,
     [f"upstream closed:not_planned: {HUMAN}", "torch 2.12.0 → 2.13.0"], TORCH_MOVED, "still-needed"),
    ("not-planned+nothing-moved", "closed:not_planned", recorded(AT_PINS), None, False, False,
     [f"upstream closed:not_planned: {HUMAN}"], {}, "still-needed"),
    ("reopened-blocks", "reopened", recorded(None), None, False, False,
     [f"upstream open:reopened: {HUMAN}", "never verified"], {}, None),
    ("unmerged-pull-blocks", "closed:unmerged", recorded(OLD_TORCH), None, False, False,
     [f"upstream closed:unmerged: {HUMAN}", "torch 2.12.0 → 2.13.0"], TORCH_MOVED, "still-needed"),
    ("force", "open", recorded(AT_PINS), None, True, True, ["forced (--all / --entry)"], {}, "still-needed"),
    ("force-overrides-a-human-block", "closed:not_planned", recorded(AT_PINS), None, True, True,
     [f"upstream closed:not_planned: {HUMAN}", "forced (--all / --entry)"], {}, "still-needed"),
    ("candidate-in-stack", "open", recorded(AT_PINS), "torch==2.14.0", False, True,
     ["torch 2.13.0 → 2.14.0", "candidate torch==2.14.0"], {"torch": ("2.13.0", "2.14.0")}, "still-needed"),
    # Never verified: nothing was seen failing, so nothing can have moved since (a pass is not-reproduced).
    ("candidate-never-verified", "open", recorded(None), "torch==2.14.0", False, True,
     ["never verified", "candidate torch==2.14.0"], {}, None),
    ("candidate-blocked", "closed:not_planned", recorded(AT_PINS), "torch==2.14.0", False, False,
     [f"upstream closed:not_planned: {HUMAN}", "torch 2.13.0 → 2.14.0", "candidate torch==2.14.0"],
     {"torch": ("2.13.0", "2.14.0")}, "still-needed"),
    # The move is judged against the versions the entry was verified at, not the pins: verified at torch
    # 2.12.0, the candidate torch==2.12.0 is that very release (the pin 2.13.0 says nothing about it).
    ("candidate-is-the-verified-release", "open", recorded(OLD_TORCH), "torch==2.12.0", False, True,
     ["candidate torch==2.12.0"], {}, "still-needed"),
    ("candidate-after-an-older-verification", "open", recorded(OLD_TORCH), "torch==2.14.0", False, True,
     ["torch 2.12.0 → 2.14.0", "candidate torch==2.14.0"], {"torch": ("2.12.0", "2.14.0")}, "still-needed"),
    ("candidate-outside-stack", "open", recorded(AT_PINS), "onnx==1.24.0", False, False, [NOTHING], {},
     "still-needed"),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "records", "candidate", "force", "due", "reasons", "moved", "last"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])  # fmt: skip
def test_plan_table(upstream, records, candidate, force, due, reasons, moved, last):
    # force only when the row forces: a plan asked for without --all / --entry is not forced
    forced = {"force": True} if force else {}
    plan = plan_entry(SUBJECT, STATES[upstream], PINS, records, candidate=candidate, **forced)
    assert (plan.entry_id, plan.due, plan.moved_pins, plan.last_verdict) == ("e", due, moved, last), plan.reasons
    assert plan.reasons == reasons


def test_unpinned_on_either_side_is_named():
    """A package the pin file dropped, or one the last verification did not record, still reads as a move."""
    plan = plan_entry(SUBJECT, STATES["open"], {"torch": "2.13.0"}, recorded({"torch": "2.13.0", "transformers": "5.23.0"}))
    assert plan.reasons == ["transformers 5.23.0 → (unpinned)"] and plan.due
    assert plan.versions == {"torch": "2.13.0", "transformers": None}


def test_candidate_stands_in_the_versions():
    plan = plan_entry(SUBJECT, STATES["open"], PINS, recorded(AT_PINS), candidate="torch==2.14.0")
    assert plan.versions == {"torch": "2.14.0", "transformers": "5.23.0"} and plan.candidate == "torch==2.14.0"


def test_candidate_matches_the_stack_by_normalised_name():
    subject = Subject("e", ENTRY, "onnx", (), ("torch", "onnx_ir"), None)
    plan = plan_entry(subject, None, {"torch": "2.13.0", "onnx-ir": "0.1.0"},
                      {"e": Verification("e", ON, {"torch": "2.13.0", "onnx_ir": "0.1.0"})}, candidate="ONNX-IR==0.2.0")
    assert (plan.due, plan.candidate) == (True, "ONNX-IR==0.2.0")
    assert plan.moved_pins == {"onnx_ir": ("0.1.0", "0.2.0")} and plan.versions["onnx_ir"] == "0.2.0"


def test_no_candidate_is_none_not_empty():
    for candidate in (None, "onnx==1.24.0"):  # none given, or one outside the stack
        assert plan_entry(SUBJECT, STATES["open"], PINS, recorded(AT_PINS), candidate=candidate).candidate is None
        assert plan_entry(SUBJECT, STATES["open"], PINS, recorded(AT_PINS), candidate=candidate).versions == PINS


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("onnx==1.24.0", [("onnx", "1.24.0")]), (" onnx == 1.24.0 ", [("onnx", "1.24.0")]),
     # the name is what precedes the first ==; the rest is the version pip is asked for (and rejects)
     ("onnx==1.24.0==2", [("onnx", "1.24.0==2")]),
     # a coupled group, moved together
     ("torch==2.14.0,executorch==1.6.0", [("torch", "2.14.0"), ("executorch", "1.6.0")])],
)  # fmt: skip
def test_parse_candidate(text, parsed):
    assert parse_candidate(text) == parsed


@pytest.mark.parametrize("text", ["onnx", "onnx=1.24.0", "onnx==", "==1.24.0", " == ", "onnx>=1.24.0"])
def test_parse_candidate_refuses_anything_but_pkg_eq_version(text):
    with pytest.raises(ValueError) as raised:
        parse_candidate(text)
    assert str(raised.value) == f"--candidate must be PKG==VERSION, got {text.strip()!r}"
    with pytest.raises(ValueError, match="names a package twice"):
        parse_candidate("onnx==1.24.0,ONNX==1.25.0")


def test_a_group_candidate_stands_in_for_each_of_its_packages_in_the_stack():
    subject = Subject("e", ENTRY, "executorch", (), ("torch", "transformers", "executorch", "torchao"))
    verified = {"e": Verification("e", ON, {"torch": "2.13.0", "transformers": "5.23.0", "executorch": "1.5.1",
                                            "torchao": "0.18.0"})}  # fmt: skip
    plan = plan_entry(subject, None, PINS | {"executorch": "1.5.1", "torchao": "0.18.0"}, verified,
                      candidate="torch==2.14.0,executorch==1.6.0,onnx==1.24.0")  # fmt: skip
    assert plan.candidate == "torch==2.14.0,executorch==1.6.0"  # onnx is not in this stack
    assert plan.moved_pins == {"torch": ("2.13.0", "2.14.0"), "executorch": ("1.5.1", "1.6.0")}


# describe_state: the word stored in verified.toml (upstream_state) and shown in reports.
WORDS = [
    ("none", "none"), ("open", "open"), ("reopened", "open:reopened"), ("closed:completed", "closed:completed"),
    ("closed:not_planned", "closed:not_planned"), ("merged", "merged"), ("closed:unmerged", "closed:unmerged"),
    ("unknown", "unknown"), ("not found", "not found"),
]  # fmt: skip
EXTRA_STATES = {
    "closed-without-reason": (UpstreamState(REF, "issue", "closed"), "closed:unspecified"),
    "open-pull": (UpstreamState(REF, "pull", "open"), "open"),
    "reopened-pull": (UpstreamState(REF, "pull", "open", "reopened"), "open:reopened"),
    "merged-flag-on-an-issue": (UpstreamState(REF, "issue", "closed", "completed", merged=True), "closed:completed"),
}


@pytest.mark.parametrize(("name", "word"), WORDS, ids=[w[0] for w in WORDS])
def test_describe_state(name, word):
    assert describe_state(STATES[name]) == word


@pytest.mark.parametrize("name", list(EXTRA_STATES))
def test_describe_state_edges(name):
    upstream, word = EXTRA_STATES[name]
    assert describe_state(upstream) == word


# (state, needs a human, unknown): closures other than a fix and reopenings need a human; an answer the
# tracker could not give is unknown, never a closure, and never blocks.
JUDGED = [
    ("none", False, False), ("open", False, False), ("reopened", True, False), ("closed:completed", False, False),
    ("closed:not_planned", True, False), ("merged", False, False), ("closed:unmerged", True, False),
    ("unknown", False, True), ("not found", False, True),
]  # fmt: skip


@pytest.mark.parametrize(("name", "human", "unknown"), JUDGED, ids=[j[0] for j in JUDGED])
def test_needs_human_and_is_unknown(name, human, unknown):
    assert (needs_human(STATES[name]), is_unknown(STATES[name])) == (human, unknown)


def test_an_answer_with_an_error_never_needs_a_human():
    """A snapshot row that carries both an error and closed fields (a malformed answer) is not a closure."""
    assert not needs_human(UpstreamState(REF, "issue", "closed", "not_planned", error="malformed JSON"))
    assert not needs_human(UpstreamState(REF, "issue", "open", "reopened", reachable=False, error="timeout"))


@pytest.mark.parametrize(
    ("recorded_version", "pinned", "same"),
    [("2.13.0", "2.13.0", True), ("2.13.0+cpu", "2.13.0", True), ("2.12.0+cpu", "2.13.0", False),
     (None, "2.13.0", False), ("2.13.0", None, False), (None, None, True), ("not installed", "2.13.0", False)],
)  # fmt: skip
def test_same_version(recorded_version, pinned, same):
    assert same_version(recorded_version, pinned) is same


ENTRY_TOML = (
    '[[entry]]\nid = "e"\nmodels = ["BertModel", "GPT2Model"]\nbackend = "onnx"\nscope = "all"\n'
    'upstream = "https://github.com/microsoft/onnxscript/issues/7"\n'
    'dependency = "onnxscript"\nreason = "r"\nfailure = "x"\nadded = 2026-01-01\n'
)
SKIP_TOML = ENTRY_TOML.replace('backend = "onnx"', 'backend = "dynamo"') + 'model_change = "m"\n'


def _load(tmp_path: Path, skips: str = "", optimize: str = ""):
    (tmp_path / "onnx_disable_optimize.toml").write_text(optimize)
    (tmp_path / "export_skips.toml").write_text(skips)
    return load_ledger(tmp_path).by_id("e")


def test_entry_subject_is_the_entry_as_every_step_reads_it(tmp_path: Path):
    subject = entry_subject(_load(tmp_path, optimize=ENTRY_TOML))
    assert subject == Subject(
        "e", ENTRY, "onnx",
        (Export("BertModel", "onnx", False), Export("BertModel", "onnx", True), Export("GPT2Model", "onnx", False),
         Export("GPT2Model", "onnx", True)),
        ("torch", "transformers", "onnx", "onnxscript", "onnxruntime"),
        "https://github.com/microsoft/onnxscript/issues/7", "onnxscript", "x", "ONNX_DISABLE_OPTIMIZE",
    )  # fmt: skip
    assert [e.mode for e in subject.exports] == ["static", "dynamic", "static", "dynamic"]


def test_entry_subject_reruns_the_modes_of_its_reproducer(tmp_path: Path):
    narrowed = entry_subject(_load(tmp_path, skips=SKIP_TOML + "\n[entry.repro.export]\ndynamic = true\n"))
    assert [(e.model, e.dynamic) for e in narrowed.exports] == [("BertModel", True), ("GPT2Model", True)]
    assert narrowed.list_name == "EXPORT_SKIPS"


def test_a_ledger_entry_is_planned_as_its_subject(tmp_path: Path):
    entry = _load(tmp_path, skips=SKIP_TOML)
    assert as_subject(entry) == entry_subject(entry)
    assert as_subject(SUBJECT) is SUBJECT
    plan = plan_entry(entry, STATES["open"], PINS, {})
    assert (plan.entry_id, plan.due, plan.reasons, plan.versions) == ("e", True, ["never verified"], PINS)


def _workaround(backend: str, dependency: str | None) -> Workaround:
    return Workaround("_fix_x", "patch", backend, func=lambda: None, upstream="https://github.com/o/r/issues/2",
                      dependency=dependency)  # fmt: skip


EXPORTS = (Export("BertModel", "executorch", False), Export("GPT2Model", "executorch", True))
ET_STACK = ("torch", "transformers", "executorch", "torchao")
# (backend, dependency, backend of the subject, stack): a backend-scoped workaround belongs to its backend's
# stack; its dependency joins the stack unless the stack has it already (under any spelling).
WORKAROUND_ROWS = [
    ("executorch.xnnpack", None, "executorch", ET_STACK),
    ("executorch", "executorch", "executorch", ET_STACK),
    ("executorch.xnnpack", "TorchAO", "executorch", ET_STACK),
    ("executorch", "pytorch_tokenizers", "executorch", (*ET_STACK, "pytorch_tokenizers")),
    ("dynamo", "onnx-ir", "dynamo", ("torch", "transformers", "onnx-ir")),
]  # fmt: skip


@pytest.mark.parametrize(("backend", "dependency", "subject_backend", "stack"), WORKAROUND_ROWS)
def test_workaround_subject(backend, dependency, subject_backend, stack):
    subject = workaround_subject(_workaround(backend, dependency), iter(EXPORTS))
    assert subject == Subject("_fix_x", WORKAROUND, subject_backend, EXPORTS, stack,
                              "https://github.com/o/r/issues/2", dependency, None)  # fmt: skip
    assert subject.list_name is None
