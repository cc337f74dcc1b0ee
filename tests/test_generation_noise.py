"""The logits tolerance of the token-for-token check: atol/rtol, widened only by eager's own float32 noise.

T5 at the init scale that makes its greedy path non-degenerate is ill-conditioned in float32 (eager itself is
up to 0.3 off a float64 copy on ~50-sized logits); a tiny Llama is not (~1e-6). The exported side here is
eager's own loop with its logits shifted by a chosen amount, so each test knows the answer it must get.
"""

from __future__ import annotations

import dataclasses

import pytest

from bot.run.generation import build_generation_model
from exporters.bundle.decoding import EagerGeneration
from exporters.generation.check import (
    LOGITS_ATOL,
    NOISE_FACTOR,
    check_generation,
    eager_generate,
    float32_noise,
)
from exporters.generation.components import (
    GenerationExportConfig,
    cache_layout,
    plan_components,
    sample_prompts,
)

SCALED = {"initializer_range": 0.5, "initializer_factor": 4.0}


class Shifted(EagerGeneration):
    """Eager's own generation with ``shift(step)`` added to the logits of row 1 at every step."""

    def __init__(self, plans, layout, shift):
        super().__init__(plans, layout)
        self.shift = shift

    def generate(self, input_ids=None, **kwargs):
        out = super().generate(input_ids, **kwargs)
        logits = [step.clone() for step in out.logits]
        for step, value in enumerate(logits):
            value[1, :] += self.shift(step)
        return dataclasses.replace(out, logits=logits)


def reference(name, overrides):
    model, _ = build_generation_model(name, 0, overrides=overrides)
    prompts = sample_prompts(model, batch=2, prompt_length=8, seed=0)
    config = GenerationExportConfig()
    plans = plan_components(model, prompts, config, "onnx")
    return model, prompts, plans, cache_layout(model, plans, config, "onnx")


@pytest.fixture(scope="module")
def t5():
    model, prompts, plans, layout = reference("T5ForConditionalGeneration", SCALED)
    tokens, logits, _ = eager_generate(model, layout, prompts, 16)
    return model, prompts, plans, layout, float32_noise(model, layout, prompts, tokens, logits)


def test_t5_float32_noise_is_far_above_the_plain_tolerance_at_some_steps(t5):
    *_, noise = t5
    assert noise.shape == (16, 2)
    assert float(noise.max()) > 10 * LOGITS_ATOL  # eager float32 itself is this far from float64


def test_a_shift_within_eager_float32_noise_passes_and_says_so(t5):
    model, prompts, plans, layout, noise = t5
    step = int(noise[:, 1].argmax())
    shift = float(noise[step, 1]) * 1.5  # beyond atol + rtol*|logit| (~0.05), within 2x noise
    check = check_generation(model, Shifted(plans, layout, lambda s: shift if s == step else 0.0), prompts)
    assert check.status == "pass", check.detail
    assert check.steps_within_noise == [step]
    assert "within 2x eager's own float32 noise" in check.detail


def test_a_shift_beyond_twice_the_noise_is_a_mismatch_at_that_step(t5):
    model, prompts, plans, layout, noise = t5
    step = int(noise[:, 1].argmax())
    shift = float(noise[step, 1]) * (NOISE_FACTOR + 1) + 1.0  # also beyond rtol*|logit| for |logit| < 1000
    check = check_generation(model, Shifted(plans, layout, lambda s: shift if s == step else 0.0), prompts)
    assert check.status == "mismatch", check.detail
    assert check.first_mismatch == {"step": step, "row": 1}
    assert "float32 noise" in check.detail


def test_a_well_conditioned_model_keeps_the_plain_tolerance():
    """Llama's float32 noise is ~1e-6: a 5e-3 shift fails exactly as it would without the noise rule."""
    model, prompts, plans, layout = reference("LlamaForCausalLM", {})
    check = check_generation(model, Shifted(plans, layout, lambda s: 5e-3 if s == 3 else 0.0), prompts)
    assert check.status == "mismatch"
    assert check.first_mismatch == {"step": 3, "row": 1}
    assert max(check.float32_noise) < 1e-4
