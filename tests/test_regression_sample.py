"""The ``--candidate`` regression sample (bot.audit.regression_sample): where regressions are likely, first.

Pure selection on small inputs: ledger reproducers of the candidate's stack, exports that fired a
workaround declaring ``dependency = PKG``, ``--regression-classes`` lines, then the fastest filler.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_audit import PINS, write_registry

from bot.audit.plan import Export
from bot.audit.regression_sample import (
    FASTEST,
    LISTED,
    ReproducerSource,
    choose_sample,
    parse_class_list,
)
from bot.run.candidate import reproducer_sources
from exporters.ledger import load_ledger

ALL_PINS = {**PINS, "executorch": "1.5.1", "torchao": "0.18.0"}


def record(model: str, backend: str = "onnx", mode: str = "static", seconds: float = 5.0, status: str = "pass",
           fired: dict[str, int] | None = None, **versions: str) -> dict[str, Any]:  # fmt: skip
    return {"model": model, "backend": backend, "mode": mode, "status": status, "seconds": seconds,
            "workarounds_fired": fired or {}, "versions": {**ALL_PINS, **versions}}  # fmt: skip


DEPENDENCIES = {"_aten_is_all_true": "onnxscript", "_fix_rsub_scalar": "torch", "_fix_tanh_gelu": "executorch"}
T5 = ReproducerSource("t5-fold", "onnx", ("T5Model",), (False,), ("--repro", "t5-fold", "--no-optimize"))
SWIN = ReproducerSource("swin-skip", "executorch", ("SwinModel",), (False, True), ("--repro", "swin-skip"))
RECORDS = [
    record("FastModel", seconds=1),
    record("PatchedModel", seconds=20, fired={"_aten_is_all_true": 2, "_fix_rsub_scalar": 1}),
    record("TorchPatched", seconds=2, fired={"_fix_rsub_scalar": 1}),
    record("OldPatched", seconds=2, fired={"_aten_is_all_true": 1}, onnxscript="0.6.0"),  # not at the pins
    record("EtPatched", backend="executorch", seconds=30, fired={"_fix_tanh_gelu": 1}),
]


def sample(package: str, limit: int = 8, **kwargs: Any) -> Any:
    return choose_sample(package, ALL_PINS, RECORDS, dependencies=DEPENDENCIES, limit=limit, **kwargs)


def test_likely_places_come_first_with_their_reasons_and_the_fastest_fill_up_to_the_budget():
    listed = parse_class_list("# mine\nWhisperModel onnx/dynamic\n")
    choice = sample("onnxscript", limit=5, reproducers=[T5, SWIN], listed=listed)
    got = [(item.export, item.args, item.reasons) for item in choice.chosen]
    assert got == [
        (Export("T5Model", "onnx", False), ("--repro", "t5-fold", "--no-optimize"),
         ("ledger reproducer t5-fold (stack has onnxscript)",)),
        (Export("PatchedModel", "onnx", False), (), ("workaround _aten_is_all_true (dependency = onnxscript)",)),
        (Export("WhisperModel", "onnx", True), (), (LISTED,)),
        (Export("FastModel", "onnx", False), (), (FASTEST,)),
        (Export("TorchPatched", "onnx", False), (), (FASTEST,)),
    ]  # fmt: skip
    # SWIN's stack (executorch) has no onnxscript; OldPatched was recorded at another onnxscript.
    assert choice.chosen[0].repro == "t5-fold" and choice.chosen[1].repro is None


def test_the_budget_bounds_the_whole_sample_in_priority_order_and_says_what_it_left_out():
    """--regression-sample N is the sample's size: with onnxscript the reproducers and workaround exports alone
    ran past six minutes, and --regression-sample 0 did not shrink them."""
    choice = sample("onnxscript", limit=1, reproducers=[T5])
    assert [item.export.model for item in choice.chosen] == ["T5Model"]
    assert choice.left_out == ["PatchedModel onnx/static (workaround _aten_is_all_true (dependency = onnxscript)): "
                               "over the sample's budget of 1 (--regression-sample)"]  # fmt: skip
    nothing = sample("onnxscript", limit=0, reproducers=[T5])
    assert nothing.chosen == [] and len(nothing.left_out) == 2


def test_a_package_in_every_stack_takes_every_backends_sources_and_merges_reasons():
    listed = parse_class_list("TorchPatched\n")  # no backend: every backend whose stack has torch
    choice = sample("torch", limit=20, reproducers=[T5, SWIN], listed=listed)
    got = {(item.export, item.reasons) for item in choice.chosen}
    assert (Export("TorchPatched", "onnx", False),
            ("workaround _fix_rsub_scalar (dependency = torch)", LISTED)) in got  # fmt: skip
    for backend in ("dynamo", "executorch"):
        assert (Export("TorchPatched", backend, False), (LISTED,)) in got
    assert {item.export for item in choice.chosen if item.repro == "swin-skip"} == {
        Export("SwinModel", "executorch", False), Export("SwinModel", "executorch", True),
    }  # fmt: skip


def test_a_mode_the_ledger_skips_outright_is_left_out_and_said_so():
    def skipped(model: str, backend: str, dynamic: bool) -> str | None:
        return "swin-skip" if model == "SwinModel" and dynamic else None

    choice = sample("executorch", limit=2, reproducers=[SWIN], skipped=skipped)
    reproducers = [item.export for item in choice.chosen if item.repro]
    assert reproducers == [Export("SwinModel", "executorch", False)]
    assert choice.left_out == [
        "SwinModel executorch/dynamic (reproducer of swin-skip): skipped by ledger entry swin-skip"
    ]
    assert [item.export.model for item in choice.chosen if not item.repro] == ["EtPatched"]


def test_class_list_lines_and_their_errors():
    assert parse_class_list("BertModel\nT5Model onnx\nViTModel executorch/dynamic  # note\n\n") == [
        ("BertModel", None, None), ("T5Model", "onnx", None), ("ViTModel", "executorch", True),
    ]  # fmt: skip
    for bad, where in (("BertModel tflite", "f.txt:1"), ("x\nBertModel onnx/wide", "f.txt:2"), ("a b c", "f.txt:1")):
        with pytest.raises(ValueError, match=where):
            parse_class_list(bad, "f.txt")


def test_reproducers_run_with_the_workaround_in_place(tmp_path):
    registry = write_registry(tmp_path, [
        {"list": "ONNX_DISABLE_OPTIMIZE", "id": "t5", "models": ["T5Model"], "backend": "onnx", "scope": "static",
         "upstream": "https://github.com/microsoft/onnxscript/issues/1", "dependency": "onnxscript",
         "reason": "r", "failure": "x", "added": "2026-01-01"},
        {"id": "swin", "models": ["SwinModel"], "backend": "executorch", "scope": "dynamic",
         "dependency": "executorch", "reason": "r", "model_change": "none", "failure": "x", "added": "2026-01-01"},
    ])  # fmt: skip
    sources = {s.entry_id: s for s in reproducer_sources(load_ledger(registry))}
    assert sources["t5"].args == ("--repro", "t5", "--no-optimize") and sources["t5"].modes == (False,)
    assert sources["swin"].args == ("--repro", "swin") and sources["swin"].modes == (True,)
