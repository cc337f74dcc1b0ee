"""Initialisation fixes keep tiny random outputs of order one, so that a comparison against them can fail
(``exporters.tiny.initialisation``). Each test quotes the degenerate output the sweep recorded without the fix."""

from __future__ import annotations

import copy

import torch

from exporters.tiny import build_tiny
from exporters.tiny.initialisation import calibrate_batch_norms
from exporters.validation import named_tensors


def _forward(tiny, **extra):
    with torch.no_grad():
        return tiny.model(**tiny.inputs, **extra)


class _Stack(torch.nn.Module):
    """Eight small-std conv + eval BatchNorm + ReLU blocks, as a random MobileNet is: each shrinks its input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers: list[torch.nn.Module] = []
        for _ in range(8):
            conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
            torch.nn.init.normal_(conv.weight, std=0.02)
            layers += [conv, torch.nn.BatchNorm2d(8), torch.nn.ReLU()]
        self.body = torch.nn.Sequential(*layers).eval()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.body(pixel_values)


def test_batch_norms_are_scaled_to_unit_rms_per_layer_on_the_sample_and_keep_a_zero_mean():
    stack, inputs = _Stack(), {"pixel_values": torch.randn(2, 8, 4, 4, generator=torch.Generator().manual_seed(0))}
    assert stack(**inputs).abs().max() < 1e-6  # vanishes at identity statistics
    assert calibrate_batch_norms(stack, inputs) == 8
    norms = [m for m in stack.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    seen = []
    handles = [n.register_forward_hook(lambda m, i, o: seen.append(o)) for n in norms]
    with torch.no_grad():
        stack(**inputs)
    for handle in handles:
        handle.remove()
    for out in seen:  # every BatchNorm passes its input on at unit RMS (eps aside), one scale for all channels
        assert abs(out.square().mean().sqrt() - 1) < 0.05
    assert all(not n.running_mean.any() and (n.running_var == n.running_var[0]).all() for n in norms)


def test_batch_norm_scaling_keeps_a_deep_random_stack_well_conditioned():
    """Was (scaled per channel): MobileNetV2ForSemanticSegmentation's logits 0.52 apart in float32 and float64."""
    tiny = build_tiny("MobileNetV2ForSemanticSegmentation")
    wide = copy.deepcopy(tiny.model).double()
    with torch.no_grad():
        single = tiny.model(**tiny.inputs).logits
        double = wide(pixel_values=tiny.inputs["pixel_values"].double()).logits
    assert single.abs().max() > 0.1
    assert (single.double() - double).abs().max() < 1e-4


def test_batch_norm_calibration_leaves_a_failing_model_at_identity_statistics():
    stack = _Stack()
    assert calibrate_batch_norms(stack, {"pixel_values": torch.randn(2, 3, 4, 4)}) == 0  # 3 channels into 8
    assert all(n.running_var.eq(1).all() for n in stack.modules() if isinstance(n, torch.nn.BatchNorm2d))


def test_batch_norm_backbones_built_tiny_are_of_order_one():
    """Was: ``feature_maps.0: inconclusive: eager output is near zero (max |x| = 9.58e-36)`` (PPLCNetBackbone)."""
    feature_map = _forward(build_tiny("PPLCNetBackbone")).feature_maps[0]
    assert 0.1 < feature_map.abs().max() < 100


def test_zero_initialised_key_scales_are_opened():
    """Was: ``past_key_values.layers.0.keys: inconclusive: eager output is near zero (max |x| = 0)`` (Zaya)."""
    keys = _forward(build_tiny("ZayaModel"), use_cache=True).past_key_values.layers[0].keys
    assert keys.abs().max() > 0.1



def test_zero_initialised_logit_scales_are_opened():
    """Was: ``logits_audio_text: inconclusive: eager output is near zero`` (PeAudioModel: scale and bias 0)."""
    tiny = build_tiny("PeAudioModel")
    assert tiny.model.text_audio_logit_scale.item() == 1.0
    assert _forward(tiny).logits_audio_text.abs().max() > 1e-3

def test_init_std_configs_get_the_tiny_initialiser_range():
    """Was: ``regression_outputs: inconclusive: eager output is near zero (max |x| = 7.79e-06)``."""
    outputs = dict(named_tensors(_forward(build_tiny("PatchTSMixerForRegression"))))
    assert outputs["regression_outputs"].abs().max() > 1e-3
