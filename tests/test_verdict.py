"""bot.audit.verdict, table-driven: upstream state × pins moved × outcomes → one verdict (pure: no I/O, no exports).

Each row would fail if the logic it names were broken: "removable whenever every run passes" fails the
open/unknown/never-verified rows, "1 of 2 passing counts as passing" fails the flaky rows, a pass that
cannot show its workaround was off (or ran at other versions) must never be removable.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from bot.audit.plan import ENTRY, WORKAROUND, Export, Plan, Subject, plan_entry
from bot.audit.upstream import UpstreamState
from bot.audit.verdict import (
    CHANGED,
    HUMAN,
    NEEDS_HUMAN,
    NOT_DUE,
    NOT_REPRODUCED,
    REMOVABLE,
    REMOVAL_VERDICTS,
    RERUN_VERDICTS,
    STILL_NEEDED,
    SUPERSEDED,
    UNKNOWN,
    Verdict,
    error_excerpt,
    evidence_of,
    failure_line,
    first_error_line,
    next_superseders,
    proves_takeover,
    unproven_pass,
    verdict,
)
from bot.audit.verification import Verification
from exporters.ledger import UpstreamRef, load_ledger

PINS = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.2", "onnxruntime": "1.32.0"}
STACK = ("torch", "transformers")
FAILURE = r"Could not guard on data-dependent expression"
URL = "https://github.com/pytorch/pytorch/issues/1"
REF = UpstreamRef("pytorch", "pytorch", 1, "issue")

SKIP = Subject("e", ENTRY, "dynamo", (Export("BertModel", "dynamo", False),), STACK, URL, "torch", FAILURE,
               "EXPORT_SKIPS")  # fmt: skip
TWO_CLASSES = Subject("e", ENTRY, "dynamo", (Export("BertModel", "dynamo", False), Export("GPT2Model", "dynamo", False)),
                      STACK, URL, "torch", FAILURE, "EXPORT_SKIPS")  # fmt: skip
ODO = Subject("e", ENTRY, "onnx", (Export("BertModel", "onnx", False),), (*STACK, "onnx", "onnxscript", "onnxruntime"),
              URL, "onnxscript", "ShapeInferenceError", "ONNX_DISABLE_OPTIMIZE")  # fmt: skip
GUARD_TYPE = Subject("e", ENTRY, "dynamo", SKIP.exports, STACK, URL, "torch", "GuardOnDataDependentSymNode",
                     "EXPORT_SKIPS")  # fmt: skip
TIMES_OUT = Subject("e", ENTRY, "dynamo", SKIP.exports, STACK, URL, "torch", "^timeout$", "EXPORT_SKIPS")
PROBE = Subject("_fix_x", WORKAROUND, "dynamo", (Export("BertModel", "dynamo", False),), STACK, URL, "torch", None)
SPEED = Subject("_patch_x", WORKAROUND, "dynamo", PROBE.exports, STACK, URL, "torch", None, speed=True)


def state(kind: str) -> UpstreamState | None:
    return {
        "none": None,
        "open": UpstreamState(REF, "issue", "open"),
        "reopened": UpstreamState(REF, "issue", "open", "reopened"),
        "closed:completed": UpstreamState(REF, "issue", "closed", "completed"),
        "closed:not_planned": UpstreamState(REF, "issue", "closed", "not_planned"),
        "merged": UpstreamState(REF, "pull", "closed", merged=True),
        "unknown": UpstreamState(REF, None, None, reachable=False, error="connection refused"),
        "not found": UpstreamState(REF, None, None, error="not found"),
    }[kind]


def record(kind: str, subject: Subject = SKIP) -> dict[str, Verification]:
    """never: no verification; same: failed at these pins; moved: failed at torch 2.12.0 (pin moved since);
    not-reproduced-moved: passed at torch 2.12.0 already."""
    versions = {n: PINS[n] for n in subject.stack}
    return {
        "never": {},
        "same": {subject.id: Verification(subject.id, datetime.date(2026, 1, 2), versions, "x", STILL_NEEDED, "open")},
        "moved": {subject.id: Verification(subject.id, datetime.date(2026, 1, 2), versions | {"torch": "2.12.0"}, "x",
                                           STILL_NEEDED, "open")},
        "changed-moved": {subject.id: Verification(subject.id, datetime.date(2026, 1, 2), versions | {"torch": "2.12.0"},
                                                   "x", CHANGED, "open")},
        "superseded-moved": {subject.id: Verification(subject.id, datetime.date(2026, 1, 2),
                                                      versions | {"torch": "2.12.0"}, "x", SUPERSEDED, "open")},
        "not-reproduced-moved": {subject.id: Verification(subject.id, datetime.date(2026, 1, 2),
                                                          versions | {"torch": "2.12.0"}, "x", NOT_REPRODUCED, "open")},
    }[kind]  # fmt: skip


def run(status: str = "pass", error: str | None = None, subject: Subject = SKIP, **changes: Any) -> dict[str, Any]:
    """An outcome as ``export --repro ID`` records it: the reproducer, its workaround off, at the pins."""
    outcome = {
        "model": "BertModel", "backend": subject.backend, "dynamic": False, "status": status, "error": error,
        "max_abs_diff": {"out": 1e-6} if status == "pass" else {}, "seconds": 1.0,
        "versions": {n: PINS[n] + "+cpu" if n == "torch" else PINS[n] for n in subject.stack},
    }  # fmt: skip
    if subject.kind == ENTRY:
        outcome |= {"repro": subject.id, "workaround_off": [subject.id]}
        if subject.backend == "onnx":
            outcome["optimize"] = True
    else:
        outcome["workarounds_disabled"] = [subject.id]
    return outcome | changes


PASS = run()
MATCHING = run("failed", "Could not guard on data-dependent expression Eq(u0, 1)")
DIFFERENT = run("failed", "RuntimeError: shape mismatch")

AT = "torch 2.13.0, transformers 5.23.0"  # the stack a reason names: every package at its planned version
ALL_1 = "all 1 runs pass and match eager (max abs diff 1e-06)"
ALL_2 = "all 2 runs pass and match eager (max abs diff 1e-06)"
MOVED = "; moved since last verification: torch 2.12.0 → 2.13.0"
REPRO = "fix the entry or its [entry.repro]: never removed on this evidence"
NO_PROOF = ": not evidence that it can go"
FLAKY = "1 of 2 runs passed (nondeterministic)"
STILL = f"still fails as recorded (/{FAILURE}/) at {AT}"
OTHER = f"fails differently: expected /{FAILURE}/, got failed: RuntimeError: shape mismatch\nfailed"
LONG = run("failed", "RuntimeError: " + "x" * 400)


def claims(passed: str, last_seen: str, at: str = AT) -> str:
    return f"{passed} at {at}, where the entry claims /{FAILURE}/ ({last_seen}); {REPRO}"


# (id, subject, upstream, record, outcomes, verdict, reasons): the reasons are what the report, the dashboard
# and the PR body show; each names the runs, the state word, the stack and the versions it speaks about.
ROWS = [
    # Every run passes: only a pin move after a seen failure removes an entry.
    ("pass+moved+open", SKIP, "open", "moved", [PASS, PASS], REMOVABLE, [f"{ALL_2}; upstream open{MOVED}"]),
    ("pass+moved+unknown-tracker", SKIP, "unknown", "moved", [PASS, PASS], REMOVABLE,
     [f"{ALL_2}; upstream unknown{MOVED}"]),
    ("pass+moved+no-upstream", SKIP, "none", "moved", [PASS, PASS], REMOVABLE, [f"{ALL_2}; upstream none{MOVED}"]),
    ("pass+moved+closed", SKIP, "closed:completed", "moved", [PASS, PASS], REMOVABLE,
     [f"{ALL_2}; upstream closed:completed{MOVED}"]),
    # A changed verification saw the reproducer fail differently: the recorded failure was never seen, so a
    # pass after a move is no proof the move fixed it. Superseded probes did see it: a move then removes.
    ("pass+moved-after-changed", SKIP, "open", "changed-moved", [PASS, PASS], NOT_REPRODUCED,
     [claims(ALL_2, "at the last verification it failed differently (changed): the recorded failure was never seen "
                    "at the versions it was verified at, so nothing shows the move fixed it")]),
    ("pass+moved-after-superseded", SKIP, "open", "superseded-moved", [PASS, PASS], REMOVABLE,
     [f"{ALL_2}; upstream open{MOVED}"]),
    ("pass+same-pins+open", SKIP, "open", "same", [PASS, PASS], NOT_REPRODUCED,
     [claims(ALL_2, "last verified still-needed, and no pin of its stack moved since")]),
    ("pass+same-pins+unknown-tracker", SKIP, "unknown", "same", [PASS, PASS], NOT_REPRODUCED,
     [claims(ALL_2, "last verified still-needed, and no pin of its stack moved since")]),
    ("pass+same-pins+closed", SKIP, "closed:completed", "same", [PASS, PASS], NOT_REPRODUCED,
     [claims(ALL_2, "last verified still-needed, and no pin of its stack moved since")]),
    ("pass+never-verified+closed", SKIP, "closed:completed", "never", [PASS, PASS], NOT_REPRODUCED,
     [claims(ALL_2, "its reproducer was never seen failing")]),
    ("pass+never-verified+open", SKIP, "open", "never", [PASS], NOT_REPRODUCED,
     [claims(ALL_1, "its reproducer was never seen failing")]),
    ("pass+moved-but-never-reproduced", SKIP, "open", "not-reproduced-moved", [PASS], NOT_REPRODUCED,
     [claims(ALL_1, "its reproducer did not fail at the last verification either")]),
    ("pass+not-planned", SKIP, "closed:not_planned", "moved", [PASS, PASS], HUMAN,
     [f"{ALL_2}, but upstream closed:not_planned: a human decides"]),
    ("pass+reopened", SKIP, "reopened", "moved", [PASS], HUMAN, [f"{ALL_1}, but upstream open:reopened: a human decides"]),
    # The max abs diff is the largest any run recorded; runs that recorded none are left out of it.
    ("pass+largest-diff", SKIP, "open", "moved", [run(max_abs_diff={"a": 2e-6, "b": 5e-7}), run(max_abs_diff={})],
     REMOVABLE, [f"all 2 runs pass and match eager (max abs diff 2e-06); upstream open{MOVED}"]),
    ("pass+no-diff-recorded", SKIP, "open", "moved", [run(max_abs_diff={})], REMOVABLE,
     [f"all 1 runs pass and match eager; upstream open{MOVED}"]),
    # A pass that cannot show it ran without the workaround, at the planned versions, is no evidence.
    ("pass-without-repro", SKIP, "open", "moved", [PASS, run(repro=None)], HUMAN,
     [f"BertModel (static) passed, but it did not export the entry's reproducer (--repro e){NO_PROOF}"]),
    ("pass-gate-not-skipped", SKIP, "open", "moved", [run(workaround_off=[], model="GPT2Model", dynamic=True)], HUMAN,
     ["GPT2Model (dynamic) passed, but it does not show the entry's workaround was off (the ledger gate did not "
      f"apply and get skipped){NO_PROOF}"]),
    ("pass-gate-shown-as-disabled-workaround", SKIP, "open", "moved", [run(workaround_off=[], workarounds_disabled=["e"])],
     HUMAN, ["BertModel (static) passed, but it does not show the entry's workaround was off (the ledger gate did not "
             f"apply and get skipped){NO_PROOF}"]),
    ("odo-optimizer-off", ODO, "open", "moved", [run(subject=ODO, optimize=False)], HUMAN,
     [f"BertModel (static) passed, but it does not show the onnxscript optimizer was on{NO_PROOF}"]),
    ("odo-optimizer-unrecorded", ODO, "open", "moved", [run(subject=ODO, optimize=None)], HUMAN,
     [f"BertModel (static) passed, but it does not show the onnxscript optimizer was on{NO_PROOF}"]),
    ("pass-at-other-versions", SKIP, "open", "moved", [run(versions={"torch": "2.12.0", "transformers": "5.23.0"})],
     HUMAN, [f"BertModel (static) passed, but it ran with torch 2.12.0 instead of 2.13.0{NO_PROOF}"]),
    ("pass-recording-no-versions", SKIP, "open", "moved", [run(versions={})], HUMAN,
     ["BertModel (static) passed, but it ran with torch (none recorded) instead of 2.13.0, transformers (none "
      f"recorded) instead of 5.23.0{NO_PROOF}"]),
    ("odo-pass+moved", ODO, "open", "moved", [run(subject=ODO)], REMOVABLE, [f"{ALL_1}; upstream open{MOVED}"]),
    # 1 of 2 runs passing is never a pass.
    ("1-of-2+matching+moved", SKIP, "closed:completed", "moved", [PASS, MATCHING], STILL_NEEDED, [STILL, FLAKY]),
    ("1-of-2+different+moved", SKIP, "closed:completed", "moved", [PASS, DIFFERENT], CHANGED, [OTHER, FLAKY]),
    ("1-of-2-classes", TWO_CLASSES, "closed:completed", "moved", [PASS, MATCHING], STILL_NEEDED, [STILL, FLAKY]),
    # Failures.
    ("matching+open", SKIP, "open", "moved", [MATCHING, MATCHING], STILL_NEEDED, [STILL]),
    ("matching+closed", SKIP, "closed:completed", "never", [MATCHING], STILL_NEEDED, [STILL]),
    ("different+open", SKIP, "open", "same", [MATCHING, DIFFERENT], CHANGED, [OTHER]),
    ("different-error-is-cut-at-300", SKIP, "open", "same", [LONG], CHANGED,
     [f"fails differently: expected /{FAILURE}/, got failed: " + ("RuntimeError: " + "x" * 400)[:300]]),
    ("timeout-is-not-matching", SKIP, "open", "same", [run("timeout", "timed out after 60 s")], CHANGED,
     [f"fails differently: expected /{FAILURE}/, got timeout: timed out after 60 s\ntimeout"]),
    ("skipped-is-not-a-pass", SKIP, "open", "moved", [run("skipped")], CHANGED,
     [f"fails differently: expected /{FAILURE}/, got skipped: skipped"]),
    ("error-type-is-shown", SKIP, "open", "same", [run("failed", "boom", error_type="TypeError")], CHANGED,
     [f"fails differently: expected /{FAILURE}/, got failed: TypeError\nboom\nfailed"]),
    # The failure regex is searched in the error's type, its message and the status.
    ("signature-in-the-error-type", GUARD_TYPE, "open", "same",
     [run("failed", "Could not guard", error_type="GuardOnDataDependentSymNode")], STILL_NEEDED,
     [f"still fails as recorded (/GuardOnDataDependentSymNode/) at {AT}"]),
    ("signature-in-the-status", TIMES_OUT, "open", "same", [run("timeout")], STILL_NEEDED,
     [f"still fails as recorded (/^timeout$/) at {AT}"]),
    # A registered workaround records no failure: any failure counts; its pass needs it disabled.
    ("probe-pass+closed", PROBE, "closed:completed", "never", [run(subject=PROBE)], REMOVABLE,
     [f"{ALL_1}; upstream closed:completed"]),
    ("probe-pass+merged+moved", PROBE, "merged", "moved", [run(subject=PROBE)], REMOVABLE,
     [f"{ALL_1}; upstream merged{MOVED}"]),
    ("probe-pass+open+same", PROBE, "open", "same", [run(subject=PROBE)], HUMAN,
     [f"{ALL_1} with upstream open and no pin moved: flaky or mis-recorded entry?"]),
    ("probe-pass+none+never", PROBE, "none", "never", [run(subject=PROBE)], HUMAN,
     [f"{ALL_1} with upstream none and no pin moved: flaky or mis-recorded entry?"]),
    ("probe-pass+unknown+same", PROBE, "unknown", "same", [run(subject=PROBE)], UNKNOWN,
     [f"{ALL_1}, but upstream unknown and no pin moved: not enough to remove"]),
    ("probe-pass+404+same", PROBE, "not found", "same", [run(subject=PROBE)], UNKNOWN,
     [f"{ALL_1}, but upstream unknown and no pin moved: not enough to remove"]),
    ("probe-pass+not-planned", PROBE, "closed:not_planned", "moved", [run(subject=PROBE)], HUMAN,
     [f"{ALL_1}, but upstream closed:not_planned: a human decides"]),
    ("probe-pass-not-disabled", PROBE, "closed:completed", "never", [run(subject=PROBE, workarounds_disabled=[])],
     HUMAN, [f"BertModel (static) passed, but it does not show _fix_x was disabled{NO_PROOF}"]),
    ("probe-pass-gate-skipped-is-not-disabled", PROBE, "closed:completed", "never",
     [run(subject=PROBE, workarounds_disabled=[], workaround_off=["_fix_x"])], HUMAN,
     [f"BertModel (static) passed, but it does not show _fix_x was disabled{NO_PROOF}"]),
    ("probe-pass-at-other-versions", PROBE, "closed:completed", "never",
     [run(subject=PROBE, versions={"torch": "2.13.0", "transformers": "5.22.0"})], HUMAN,
     [f"BertModel (static) passed, but it ran with transformers 5.22.0 instead of 5.23.0{NO_PROOF}"]),
    ("probe-failure", PROBE, "closed:completed", "moved", [run("failed", "anything", subject=PROBE)], STILL_NEEDED,
     [f"fails without it at {AT}: BertModel (static) failed: anything"]),
    ("probe-failure-after-a-pass", PROBE, "open", "moved",
     [run(subject=PROBE), run("failed", "advice\nValueError: bad view\nmore advice", subject=PROBE, model="GPT2Model",
                              dynamic=True)],
     STILL_NEEDED, [f"fails without it at {AT}: GPT2Model (dynamic) failed: ValueError: bad view", FLAKY]),
    ("probe-crash-without-error", PROBE, "open", "moved", [run("crashed", subject=PROBE)], STILL_NEEDED,
     [f"fails without it at {AT}: BertModel (static) crashed: crashed"]),
    # A speed workaround makes the same artifact faster: passing without it is expected, whatever upstream says.
    ("speed-pass+closed+moved", SPEED, "closed:completed", "moved", [run(subject=SPEED)], HUMAN,
     [f"{ALL_1}, as exports do without a speed workaround: removable only once it saves no time at {AT} "
      "(time an export it fires in, as it is and with `--without _patch_x`)"]),
    ("speed-failure", SPEED, "open", "moved", [run("failed", "anything", subject=SPEED)], STILL_NEEDED,
     [f"fails without it at {AT}: BertModel (static) failed: anything"]),
]  # fmt: skip


@pytest.mark.parametrize(("subject", "upstream", "recorded", "outcomes", "expected", "reasons"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])  # fmt: skip
def test_verdict_table(subject, upstream, recorded, outcomes, expected, reasons):
    found = state(upstream)
    plan = plan_entry(subject, found, PINS, record(recorded, subject), force=True)
    result = verdict(subject, plan, found, outcomes)
    assert (result.entry_id, result.verdict, result.reasons) == (subject.id, expected, reasons)
    assert result.evidence == [evidence_of(o) for o in outcomes]


def test_a_verdict_on_a_ledger_entry_reads_it_as_its_subject(tmp_path):
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(
        f'[[entry]]\nid = "e"\nmodels = ["BertModel"]\nbackend = "dynamo"\nscope = "static"\nupstream = "{URL}"\n'
        f'dependency = "torch"\nreason = "r"\nmodel_change = "m"\nfailure = "{FAILURE}"\nadded = 2026-01-01\n'
    )
    entry = load_ledger(tmp_path).by_id("e")
    plan = plan_entry(entry, state("open"), PINS, record("moved"))
    assert verdict(entry, plan, state("open"), [PASS]) == Verdict("e", REMOVABLE, [f"{ALL_1}; upstream open{MOVED}"],
                                                                  [evidence_of(PASS)])  # fmt: skip


# Where a pin is unpinned (dropped from the pin file, or never recorded), the reasons say so.
UNPINNED_PLAN = Plan("e", True, [], {"torch": ("2.12.0", None), "onnx": (None, "1.24.0")},
                     versions={"torch": None, "transformers": "5.23.0"}, last_verdict=STILL_NEEDED)  # fmt: skip


def test_unpinned_packages_are_named_in_a_removal():
    result = verdict(SKIP, UNPINNED_PLAN, state("open"), [run(versions={"transformers": "5.23.0"})])
    assert result.reasons == [f"{ALL_1}; upstream open; moved since last verification: torch 2.12.0 → (unpinned), "
                              "onnx (unpinned) → 1.24.0"]  # fmt: skip
    assert result.verdict == REMOVABLE


def test_unpinned_packages_are_named_in_the_stack():
    result = verdict(SKIP, UNPINNED_PLAN, state("open"), [MATCHING])
    assert result.reasons == [f"still fails as recorded (/{FAILURE}/) at torch (unpinned), transformers 5.23.0"]


# Not re-run (the plan was not due): no outcomes, no evidence.
NOT_RERUN = [
    ("open", NOT_DUE, ["nothing moved since the last verification"]),
    ("none", NOT_DUE, ["no GitHub upstream to watch", "nothing moved since 2026-01-02"]),
    ("closed:not_planned", HUMAN, ["upstream closed:not_planned: decide whether the entry stays"]),
    ("reopened", HUMAN, ["upstream open:reopened: decide whether the entry stays"]),
    ("unknown", UNKNOWN, ["upstream state unknown: connection refused"]),
    ("not found", UNKNOWN, ["upstream state unknown: not found"]),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "expected", "reasons"), NOT_RERUN, ids=[r[0] for r in NOT_RERUN])
def test_verdict_without_reruns(upstream, expected, reasons):
    found = state(upstream)
    plan = plan_entry(SKIP, found, PINS, record("same"))
    assert not plan.due
    assert verdict(SKIP, plan, found, []) == Verdict("e", expected, reasons, [])


def test_evidence_carries_versions_and_what_was_left_off():
    plan = plan_entry(SKIP, state("open"), PINS, record("moved"), force=True)
    [evidence] = verdict(SKIP, plan, state("open"), [PASS]).evidence
    assert evidence["versions"] == {"torch": "2.13.0+cpu", "transformers": "5.23.0"}
    assert evidence["workaround_off"] == ["e"]


def test_unproven_pass_accepts_a_local_version_tag():
    plan = plan_entry(SKIP, state("open"), PINS, record("moved"), force=True)
    assert unproven_pass(SKIP, plan, PASS) is None  # "2.13.0+cpu" is release 2.13.0


def test_evidence_is_what_a_reviewer_reads_of_each_run():
    command = "exportbot export GPT2Model --backend dynamo --dynamic --repro e"
    outcome = run("failed", "E" * 600, model="GPT2Model", dynamic=True, run=2, seconds=1.5,
                  max_abs_diff={"a": 1e-6, "b": 3e-6}, workarounds_disabled=["_fix_y"],
                  workarounds_fired={"_fix_z": 2, "_fix_a": 1}, command=command)  # fmt: skip
    assert evidence_of(outcome) == {
        "model": "GPT2Model", "backend": "dynamo", "mode": "dynamic", "run": 2, "status": "failed", "error": "E" * 500,
        "max_abs_diff": 3e-6, "seconds": 1.5, "versions": {"torch": "2.13.0+cpu", "transformers": "5.23.0"},
        "workaround_off": ["e", "_fix_y"], "workarounds_fired": ["_fix_a", "_fix_z"], "command": command,
    }  # fmt: skip


def test_evidence_of_a_bare_outcome_is_empty_not_invented():
    assert evidence_of({}) == {
        "model": None, "backend": None, "mode": "static", "run": None, "status": None, "error": None,
        "max_abs_diff": None, "seconds": None, "versions": {}, "workaround_off": [], "workarounds_fired": [],
        "command": None,
    }  # fmt: skip
    assert evidence_of({"error": "", "max_abs_diff": None, "versions": None})["error"] is None


TORCH_ONNX_ERROR = (
    "Failed to export the model with torch.export. This is step 1/3 of exporting the model to ONNX.\n"
    "- Debug `torch.export.export` and submit a PR to PyTorch.\n\n"
    "## Exception summary\n\n"
    "<class 'ValueError'>: Cannot view a tensor with shape torch.Size([2, 3])\n\n"
    "(Refer to the full stack trace above for more information.)"
)
# (id, outcome, excerpt): the last "Type: message" line (ANSI colours removed), else the first non-blank line.
EXCERPTS = [
    ("torch.onnx-summary", {"error": TORCH_ONNX_ERROR},
     "<class 'ValueError'>: Cannot view a tensor with shape torch.Size([2, 3])"),
    ("last-of-three-named", {"error": "TypeError: a\nValueError: b\nRuntimeError: c\nadvice"}, "RuntimeError: c"),
    ("named-after-boilerplate", {"error": "advice\n  torch._dynamo.exc.UserError: guard\nmore"},
     "torch._dynamo.exc.UserError: guard"),
    ("ansi-colours-removed", {"error": "\x1b[31mRuntimeError: boom\x1b[0m"}, "RuntimeError: boom"),
    ("first-line-when-none-named", {"error": "  \n  first line  \nsecond"}, "first line"),
    ("status-when-no-error", {"status": "timeout"}, "timeout"),
    ("error-type-line", {"error_type": "TypeError", "error": "no message"}, "TypeError"),
    ("nothing", {}, ""),
    ("cut-at-300", {"error": "RuntimeError: " + "y" * 400}, ("RuntimeError: " + "y" * 400)[:300]),
]  # fmt: skip


@pytest.mark.parametrize(("outcome", "excerpt"), [e[1:] for e in EXCERPTS], ids=[e[0] for e in EXCERPTS])
def test_error_excerpt(outcome, excerpt):
    assert error_excerpt(outcome) == excerpt


def test_error_excerpt_takes_a_limit():
    assert error_excerpt({"error": "RuntimeError: " + "y" * 400}, 200) == ("RuntimeError: " + "y" * 400)[:200]


# ── superseded: registered workarounds took a ledger entry's job over (evidence2) ──
# Flint's case as it ran: the reproducer passes with the batched_mm experts patch firing; without it the
# grouped-mm experts come back and fail on another op after the histc rewrite fired; without both, the
# recorded failure is back.
HISTC = r"aten\.histc\.default is not in Core ATen opset"
FLINT = Subject("flint", ENTRY, "executorch", (Export("FlintModel", "executorch", False),), STACK, URL, "executorch",
                HISTC, "EXPORT_SKIPS")  # fmt: skip
FLINT_BOTH = Subject("flint", ENTRY, "executorch", (Export("FlintModel", "executorch", False),
                     Export("FlintModel", "executorch", True)), STACK, URL, "executorch", HISTC, "EXPORT_SKIPS")  # fmt: skip
TAKEN_OVER = run(subject=FLINT, model="FlintModel", workarounds_fired={"_batched_mm": 1, "_strided": 6})
HISTC_ERROR = "SpecViolationError: Operator torch._ops.aten.histc.default is not in Core ATen opset (https://...)"


def probe(disabled: tuple[str, ...], status: str = "failed", error: str | None = HISTC_ERROR, **changes: Any) -> dict:
    """A supersession probe: the reproducer with ``disabled`` off too, as ``--repro ID --without ...`` records it."""
    return run(status, error, subject=FLINT, model="FlintModel", workarounds_disabled=list(disabled)) | changes


OTHER_OP = probe(("_batched_mm",), error="SpecViolationError: aten.empty_permuted.default is not in Core ATen opset",
                 workarounds_fired={"_histc": 1})  # fmt: skip
PROVES = probe(("_batched_mm", "_histc"))

SEEN = "last verified still-needed, and no pin of its stack moved since"
GO = "the entry can go while they stay registered"
BOTH = "--without _batched_mm --without _histc"
NONE_SHOWN = "; no registered workaround shown to take over: "
LONG_ERROR = "SpecViolationError: " + "z" * 200


def flint_claims(passed: str, takeover: str = "") -> str:
    """The not-reproduced reason for Flint at the pins, with what the supersession probes tried."""
    return f"{passed} at {AT}, where the entry claims /{HISTC}/ ({SEEN}); {REPRO}" + (NONE_SHOWN + takeover if takeover else "")


def took_over(passed: str, names: str, *shown: str) -> list[str]:
    return [f"{passed} at {AT} with no pin moved, and registered workarounds took over: {names}",
            f"the bug is still there: {'; '.join(shown)}", GO]  # fmt: skip


# (id, subject, upstream, record, outcomes, probes, verdict, superseded_by, reasons): the reasons name the
# workarounds, each export's mode, the flags of the probe that proves it and its error line, or what was tried.
SUPERSESSION_ROWS = [
    ("two-step-proof", FLINT, "open", "same", [TAKEN_OVER, TAKEN_OVER], [OTHER_OP, PROVES], SUPERSEDED,
     ("_batched_mm", "_histc"),
     took_over(ALL_2, "_batched_mm, _histc", f"FlintModel (static): with {BOTH} it fails as recorded: {HISTC_ERROR}")),
    ("one-step-proof", FLINT, "none", "never", [TAKEN_OVER], [probe(("_batched_mm",))], SUPERSEDED, ("_batched_mm",),
     took_over(ALL_1, "_batched_mm",
               f"FlintModel (static): with --without _batched_mm it fails as recorded: {HISTC_ERROR}")),
    ("unknown-tracker-still-proves", FLINT, "unknown", "same", [TAKEN_OVER], [PROVES], SUPERSEDED,
     ("_batched_mm", "_histc"),
     took_over(ALL_1, "_batched_mm, _histc", f"FlintModel (static): with {BOTH} it fails as recorded: {HISTC_ERROR}")),
    ("no-probes", FLINT, "open", "same", [TAKEN_OVER], [], NOT_REPRODUCED, (), [flint_claims(ALL_1)]),
    ("only-a-different-failure", FLINT, "open", "same", [TAKEN_OVER], [OTHER_OP], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, "FlintModel (static): tried --without _batched_mm: failed (SpecViolationError: "
                          "aten.empty_permuted.default is not in Core ATen opset)")]),
    ("probe-passes", FLINT, "open", "same", [TAKEN_OVER], [probe(("_strided",), "pass", None)], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, "FlintModel (static): tried --without _strided: pass")]),
    ("every-probe-tried-is-listed", FLINT, "open", "same", [TAKEN_OVER], [OTHER_OP, probe(("_strided",), "pass", None)],
     NOT_REPRODUCED, (),
     [flint_claims(ALL_1, "FlintModel (static): tried --without _batched_mm: failed (SpecViolationError: "
                          "aten.empty_permuted.default is not in Core ATen opset); --without _strided: pass")]),
    ("probe-times-out", FLINT, "open", "same", [TAKEN_OVER], [probe(("_batched_mm",), "timeout", "timed out")],
     NOT_REPRODUCED, (), [flint_claims(ALL_1, "FlintModel (static): tried --without _batched_mm: timeout (timed out)")]),
    ("probe-error-cut-at-120", FLINT, "open", "same", [TAKEN_OVER], [probe(("_batched_mm",), error=LONG_ERROR)],
     NOT_REPRODUCED, (),
     [flint_claims(ALL_1, f"FlintModel (static): tried --without _batched_mm: failed ({LONG_ERROR[:120]})")]),
    # What it disabled must have fired in every passing run: else it is not what made them pass.
    ("disabled-nothing-that-fired", FLINT, "open", "same", [TAKEN_OVER], [probe(("_histc",))], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, f"FlintModel (static): tried --without _histc: failed ({HISTC_ERROR})")]),
    ("fired-in-one-run-only", FLINT, "open", "same", [TAKEN_OVER, TAKEN_OVER | {"workarounds_fired": {"_x": 1}}],
     [PROVES], NOT_REPRODUCED, (),
     [flint_claims(ALL_2, f"FlintModel (static): tried --without _batched_mm _histc: failed ({HISTC_ERROR})")]),
    ("passes-record-no-hits-a-probe-proves-nothing", FLINT, "open", "same", [TAKEN_OVER | {"workarounds_fired": {}}],
     [PROVES], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, f"FlintModel (static): tried --without _batched_mm _histc: failed ({HISTC_ERROR})")]),
    ("probe-disabled-nothing", FLINT, "open", "same", [TAKEN_OVER], [probe(())], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, f"FlintModel (static): tried --without : failed ({HISTC_ERROR})")]),
    # The probe must be the reproducer as the passing runs ran it, at the planned versions.
    ("probe-not-the-reproducer", FLINT, "open", "same", [TAKEN_OVER], [probe(("_batched_mm",), repro=None)],
     NOT_REPRODUCED, (), [flint_claims(ALL_1, f"FlintModel (static): tried --without _batched_mm: failed ({HISTC_ERROR})")]),
    ("probe-gate-kept", FLINT, "open", "same", [TAKEN_OVER], [probe(("_batched_mm",), workaround_off=[])],
     NOT_REPRODUCED, (), [flint_claims(ALL_1, f"FlintModel (static): tried --without _batched_mm: failed ({HISTC_ERROR})")]),
    ("probe-at-other-versions", FLINT, "open", "same", [TAKEN_OVER],
     [probe(("_batched_mm",), versions={"torch": "2.12.0", "transformers": "5.23.0"})], NOT_REPRODUCED, (),
     [flint_claims(ALL_1, f"FlintModel (static): tried --without _batched_mm: failed ({HISTC_ERROR})")]),
    ("probe-of-another-export", FLINT, "open", "same", [TAKEN_OVER], [probe(("_batched_mm",), dynamic=True)],
     NOT_REPRODUCED, (), [flint_claims(ALL_1, "FlintModel (static): not probed")]),
    # Every export needs its own proof.
    ("one-of-two-modes-proven", FLINT_BOTH, "open", "same", [TAKEN_OVER, TAKEN_OVER | {"dynamic": True}],
     [PROVES], NOT_REPRODUCED, (), [flint_claims(ALL_2, "FlintModel (dynamic): not probed")]),
    ("no-mode-proven", FLINT_BOTH, "open", "same", [TAKEN_OVER, TAKEN_OVER | {"dynamic": True}], [OTHER_OP],
     NOT_REPRODUCED, (),
     [flint_claims(ALL_2, "FlintModel (static): tried --without _batched_mm: failed (SpecViolationError: "
                          "aten.empty_permuted.default is not in Core ATen opset); FlintModel (dynamic): not probed")]),
    ("nothing-fired-in-one-mode", FLINT_BOTH, "open", "same",
     [TAKEN_OVER, TAKEN_OVER | {"dynamic": True, "workarounds_fired": {}}], [PROVES], NOT_REPRODUCED, (),
     [flint_claims(ALL_2, "FlintModel (dynamic): no registered workaround fired in its passing runs to try")]),
    ("both-modes-proven", FLINT_BOTH, "open", "same", [TAKEN_OVER, TAKEN_OVER | {"dynamic": True}],
     [PROVES, PROVES | {"dynamic": True}], SUPERSEDED, ("_batched_mm", "_histc"),
     took_over(ALL_2, "_batched_mm, _histc", f"FlintModel (static): with {BOTH} it fails as recorded: {HISTC_ERROR}",
               f"FlintModel (dynamic): with {BOTH} it fails as recorded: {HISTC_ERROR}")),
    # Probes change nothing where the verdict is not not-reproduced.
    ("pin-moved-is-removable", FLINT, "open", "moved", [TAKEN_OVER], [PROVES], REMOVABLE, (),
     [f"{ALL_1}; upstream open{MOVED}"]),
    ("not-planned-is-human", FLINT, "closed:not_planned", "same", [TAKEN_OVER], [PROVES], HUMAN, (),
     [f"{ALL_1}, but upstream closed:not_planned: a human decides"]),
    ("a-failing-run-is-still-needed", FLINT, "open", "same", [probe(())], [PROVES], STILL_NEEDED, (),
     [f"still fails as recorded (/{HISTC}/) at {AT}"]),
    ("unproven-pass-is-human", FLINT, "open", "same", [TAKEN_OVER | {"workaround_off": []}], [PROVES], HUMAN, (),
     ["FlintModel (static) passed, but it does not show the entry's workaround was off (the ledger gate did not "
      f"apply and get skipped){NO_PROOF}"]),
]  # fmt: skip


@pytest.mark.parametrize(("subject", "upstream", "recorded", "outcomes", "probes", "expected", "names", "reasons"),
                         [row[1:] for row in SUPERSESSION_ROWS], ids=[row[0] for row in SUPERSESSION_ROWS])  # fmt: skip
def test_superseded_verdict_table(subject, upstream, recorded, outcomes, probes, expected, names, reasons):
    found = state(upstream)
    plan = plan_entry(subject, found, PINS, record(recorded, subject), force=True)
    result = verdict(subject, plan, found, outcomes, probes)
    assert (result.entry_id, result.verdict, result.superseded_by, result.reasons) == (subject.id, expected, names,
                                                                                        reasons)  # fmt: skip
    assert result.evidence == [evidence_of(o) for o in outcomes]  # the probes are not re-runs of the entry's evidence
    # Where probes were read (superseded or not-reproduced), every one tried is kept, with what it disabled.
    kept = probes if expected in (SUPERSEDED, NOT_REPRODUCED) else []
    assert [{k: v for k, v in p.items() if k not in ("proves", "failure_line")} for p in result.supersession] == [
        evidence_of(p) | {"without": list(p["workarounds_disabled"])} for p in kept]  # fmt: skip


def test_superseded_evidence_marks_the_proving_probe_and_keeps_the_tried_ones():
    plan = plan_entry(FLINT, state("open"), PINS, record("same", FLINT), force=True)
    result = verdict(FLINT, plan, state("open"), [TAKEN_OVER], [OTHER_OP, PROVES])
    assert [(p["without"], p["proves"], p["status"]) for p in result.supersession] == [
        (["_batched_mm"], False, "failed"), (["_batched_mm", "_histc"], True, "failed")]  # fmt: skip
    assert [p.get("failure_line") for p in result.supersession] == [None, HISTC_ERROR]  # quoted for the proof only
    assert result.evidence[0]["workarounds_fired"] == ["_batched_mm", "_strided"]
    assert SUPERSEDED in REMOVAL_VERDICTS and SUPERSEDED in RERUN_VERDICTS and SUPERSEDED not in NEEDS_HUMAN


def test_proves_takeover_needs_a_matching_failure_with_something_disabled():
    assert proves_takeover(FLINT, PROVES)
    assert not proves_takeover(FLINT, OTHER_OP)  # fails, but not as recorded
    assert not proves_takeover(FLINT, probe(("_batched_mm",), "pass", HISTC_ERROR))  # a pass proves nothing
    assert not proves_takeover(FLINT, probe(()))  # nothing disabled: the plain reproducer, not a takeover
    assert not proves_takeover(PROBE, run("failed", HISTC_ERROR, subject=PROBE))  # a workaround records no failure


# (id, fired in the passing runs, probes tried so far, proofs of other exports, next set to disable)
NEXT_ROWS = [
    ("first-fired-alone", ["_a", "_b"], [], [], ("_a",)),
    ("then-the-next-alone", ["_a", "_b"], [{"workarounds_disabled": ["_a"]}], [], ("_b",)),
    ("then-what-fired-behind-it", ["_a"], [{"workarounds_disabled": ["_a"], "workarounds_fired": {"_h": 1}}], [],
     ("_a", "_h")),
    ("expansions-skip-what-is-disabled", ["_a"], [{"workarounds_disabled": ["_a"], "workarounds_fired": {"_a": 1}}], [],
     None),
    ("expansion-sets-are-unordered", ["_a", "_h"],
     [{"workarounds_disabled": ["_a"], "workarounds_fired": {"_h": 1}}, {"workarounds_disabled": ["_h"]},
      {"workarounds_disabled": ["_h", "_a"]}], [], None),
    ("another-exports-proof-first", ["_a", "_b"], [], [("_b", "_h")], ("_b", "_h")),
    ("a-proof-sharing-nothing-fired-is-skipped", ["_a"], [], [("_z",)], ("_a",)),
    ("nothing-fired", [], [], [], None),
]  # fmt: skip


@pytest.mark.parametrize(("fired", "tried", "preferred", "expected"), [r[1:] for r in NEXT_ROWS],
                         ids=[r[0] for r in NEXT_ROWS])  # fmt: skip
def test_next_superseders_table(fired, tried, preferred, expected):
    assert next_superseders(fired, tried, preferred) == expected


def test_first_error_line_keeps_the_type_and_the_first_line_of_the_message():
    """What a superseded verdict quotes of its failing probe: ExecuTorch's SpecViolationError names the operator
    on its message's first line (evidence2)."""
    coloured = {"error_type": "SpecViolationError", "error": "\x1b[31mOperator x is not in Core ATen\x1b[0m\nmore"}
    assert first_error_line(coloured) == "SpecViolationError: Operator x is not in Core ATen"
    assert first_error_line({"error": "ValueError: bad\nTraceback"}) == "ValueError: bad"
    assert first_error_line({"error_type": "ValueError", "error": "ValueError: bad"}) == "ValueError: bad"
    assert first_error_line({"status": "timeout", "error": None}) == "timeout"


def test_failure_line_quotes_where_the_recorded_failure_matches():
    """torch.onnx wraps the vmap error in advice; the superseded verdict quotes the line the entry's regex
    matches, and the PR shows it (evidence2)."""
    vmap = Subject("g", ENTRY, "onnx", (Export("Gemma3Model", "onnx", False),), STACK, URL, "torch",
                   r"Either your tensor may have escaped.*gen_vmap_plumbing", "EXPORT_SKIPS")  # fmt: skip
    error = ("Failed to decompose the FX graph for ONNX compatibility. \x1b[96mThis is step 2/3\x1b[0m\n- advice\n"
             "<class 'RuntimeError'>: Either your tensor may have escaped from inside a function being vmapped (gen_vmap_plumbing)\n"
             "(Refer to the full stack trace)")  # fmt: skip
    outcome = {"status": "failed", "error_type": "ConversionError", "error": error}
    assert failure_line(vmap, outcome) == (
        "<class 'RuntimeError'>: Either your tensor may have escaped from inside a function being vmapped (gen_vmap_plumbing)")
    assert failure_line(vmap, {"status": "failed", "error": "other\nlines"}) == "other"  # no match: the first line
