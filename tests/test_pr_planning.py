"""bot.github.prwriter's PR planning (``select_proposals``, ``_absent_from_base``), table by table, without a server:
which entries the rolling PR removes, which it keeps, which it takes out, and the note each one gets.
Written against the mutants mutmut left (scripts/mutation_test.py prwriter); test_shrink.py drives the
same code through the fake GitHub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.github.prwriter import WORKAROUND_LIST, _absent_from_base, proposal_from_report, select_proposals
from exporters.ledger import load_ledger

PINS = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.2",
        "onnxruntime": "1.32.0"}  # fmt: skip
LEDGER = """\
[[entry]]
id = "{id}"
models = ["{model}"]
backend = "onnx"
scope = "static"
upstream = "https://github.com/microsoft/onnxscript/issues/1"
dependency = "onnxscript"
reason = "folding breaks"
failure = 'Fold'
added = 2026-11-01
"""
MODELS = {"alpha": "T5Model", "beta": "BartModel", "gamma": "BertModel"}


@pytest.fixture
def base(tmp_path: Path):
    (tmp_path / "onnx_disable_optimize.toml").write_text(
        "\n".join(LEDGER.format(id=i, model=m) for i, m in MODELS.items()))
    (tmp_path / "export_skips.toml").write_text("")
    return load_ledger(tmp_path)


def row(entry_id: str, verdict: str, reasons: list[str] | None = None, state: str = "closed (completed)",
        model: str | None = None, passes: int = 2) -> dict[str, Any]:  # fmt: skip
    model = model or MODELS[entry_id]
    return {
        "id": entry_id, "list": "ONNX_DISABLE_OPTIMIZE", "models": [model], "backend": "onnx", "scope": "static",
        "upstream": "https://github.com/microsoft/onnxscript/issues/1", "upstream_state": {"summary": state},
        "verdict": verdict, "reasons": ["because"] if reasons is None else reasons,
        "evidence": [{"model": model, "mode": "static", "run": r, "status": "pass", "max_abs_diff": 1e-6}
                     for r in range(1, passes + 1)],
    }


def workaround_row(name: str, verdict: str = "removable") -> dict[str, Any]:
    return {
        "id": name, "backend": "onnx", "upstream": None, "upstream_state": {"summary": "closed (completed)"},
        "verdict": verdict, "reasons": ["passes without it"], "source": "exporters/onnx/exporter.py",
        "exports": [{"model": "BertModel", "mode": "static"}],
        "evidence": [{"model": "BertModel", "mode": "static", "run": r, "status": "pass"} for r in (1, 2)],
    }


def report(*rows: dict[str, Any], workarounds: tuple = (), generated_at: str = "2026-12-01") -> dict[str, Any]:
    return {"entries": list(rows), "workarounds": list(workarounds), "pins": PINS, "generated_at": generated_at,
            "exporter_version": "abc"}


def proposal(entry_row: dict[str, Any], generated_at: str = "2026-11-20"):
    return proposal_from_report(entry_row, report(entry_row, generated_at=generated_at))


def test_removable_is_proposed_with_its_first_reason(base):
    selection = select_proposals(report(row("alpha", "removable", ["upstream fixed", "second"])), base, [], [], 2)
    assert [p.id for p in selection.proposals] == ["alpha"]
    assert selection.notes == {"alpha": "proposed: upstream fixed"}
    bare = select_proposals(report(row("alpha", "removable", [])), base, [], [], 2)
    assert bare.notes == {"alpha": "proposed: "}


def test_earlier_evidence_is_kept_while_it_still_holds(base):
    earlier = proposal(row("alpha", "removable"), generated_at="2026-11-20")
    same = select_proposals(report(row("alpha", "removable")), base, [earlier], [], 2)
    assert same.proposals == (earlier,)
    assert same.notes == {"alpha": "proposed (evidence of 2026-11-20 still holds)"}


@pytest.mark.parametrize(
    ("earlier_row", "why"),
    [(row("alpha", "removable", state="open"), "another upstream state"),
     (row("alpha", "removable", model="T5EncoderModel"), "other models"),
     (row("alpha", "removable", passes=1), "incomplete evidence")],
    ids=["state", "models", "shortfall"],
)
def test_earlier_evidence_is_replaced_when_it_no_longer_holds(base, earlier_row, why):
    earlier = proposal(earlier_row)
    selection = select_proposals(report(row("alpha", "removable")), base, [earlier], [], 2)
    assert selection.proposals[0].audited_at == "2026-12-01", why
    assert selection.notes["alpha"] == "proposed: because"


def test_entries_taken_out_kept_and_never_proposed_say_why(base):
    earlier = [proposal(row("alpha", "removable")), proposal(row("beta", "removable")),
               proposal(row("gamma", "removable"))]  # fmt: skip
    audit = report(row("alpha", "still-needed", ["fails: Fold"]), row("beta", "not-due"))
    selection = select_proposals(audit, base, earlier, [], 2)
    assert [p.id for p in selection.proposals] == ["beta", "gamma"]
    assert selection.notes == {
        "alpha": "taken out: still-needed: fails: Fold",
        "beta": "kept: not-due in this audit, nothing against it",
        "gamma": "kept: not in this audit",
    }
    fresh = select_proposals(report(row("alpha", "still-needed")), base, [], [], 2)
    assert (fresh.proposals, fresh.notes) == ((), {"alpha": "not removable: still-needed"})


def test_an_entry_closed_unmerged_at_the_same_basis_is_not_proposed_again(base):
    turned = proposal(row("alpha", "removable"))
    selection = select_proposals(report(row("alpha", "removable")), base, [], [(17, turned)], 2)
    assert selection.proposals == () and selection.turned_down == {"alpha": 17}
    assert selection.notes == {
        "alpha": "not proposed again: #17 was closed unmerged at this upstream state and these pins"}
    moved = proposal(row("alpha", "removable", state="open"))
    again = select_proposals(report(row("alpha", "removable")), base, [], [(17, moved)], 2)
    assert [p.id for p in again.proposals] == ["alpha"] and again.turned_down == {}


def test_entries_the_base_branch_lacks_or_lists_differently_are_not_proposed(base):
    audit = report(row("alpha", "removable", model="T5EncoderModel"), {**row("alpha", "removable"), "id": "delta"})
    selection = select_proposals(audit, base, [], [], 2)
    assert selection.proposals == ()
    assert selection.notes == {
        "alpha": "listed differently on the base branch than in the audit; audit again",
        "delta": "not in the base branch's ledger",
    }


def test_entries_come_first_in_ledger_order_then_workarounds_by_name(base):
    source = {"exporters/onnx/exporter.py": "def _fix_b(graph):\n    pass\n\ndef _fix_a(graph):\n    pass\n"}
    audit = report(row("gamma", "removable"), row("alpha", "removable"),
                   workarounds=(workaround_row("_fix_b"), workaround_row("_fix_a")))  # fmt: skip
    selection = select_proposals(audit, base, [], [], 2, base_sources=source)
    assert [p.id for p in selection.proposals] == ["alpha", "gamma", "_fix_a", "_fix_b"]
    capped = select_proposals(audit, base, [], [], 2, max_proposals=3, base_sources=source)
    assert [p.id for p in capped.proposals] == ["alpha", "gamma", "_fix_a"]
    assert capped.notes["_fix_b"] == "waiting: the PR holds at most 3 entries; proposed once some merge"


def test_a_workaround_is_proposed_only_while_its_def_is_on_the_base_branch():
    workaround = proposal_from_report(workaround_row("_fix_a"), report())
    assert workaround.list_name == WORKAROUND_LIST
    defined = {"exporters/onnx/exporter.py": "x = 1\ndef _fix_a(graph):\n"}
    assert _absent_from_base(workaround, None, defined) is None
    assert _absent_from_base(workaround, None, {"exporters/onnx/exporter.py": "def _fix_ab(graph):\n"}) == (
        "not defined in exporters/onnx/exporter.py on the base branch")
    assert _absent_from_base(workaround, None, {}) == "not defined in exporters/onnx/exporter.py on the base branch"
    unknown = proposal_from_report({**workaround_row("_fix_a"), "source": None}, report())
    assert _absent_from_base(unknown, None, {}) == "not defined in an unknown file on the base branch"
    assert _absent_from_base(unknown, None, {"": "def _fix_a(graph):\n"}) is None  # looked up under ""


def test_a_ledger_entry_must_be_on_the_base_branch_as_audited(base):
    alpha = proposal(row("alpha", "removable"))
    assert _absent_from_base(alpha, base.by_id("alpha"), {}) is None
    assert _absent_from_base(alpha, None, {}) == "not in the base branch's ledger"
    other_models = proposal(row("alpha", "removable", model="T5EncoderModel"))
    assert _absent_from_base(other_models, base.by_id("alpha"), {}) == (
        "listed differently on the base branch than in the audit; audit again")
    other_list = proposal({**row("alpha", "removable"), "list": "EXPORT_SKIPS"})
    assert _absent_from_base(other_list, base.by_id("alpha"), {}) == (
        "listed differently on the base branch than in the audit; audit again")


def test_entries_already_in_the_pr_keep_their_place_behind_the_cap(base):
    already = proposal(row("gamma", "removable"))  # last in ledger order, but the open PR has it
    audit = report(row("alpha", "removable"), row("gamma", "removable"))
    selection = select_proposals(audit, base, [already], [], 2, max_proposals=1)
    assert [p.id for p in selection.proposals] == ["gamma"]
    assert selection.notes["alpha"] == "waiting: the PR holds at most 1 entries; proposed once some merge"
