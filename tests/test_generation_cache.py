"""The generation cache layout of hybrid and indexed caches (exporters/generation_cache.py), without exporting.

Each tiny model is built once per session. Without the layout, the eager wrappers rebuilt a plain key/value
``DynamicCache``: linear-attention layers failed with ``IndexError`` in ``get_conv_state`` and indexed layers
with ``Cannot call update_indexer on layer 0 which is a DynamicLayer``, before any export started.
"""

from __future__ import annotations

import pytest
import torch

from exporters.generation import GenerationExportConfig, cache_layout, plan_components, sample_prompts
from exporters.generation_cache import flatten, new_cache, restore
from exporters.generation_check import eager_generate
from exporters.generation_loop import EagerGeneration
from exporters.tiny import build_tiny

HYBRID = "OlmoHybridForCausalLM"  # 3 linear-attention layers (conv + recurrent state) and 1 attention layer
INDEXED = "AXK2ForCausalLM"  # 2 indexed-attention layers: keys, values and indexer keys
BOTH_IN_ONE_LAYER = "ZayaForCausalLM"  # 2 "hybrid" layers: keys, values, conv and recurrent state in each


@pytest.fixture(scope="session")
def planned():
    """name -> (model, prompts, plans, layout), built on first use."""
    built: dict[str, tuple] = {}

    def get(name: str):
        if name not in built:
            model = build_tiny(name).model.eval()
            prompts = sample_prompts(model)
            config = GenerationExportConfig()
            plans = plan_components(model, prompts, config, "onnx")
            built[name] = model, prompts, plans, cache_layout(model, plans, config, "onnx")
        return built[name]

    return get


@pytest.mark.parametrize("name", [HYBRID, INDEXED, BOTH_IN_ONE_LAYER])
def test_eager_wrappers_generate_what_the_model_generates(planned, name):
    # The components' eager wrappers, driven by the generation loop (each step's cache only through the flat
    # tensors), must give transformers' own greedy generate() tokens.
    model, prompts, plans, layout = planned(name)
    ours = EagerGeneration(plans, layout).generate(**prompts, max_new_tokens=6, min_new_tokens=6)
    eager, _, _ = eager_generate(model, layout, prompts, 6)
    assert ours.tokens.tolist() == eager.tolist()


def test_linear_attention_states_are_fixed_size_inputs_and_outputs(planned):
    _, _, plans, layout = planned(HYBRID)
    prefill, decode = plans
    with torch.no_grad():
        first = prefill.module(**prefill.inputs)
    for layer in (0, 1, 2):
        for kind in ("conv", "recurrent"):
            name = f"{kind}_{layer}_0"
            assert f"present_{name}" in first and f"past_{name}" in decode.inputs
            assert set(decode.dynamic_shapes[f"past_{name}"]) == {0}  # batch only: no past dim
    assert set(decode.dynamic_shapes["past_key_3"]) == {0, 2} and "past_key_0" not in decode.inputs
    assert layout["self_attention"]["layers"] == [3] and layout["linear_attention"]["layers"] == [0, 1, 2]
    assert layout["cache_layers"] == ["LinearAttentionLayer"] * 3 + ["DynamicLayer"]
    rows = {row["input"]: row for row in layout["cache_tensors"]}
    assert rows["past_conv_0_0"]["shape"][0] == "batch" and "past" not in rows["past_conv_0_0"]["shape"]
    assert rows["past_key_3"]["shape"][2] == "past"
    with torch.no_grad():
        step = decode.module(**decode.inputs)
    assert {n for n in step if n.startswith("present_")} == {n.replace("past", "present", 1)
                                                            for n in decode.inputs if n.startswith("past_")}


def test_indexer_keys_grow_along_their_own_past_dim(planned):
    _, _, plans, layout = planned(INDEXED)
    decode = plans[1]
    past = decode.inputs["past_indexer_key_0"]
    assert set(decode.dynamic_shapes["past_indexer_key_0"]) == {0, 1}
    with torch.no_grad():
        step = decode.module(**decode.inputs)
    assert step["present_indexer_key_0"].shape[1] == past.shape[1] + 1
    assert layout["indexer"]["layers"] == [0, 1]


def test_restore_is_the_inverse_of_flatten_and_leaves_the_inputs_alone(planned):
    model, _, plans, _ = planned(BOTH_IN_ONE_LAYER)
    flat = {name: value for name, value in plans[1].inputs.items() if name.startswith("past_")}
    saved = {name: value.clone() for name, value in flat.items()}
    cache = restore(model, flat)
    assert flatten(cache, "past").keys() == flat.keys()
    assert all(torch.equal(flatten(cache, "past")[name], flat[name]) for name in flat)
    assert all(layer.has_previous_state[0] for layer in cache.layers)  # decode takes the single-step path
    with torch.no_grad():
        plans[1].module(**plans[1].inputs)
    assert all(torch.equal(saved[name], flat[name]) for name in flat)  # updated in place, but on copies


def test_prefill_zeroes_padded_slots_of_per_token_states_only(planned):
    _, prompts, plans, _ = planned(INDEXED)
    with torch.no_grad():
        first = plans[0].module(**plans[0].inputs)
    padded = prompts["attention_mask"] == 0
    assert padded.any()
    assert bool((first["present_key_0"].transpose(1, 2)[padded] == 0).all())
    assert bool((first["present_indexer_key_0"][padded] == 0).all())


def test_sliding_window_layers_are_full_length():
    # Dots3Note's last layer is sliding-window: generate() gives it a DynamicSlidingWindowLayer, whose Python-int
    # cumulative_length a graph would bake in; the components keep every layer full-length (the mask slides).
    from transformers import AutoConfig

    config = AutoConfig.for_model("mistral", num_hidden_layers=2, sliding_window=4, hidden_size=16,
                                  intermediate_size=16, num_attention_heads=2, num_key_value_heads=1)
    model = torch.nn.Module()
    model.config = config
    assert [type(layer).__name__ for layer in new_cache(model).layers] == ["DynamicLayer", "DynamicLayer"]
