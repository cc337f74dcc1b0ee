"""The ONNX workarounds for the catalogue's translation and output failures, each against eager and without it.

Small modules with the failing pattern of each swept class (the classes themselves take 40-90 s each and are
re-run by the sweep: sweeps/catalogue/onnx-static-onnxfix.rerun.jsonl in git history, merged into the ONNX static
shard files of sweeps/catalogue/):

* ``squeeze(dim)`` of a dim that is not 1 (ParakeetForRNNT, NemotronAsrStreamingForRNNT's RNNT joint);
* ``cummax``/``cummin`` (MMGroundingDino's text mask builder);
* ``searchsorted`` (SplinterForPreTraining's question positions);
* an input returned unchanged as an output (Qwen2AudioModel's ``attention_mask``);
* Python ints and ``None`` among the outputs (MaskFormerSwinModel's spatial dimensions, PeAudio, HYV4).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch

from exporters.base import _constant_checks
from exporters.bundle.loading import load
from exporters.onnx.exporter import OnnxConfig, OnnxExporter
from exporters.validation import MISMATCH


def export(model: torch.nn.Module, inputs: dict, without: str | None = None, dynamic: bool = False):
    config = OnnxConfig(dynamic=dynamic, without=frozenset({without} if without else ()))
    return OnnxExporter(config).export(model.eval(), inputs, validate=True)


def failure_chain(error: BaseException) -> str:
    """The error and its causes, as the traceback prints them: torch.onnx wraps the real message."""
    return "".join(traceback.format_exception(error))


# ── squeeze(dim) of a dim that is not 1 ──
class Squeezes(torch.nn.Module):
    """The RNNT joint's ``logits.squeeze(2)`` on (batch, frames, tokens, vocab), next to squeezes that do."""

    def forward(self, joint: torch.Tensor, single: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return joint.squeeze(2), single.squeeze(1), joint.squeeze((1, 2)), single.squeeze((0, 1))


SQUEEZE_INPUTS = {"joint": torch.randn(2, 4, 8, 16), "single": torch.randn(2, 1, 3)}


def test_squeeze_keeps_dims_that_are_not_one_and_matches_eager():
    result = export(Squeezes(), SQUEEZE_INPUTS)
    assert result.validation.status == "pass", result.validation.problems()
    assert [list(o.shape) for o in result.artifact.graph.outputs] == [[2, 4, 8, 16], [2, 3], [2, 4, 8, 16], [2, 3]]
    fired = result.metadata.workarounds_fired
    assert fired["_aten_squeeze_dims_of_size_one"] == 1 and fired["_aten_squeeze_dims_list_of_size_one"] == 2


class SqueezeListed(torch.nn.Module):
    def forward(self, joint: torch.Tensor) -> torch.Tensor:
        return joint.squeeze((1, 2)) + 1


@pytest.mark.parametrize(
    ("workaround", "model", "failure"),
    [
        ("_aten_squeeze_dims_of_size_one", Squeezes(), r"Squeeze.*Dimension of input 2 must be 1 instead of 8"),
        ("_aten_squeeze_dims_list_of_size_one", SqueezeListed(), r"prims\.view_of"),
    ],
)
def test_onnx_needs_squeeze_of_size_one_dims_only(workaround, model, failure):
    with pytest.raises(Exception, match=failure):
        export(model, {"joint": SQUEEZE_INPUTS["joint"]} if isinstance(model, SqueezeListed) else SQUEEZE_INPUTS,
               without=workaround)


# ── cummax / cummin ──
class Running(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        highest, highest_at = torch.cummax(input_ids, dim=1)
        lowest, lowest_at = torch.cummin(scores, dim=-2)
        return highest, highest_at, lowest, lowest_at


def running_inputs(length: int) -> dict[str, torch.Tensor]:
    """Ties (torch gives the last index of a tied extreme), negatives and a 3-d input reduced inside."""
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(-2, 3, (2, length), generator=generator)
    ids[0, :3] = 1  # a run of equal values
    scores = torch.randint(-3, 3, (2, length, 3), generator=generator).float() / 2
    return {"input_ids": ids, "scores": scores}


def test_cummax_and_cummin_match_eager_values_and_tied_indices_at_two_lengths():
    result = export(Running(), running_inputs(8), dynamic=True)
    assert result.second_inputs["input_ids"].shape[1] != 8  # the length stayed dynamic and was checked again
    assert result.validation.status == "pass", result.validation.problems()
    assert result.metadata.workarounds_fired["_aten_cummax"] == 1
    assert result.metadata.workarounds_fired["_aten_cummin"] == 1


@pytest.mark.parametrize(("workaround", "op"), [("_aten_cummax", "cummax"), ("_aten_cummin", "cummin")])
def test_onnx_needs_cummax_and_cummin_translated(workaround, op):
    with pytest.raises(Exception) as raised:
        export(Running(), running_inputs(8), without=workaround)
    assert f"aten.{op}" in failure_chain(raised.value)


# ── searchsorted ──
class Searches(torch.nn.Module):
    """Both sides, 1-D and batched sorted rows, out_int32, sorter, mixed dtypes, and Splinter's
    ``searchsorted(rows, rows, side="left")``."""

    def forward(self, edges: torch.Tensor, rows: torch.Tensor, scores: torch.Tensor, ids: torch.Tensor,
                shuffled: torch.Tensor, order: torch.Tensor) -> dict:
        return {
            "left": torch.searchsorted(edges, scores),
            "right": torch.searchsorted(edges, scores, side="right"),
            "batched_left": torch.searchsorted(rows, ids),
            "batched_right_int32": torch.searchsorted(rows, ids, right=True, out_int32=True),
            "mixed": torch.searchsorted(rows, scores),
            "sorter": torch.searchsorted(shuffled, scores, sorter=order),
            "itself": torch.searchsorted(edges, edges, side="left"),
        }


def search_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Sorted rows drawn from a few values (many ties), values on and between them, and a NaN value."""
    generator = torch.Generator().manual_seed(seed)
    edges = torch.randint(-3, 4, (9,), generator=generator).sort().values.float()
    rows = torch.randint(-3, 4, (2, 3, 9), generator=generator).sort(dim=-1).values
    scores = torch.randint(-8, 9, (2, 3, 5), generator=generator).float() / 2
    scores[0, 0, 0] = float("nan")
    ids = torch.randint(-4, 5, (2, 3, 5), generator=generator)
    shuffled = edges[torch.randperm(9, generator=generator)]
    return {"edges": edges, "rows": rows, "scores": scores, "ids": ids, "shuffled": shuffled, "order": shuffled.argsort()}


def test_searchsorted_matches_torch_exactly_on_random_sorted_inputs(tmp_path: Path):
    result = export(Searches(), search_inputs(0))
    assert result.validation.status == "pass", result.validation.problems()
    assert result.metadata.workarounds_fired["_aten_searchsorted"] == 7
    result.save(tmp_path / "bundle")
    exported = load(tmp_path / "bundle")
    for seed in range(1, 6):  # fresh sorted inputs through onnxruntime, compared exactly, dtype included
        inputs = search_inputs(seed)
        eager, loaded = Searches()(**inputs), exported(**inputs)
        for name, expected in eager.items():
            assert loaded[name].dtype == expected.dtype and torch.equal(loaded[name], expected), (seed, name)


class SearchesSorted(torch.nn.Module):
    """Rows sorted inside the model, so that any second-shape input is a valid search."""

    def forward(self, rows: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = rows.sort(dim=-1).values
        return torch.searchsorted(rows, ids), torch.searchsorted(rows[0], ids, side="right")


def test_searchsorted_stays_dynamic_in_both_lengths():
    inputs = {"rows": torch.randint(-3, 4, (2, 9)), "ids": torch.randint(-4, 5, (2, 5))}
    result = export(SearchesSorted(), inputs, dynamic=True)
    assert result.second_inputs["rows"].shape != (2, 9) and result.second_inputs["ids"].shape != (2, 5)
    assert result.validation.status == "pass", result.validation.problems()


def test_onnx_needs_searchsorted_translated():
    with pytest.raises(Exception) as raised:
        export(Searches(), search_inputs(0), without="_aten_searchsorted")
    assert "aten.searchsorted" in failure_chain(raised.value)


# ── an input returned as an output ──
class ReturnsItsMask(torch.nn.Module):
    """Qwen2Audio's output carries the ``attention_mask`` it was given."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": input_ids.float() * attention_mask, "attention_mask": attention_mask}


MASK_INPUTS = {"input_ids": torch.randint(0, 9, (2, 5)), "attention_mask": torch.tensor([[1, 1, 1, 0, 0]] * 2)}


def test_returned_input_keeps_the_input_name_and_loads_back(tmp_path: Path):
    result = export(ReturnsItsMask(), MASK_INPUTS)
    assert result.validation.status == "pass", result.validation.problems()
    graph = result.artifact.graph
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert [v.name for v in graph.outputs] == ["logits", "attention_mask_output"]
    assert [o.name for o in result.component.outputs] == ["logits", "attention_mask_output"]
    result.save(tmp_path / "bundle")
    loaded = load(tmp_path / "bundle")(**MASK_INPUTS)
    assert torch.equal(loaded["attention_mask"], MASK_INPUTS["attention_mask"])


def test_onnx_needs_the_returned_input_renamed_back():
    with pytest.raises(ValueError, match=r"ONNX graph input 'attention_mask_orig' is none of the program's inputs"):
        export(ReturnsItsMask(), MASK_INPUTS, without="_patch_returned_input_keeps_its_name")


# ── Python constants among the outputs ──
class ReturnsSizes(torch.nn.Module):
    """MaskFormerSwin's ``hidden_states_spatial_dimensions`` ints, and a ``None`` slot, among tensors."""

    def forward(self, pixel_values: torch.Tensor) -> dict:
        height, width = pixel_values.shape[-2:]
        return {"pooled": pixel_values.mean((-2, -1)), "sizes": ((height, width), (height // 2, width // 2)),
                "attentions": None, "last": pixel_values * 2}


PIXELS = {"pixel_values": torch.randn(2, 3, 8, 6)}


def test_constant_outputs_are_recorded_and_the_loader_returns_eager_structure(tmp_path: Path):
    result = export(ReturnsSizes(), PIXELS)
    assert result.validation.status == "pass", result.validation.problems()
    assert result.metadata.workarounds_fired["_patch_constant_outputs_skipped"] == 1
    assert [(c.index, c.name, c.value) for c in result.component.constants] == [
        (1, "sizes.0.0", 8), (2, "sizes.0.1", 6), (3, "sizes.1.0", 4), (4, "sizes.1.1", 3), (5, "attentions", None)]
    assert [o.name for o in result.component.outputs] == ["pooled", "last"]
    result.save(tmp_path / "bundle")
    loaded = load(tmp_path / "bundle")(**PIXELS)
    eager = ReturnsSizes()(**PIXELS)
    assert loaded["sizes"] == eager["sizes"] and loaded["attentions"] is None
    assert torch.allclose(loaded["last"], eager["last"]) and torch.allclose(loaded["pooled"], eager["pooled"])


def test_onnx_needs_constant_outputs_left_out_of_the_graph():
    with pytest.raises(Exception) as raised:
        export(ReturnsSizes(), PIXELS, without="_patch_constant_outputs_skipped")
    assert "'int' object has no attribute 'name'" in failure_chain(raised.value)


def test_a_constant_that_differs_from_eager_is_a_mismatch():
    checks = _constant_checks({"y": torch.ones(1), "sizes": (8, 6)}, {"y": torch.ones(1), "sizes": (8, 5)})
    assert [(c.name, c.status) for c in checks] == [("sizes.1", MISMATCH)]
    assert _constant_checks({"sizes": (8, None)}, {"sizes": (8, None)}) == []


class PoolHeightThenSqueeze(torch.nn.Module):
    """A text recogniser's height pooled to 1 and squeezed (PP-OCRv6): under dynamic shapes the pooled height
    is ``h // 16``, symbolic, and torch.export guards it equal to 1 for the squeeze."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, (16, 1), (16, 1)).squeeze(2) * 2


def test_squeeze_of_a_dim_guarded_to_one_drops_it_in_onnx_too():
    from exporters.onnx.exporter import OnnxConfig, OnnxExporter

    model, inputs = PoolHeightThenSqueeze(), {"x": torch.randn(2, 4, 24, 8)}
    fixed = OnnxExporter(OnnxConfig(dynamic=True)).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_fix_squeeze_of_a_dim_guarded_to_one"] == 1
    assert [shape.status for shape in fixed.validation.shapes] == ["pass", "pass"]
    assert "2" in fixed.metadata.dynamic_dims["x"], "the pooled height must stay dynamic for the test to mean anything"
    without = OnnxConfig(dynamic=True, without=frozenset({"_fix_squeeze_of_a_dim_guarded_to_one"}))
    with pytest.raises(Exception, match=r"shape \[2, 4, 1, 8\] != eager \[2, 4, 8\]"):
        OnnxExporter(without).export(model, inputs, validate=True)
