"""The generation cache layout of hybrid and indexed caches (exporters/generation/cache.py), without exporting.

Each tiny model is built once per session. Without the layout, the eager wrappers rebuilt a plain key/value
``DynamicCache``: linear-attention layers failed with ``IndexError`` in ``get_conv_state`` and indexed layers
with ``Cannot call update_indexer on layer 0 which is a DynamicLayer``, before any export started.
"""

from __future__ import annotations

import pytest
import torch

from exporters.bundle.decoding import EagerGeneration
from exporters.generation.cache import flatten, new_cache, restore
from exporters.generation.check import eager_generate
from exporters.generation.components import (
    GenerationExportConfig,
    cache_layout,
    plan_components,
    sample_prompts,
)
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


def _conv_cache_owner(kernel: int) -> torch.nn.Module:
    """A module with a one-conv-layer config (Lfm3's layer types), for ``new_cache``."""
    from transformers import AutoConfig

    owner = torch.nn.Module()
    owner.config = AutoConfig.for_model("lfm3", num_hidden_layers=1, layer_types=["conv"], conv_L_cache=kernel,
                                        hidden_size=16, intermediate_size=16, num_attention_heads=2,
                                        num_key_value_heads=1)
    return owner


class _PrefillConvUpdate(torch.nn.Module):
    """What a conv layer's prefill does with the cache: update the conv state, conv causally, keep the last
    ``seq_len`` columns (Lfm3ShortConv.forward); returns those and the stored state."""

    def __init__(self, kernel: int):
        super().__init__()
        self.owner, self.kernel = _conv_cache_owner(kernel), kernel
        self.weight = torch.nn.Parameter(torch.randn(4, 1, kernel))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = new_cache(self.owner)
        full = cache.update_conv_state(x, 0, conv_kernel_size=self.kernel)
        out = torch.nn.functional.conv1d(full, self.weight, padding=self.kernel - 1, groups=4)[..., :full.shape[-1]]
        return out[..., -x.shape[-1]:], cache.get_conv_state(0)


def test_prefill_conv_update_exports_for_prompts_shorter_than_the_kernel():
    # transformers pads a prefill's conv input only when it is shorter than the kernel: traced at 8 tokens with
    # Lfm3's 7-wide kernel, that branch guarded sequence >= 7 (the Lfm3 generation export's prefill accepted 7..64,
    # and its 6-token second validation shape was refused). The components' cache takes one path for every length.
    from torch.export import Dim
    from transformers import DynamicCache

    torch.manual_seed(0)
    module = _PrefillConvUpdate(kernel=7)
    program = torch.export.export(module, (torch.randn(2, 4, 8),),
                                  dynamic_shapes=({2: Dim("sequence", min=1, max=64)},), strict=False)
    for length in (3, 7, 8):
        x = torch.randn(2, 4, length)
        upstream = DynamicCache(config=module.owner.config)  # the layer's own, branching update
        full = upstream.update_conv_state(x, 0, conv_kernel_size=7)
        conv = torch.nn.functional.conv1d(full, module.weight, padding=6, groups=4)[..., :full.shape[-1]]
        out, state = program.module()(x)
        torch.testing.assert_close(out, conv[..., -length:], rtol=0, atol=1e-6)
        torch.testing.assert_close(state, upstream.get_conv_state(0), rtol=0, atol=0)


def test_a_prompt_shorter_than_the_conv_kernel_generates_what_the_model_generates(planned):
    model, _, _, layout = planned("Lfm3ForCausalLM")  # 7-wide conv layers
    prompts = sample_prompts(model, prompt_length=3)
    plans = plan_components(model, prompts, GenerationExportConfig(), "onnx")
    ours = EagerGeneration(plans, layout).generate(**prompts, max_new_tokens=6, min_new_tokens=6)
    eager, _, _ = eager_generate(model, layout, prompts, 6)
    assert ours.tokens.tolist() == eager.tolist()
