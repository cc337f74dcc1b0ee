"""Sample inputs show masking bugs: attention masks are padded (left for decoder-only models, right for the
rest), at the sample shape and at the second shape a dynamic export is validated at."""

from __future__ import annotations

import pytest
import torch

from exporters.dynamo.exporter import DynamoConfig, DynamoExporter, second_shape_inputs
from exporters.tiny import build_tiny, padded_mask, padding_side, resized_mask


def test_padded_mask_pads_every_other_row_on_its_side():
    assert padded_mask(2, 8, "right").tolist() == [[1] * 8, [1] * 6 + [0] * 2]
    assert padded_mask(3, 4, "left").tolist() == [[1] * 4, [0, 1, 1, 1], [1] * 4]
    assert padded_mask(2, 2, "left").tolist() == [[1, 1], [0, 1]]  # at least one zero ...
    assert padded_mask(2, 1, "right").tolist() == [[1], [1]]  # ... and at least one token
    assert padded_mask(2, 4, "right", pads=9).tolist() == [[1] * 4, [1, 0, 0, 0]]
    assert padded_mask(1, 8, "right").dtype == torch.long


@pytest.mark.parametrize(
    ("name", "side"),
    [("BertModel", "right"), ("T5ForConditionalGeneration", "right"), ("LlamaForCausalLM", "left"),
     ("LlamaModel", "left"), ("GPT2LMHeadModel", "left"), ("XLNetModel", "left"), ("RobertaForMaskedLM", "right")],
)
def test_sample_masks_are_padded_by_model_kind(name, side):
    tiny = build_tiny(name)
    assert padding_side(tiny.model) == side
    mask = tiny.inputs["attention_mask"]
    assert mask.tolist() == padded_mask(mask.shape[0], mask.shape[1], side).tolist()
    assert (mask == 0).any() and (mask.sum(dim=1) > 0).all()


def test_resized_mask_keeps_side_rows_and_pad_count():
    right, left = padded_mask(2, 8, "right"), padded_mask(2, 8, "left")
    assert resized_mask(right, [3, 10]).tolist() == [[1] * 10, [1] * 8 + [0] * 2, [1] * 10]
    assert resized_mask(left, [2, 5]).tolist() == [[1] * 5, [0, 0, 1, 1, 1]]
    assert resized_mask(left, [2, 2]).tolist() == [[1, 1], [0, 1]]  # a row never loses its last token
    mixed = torch.tensor([[0, 1, 1], [1, 1, 0]])
    assert resized_mask(mixed, [2, 4]).tolist() == [[0, 1, 1, 1], [1, 1, 1, 0]]
    assert resized_mask(right.bool(), [2, 9]).dtype == torch.bool


@pytest.mark.parametrize(
    "mask",
    [torch.tensor([[1, 0, 1, 1]]), torch.tensor([[2, 1, 1, 0]]), torch.ones(2, 1, 4, dtype=torch.long),
     torch.tensor([[0.0, 1.0]]), torch.tensor([[0, 0, 0]])],
    ids=["hole", "not-0/1", "3-d", "float", "no-token"],
)
def test_resized_mask_leaves_other_masks_to_the_resampler(mask):
    assert resized_mask(mask, [2, 6] if mask.dim() == 2 else [2, 1, 6]) is None


@pytest.mark.parametrize("name", ["BertModel", "LlamaForCausalLM"])
def test_second_shape_masks_are_padded_like_the_sample(name):
    tiny = build_tiny(name)
    program = DynamoExporter(DynamoConfig(dynamic=True)).export_program(tiny.model, tiny.inputs, _clock())
    second = second_shape_inputs(program, tiny.inputs)
    mask = second["attention_mask"]
    assert list(mask.shape) != list(tiny.inputs["attention_mask"].shape)
    side = padding_side(tiny.model)
    for index, row in enumerate(mask.tolist()):
        zeros = 2 if index % 2 else 0  # the sample's odd rows carry two pads (a quarter of 8)
        assert row == ([0] * zeros + [1] * (len(row) - zeros) if side == "left" else [1] * (len(row) - zeros) + [0] * zeros)


def _clock():
    from exporters.base import StageClock

    return StageClock({})


def test_block_diffusion_canvas_is_an_input_so_eager_is_deterministic():
    tiny = build_tiny("DiffusionGemmaModel")  # without decoder_input_ids its forward draws a random canvas
    assert tiny.inputs["decoder_input_ids"].shape == tiny.inputs["input_ids"].shape
    with torch.no_grad():
        first = tiny.model(**tiny.inputs).last_hidden_state
        second = tiny.model(**tiny.inputs).last_hidden_state
    assert torch.equal(first, second)


@pytest.mark.parametrize(("name", "projections"), [("DeformableDetrModel", "input_proj"), ("GroundingDinoModel", "input_proj_vision")])
def test_detectors_with_extra_feature_levels_get_an_image_whose_smallest_level_is_not_one_pixel(name, projections):
    """Levels made below the backbone's last one by stride-2 convs are 1 x 1 on the 32 px default, where
    GroupNorm leaves their tokens constant and the comparison measures float rounding (cause
    mm-grounding-dino-vision-encoder-mismatch); the sample image is sized so the smallest level is 2 x 2."""
    tiny = build_tiny(name)
    sides = []
    hooks = [level.register_forward_hook(lambda _m, _i, out: sides.append(tuple(out.shape[-2:])))
             for level in getattr(tiny.model, projections)]
    with torch.no_grad():
        tiny.model(**tiny.inputs)
    for hook in hooks:
        hook.remove()
    assert len(sides) == tiny.model.config.num_feature_levels
    assert min(min(side) for side in sides) == 2, sides


def test_detectors_without_extra_feature_levels_keep_the_default_image():
    assert build_tiny("RTDetrModel").inputs["pixel_values"].shape[-2:] == (32, 32)  # three levels, all from the backbone
