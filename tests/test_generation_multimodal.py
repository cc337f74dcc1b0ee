"""A vision-language model's generation components (Llava: CLIP vision tower + projector + Llama), eager only.

The exported bundle is in the slow matrix (scripts/generation_matrix.py); here the components' own loop must
equal transformers' ``generate(pixel_values=…)``: a loop that dropped the image would embed the placeholder
tokens as text and differ from the first step.
"""

from __future__ import annotations

import torch

from bot.run.generation import build_generation_model
from exporters.bundle.decoding import EagerGeneration
from exporters.generation.check import check_generation
from exporters.generation.components import (
    GenerationExportConfig,
    cache_layout,
    plan_components,
    sample_prompts,
)

OVERRIDES = {"image_token_id": 3}  # the tiny config's 32000 lies outside its 256-token vocab


def test_llava_components_reproduce_eager_generate_with_the_image():
    model, _ = build_generation_model("LlavaForConditionalGeneration", 0, overrides=OVERRIDES)
    prompts = sample_prompts(model)
    assert set(prompts) == {"input_ids", "attention_mask", "pixel_values"}
    assert ((prompts["input_ids"] == 3).sum(-1) == 16).all()  # each row holds one whole image's placeholders
    assert prompts["attention_mask"].sum(-1).tolist() == [26, 24]
    config = GenerationExportConfig()
    plans = plan_components(model, prompts, config, "onnx")
    layout = cache_layout(model, plans, config, "onnx")
    assert layout["image_input"]["tokens_per_image"] == 16 and "pixel_values" not in plans[1].inputs
    check = check_generation(model, EagerGeneration(plans, layout), prompts)
    assert check.status == "pass", check.detail
    seen = EagerGeneration(plans, layout).generate(**prompts, max_new_tokens=1, output_logits=True)
    blind = dict(prompts, pixel_values=torch.zeros_like(prompts["pixel_values"]))
    unseen = EagerGeneration(plans, layout).generate(**blind, max_new_tokens=1, output_logits=True)
    assert (seen.logits[0] - unseen.logits[0]).abs().max() > 1e-3  # the image reaches prefill's logits
