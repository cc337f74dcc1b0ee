"""The pytree rules of the dynamo stage (exporters/cache_pytree.py): caches the plain walk could not flatten or save.

Each test exports a small module that returns the cache construct a catalogue class returned (MiniMax's class
attribute, Musicgen Melody's empty cross-attention cache, Nemotron 3.5 Transcribe's ``DummyLayer``,
DeepSeek-V4's dict of counters), saves the program and loads it back, and shows the real failure with the rule
left out (``without=``). The classes themselves are exported by the sweep (sweeps/catalogue/*pytreefix*).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from transformers import LlamaConfig
from transformers.cache_utils import Cache, DummyLayer, DynamicCache, DynamicLayer, EncoderDecoderCache

from exporters import cache_pytree
from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
from exporters.utils import all_workarounds

RULES = ("_class_by_import_path", "_empty_caches_as_subtrees", "_layer_types_of_cache_maps",
         "_concrete_nested_scalars")


@pytest.fixture(autouse=True)
def fresh_child_attributes(monkeypatch):
    """Which attributes are children is learnt per class and process; start each test unlearnt, as a sweep's
    one-class process does, so that another test's cache cannot decide this one's flattening."""
    monkeypatch.setattr(cache_pytree, "_CHILD_ATTRIBUTES", {})


def export(model: torch.nn.Module, inputs: dict, *, dynamic: bool = False, without: str | None = None):
    config = DynamoConfig(dynamic=dynamic, without=frozenset({without} if without else ()))
    return DynamoExporter(config).export(model, inputs)


def saved_and_loaded(result, tmp_path: Path):
    path = tmp_path / "model.pt2"
    torch.export.save(result.program, str(path))
    return torch.export.load(str(path))


def kv(batch: int = 2, sequence: int = 4) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"x": torch.randn(batch, 2, sequence, 8)}


def test_rules_are_registered_workarounds_of_the_dynamo_stage():
    registered = {w.name: w for w in all_workarounds()}
    for name in RULES:
        rule = registered[name]
        assert (rule.kind, rule.backend, rule.dependency) == ("pytree_rule", "dynamo", "transformers")
        assert rule.summary


# ── A class in the context: MiniMaxCache's layer_class_to_replicate ──
class LazyCache(torch.nn.Module):
    """``DynamicCache()`` without a config keeps ``layer_class_to_replicate = DynamicLayer`` (MiniMaxCache)."""

    def forward(self, x: torch.Tensor):
        cache = DynamicCache()
        cache.update(x * 2, x + 1, 0)
        return x.sum(), cache


def test_a_class_in_the_context_is_saved_by_its_import_path(tmp_path):
    model, inputs = LazyCache(), kv()
    result = export(model, inputs)
    assert result.metadata.workarounds_fired["_class_by_import_path"] >= 1
    _, cache = saved_and_loaded(result, tmp_path).module()(**inputs)
    assert cache.layer_class_to_replicate is DynamicLayer
    assert torch.equal(cache.layers[0].keys, inputs["x"] * 2)


def test_without_the_class_rule_the_program_cannot_be_saved(tmp_path):
    result = export(LazyCache(), kv(), without="_class_by_import_path")
    with pytest.raises(TypeError, match="cannot save a ABCMeta constant in a pytree context"):
        saved_and_loaded(result, tmp_path)


# ── An empty cache: Musicgen Melody's cross-attention cache ──
class SelfAttentionOnly(torch.nn.Module):
    """``EncoderDecoderCache(DynamicCache(config), DynamicCache(config))`` whose cross-attention layers stay empty."""

    def forward(self, x: torch.Tensor):
        config = LlamaConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2)
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        for layer in range(2):
            cache.self_attention_cache.update(x * (layer + 1), x - layer, layer)
        return x.mean(), cache


def test_an_empty_cache_flattens_to_a_subtree_without_leaves(tmp_path):
    model, inputs = SelfAttentionOnly(), kv()
    result = export(model, inputs)
    assert result.metadata.workarounds_fired["_empty_caches_as_subtrees"] >= 1
    _, cache = saved_and_loaded(result, tmp_path).module()(**inputs)
    assert isinstance(cache.cross_attention_cache, DynamicCache)
    assert [layer.keys for layer in cache.cross_attention_cache.layers] == [None, None]
    assert torch.equal(cache.self_attention_cache.layers[1].keys, inputs["x"] * 2)
    tensors = [leaf for leaf in pytree.tree_leaves(model(**inputs)) if isinstance(leaf, torch.Tensor)]
    assert len(tensors) == 5  # the mean and 2 x 2 self-attention tensors; the empty layers' None keys are constants


def test_without_the_child_rule_the_empty_cache_is_an_unsavable_constant(tmp_path):
    result = export(SelfAttentionOnly(), kv(), without="_empty_caches_as_subtrees")
    with pytest.raises(TypeError, match="cannot save a DynamicCache constant in a pytree context"):
        saved_and_loaded(result, tmp_path)


# ── A DummyLayer: Nemotron 3.5 Transcribe's layers without attention ──
class WithDummyLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        cache = Cache(layers=[DynamicLayer(), DummyLayer()])
        cache.update(x, -x, 0)
        return x.exp(), cache


@pytest.fixture
def dummy_layer_unregistered():
    """DummyLayer as a fresh process finds it: registration is process-wide, and another export may have made it."""
    if DummyLayer in pytree.SUPPORTED_NODES:
        pytree._deregister_pytree_node(DummyLayer)
    cache_pytree._WALKED_TYPES.discard(DummyLayer)
    yield
    if DummyLayer not in pytree.SUPPORTED_NODES:
        cache_pytree.register_walked_type(DummyLayer)


def test_dummy_layers_are_registered_from_the_layer_type_maps(dummy_layer_unregistered, tmp_path):
    model, inputs = WithDummyLayer(), kv()
    result = export(model, inputs)
    assert result.metadata.workarounds_fired["_layer_types_of_cache_maps"] >= 1
    _, cache = saved_and_loaded(result, tmp_path).module()(**inputs)
    assert isinstance(cache.layers[1], DummyLayer) and cache.layers[1].keys is None
    assert torch.equal(cache.layers[0].values, -inputs["x"])


def test_without_the_layer_map_rule_torch_export_refuses_the_dummy_layer(dummy_layer_unregistered):
    with pytest.raises(RuntimeError, match=r"Found <class 'transformers.cache_utils.DummyLayer'> in output"):
        export(WithDummyLayer(), kv(), without="_layer_types_of_cache_maps")


# ── Traced counters in a dict: DeepSeek-V4's entry_count ──
class CountingLayer(DynamicLayer):
    """A layer that keeps per-branch counts of its entries, as DeepSeek-V4's compressed-attention layers do."""

    def update(self, key_states, value_states, *args, **kwargs):
        self.entry_count = {"compressor": key_states.shape[-2] // 4, "indexer": [key_states.shape[-2] // 2]}
        return super().update(key_states, value_states, *args, **kwargs)


class CountingCache(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        cache = Cache(layers=[CountingLayer()])
        cache.update(x, x * 3, 0)
        return x.sum(-1), cache


def test_traced_counters_inside_a_dict_become_traced_ints(tmp_path):
    from exporters.bundle.format import TracedInt

    model, inputs = CountingCache(), kv(sequence=8)
    result = export(model, inputs, dynamic=True)
    assert result.metadata.workarounds_fired["_concrete_nested_scalars"] >= 1
    result.program.run_decompositions()  # torch.onnx and ExecuTorch deep-copy the module call graph here
    _, cache = saved_and_loaded(result, tmp_path).module()(**inputs)
    counts = cache.layers[0].entry_count
    assert counts == {"compressor": 2, "indexer": [4]}
    assert isinstance(counts["compressor"], TracedInt) and "//" in counts["compressor"].expr


def test_without_the_nested_rule_the_traced_counters_break_the_decompositions():
    result = export(CountingCache(), kv(sequence=8), dynamic=True, without="_concrete_nested_scalars")
    with pytest.raises(Exception, match="Cannot access data pointer of Tensor"):
        result.program.run_decompositions()
