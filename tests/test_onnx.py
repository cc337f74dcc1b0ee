"""OnnxExporter on a representative subset, validated in ONNX Runtime (the full list runs in the sweep)."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
import torch
from onnxscript import ir

from exporters.onnx import exporter as exporter_onnx
from exporters.onnx.exporter import OnnxConfig, OnnxExporter
from exporters.tiny import build_tiny

SUBSET = [
    ("BertModel", True),
    ("LlamaForCausalLM", True),
    ("ViTForImageClassification", False),
    ("T5ForConditionalGeneration", False),
    ("WhisperForConditionalGeneration", True),
]


@pytest.mark.parametrize(("name", "dynamic"), SUBSET, ids=[f"{n}-{'dynamic' if d else 'static'}" for n, d in SUBSET])
def test_subset_validates_in_onnxruntime(onnx_export, name, dynamic):
    result = onnx_export(name, dynamic)
    report = result.validate(raise_on_failure=False)
    assert report.status == "pass", report.problems()
    assert len(report.shapes) == (2 if dynamic else 1)
    assert all(diff <= 1e-3 for diff in report.max_abs_diff.values())


def test_readable_input_output_and_dim_names(onnx_export):
    model = onnx_export("LlamaForCausalLM", True).artifact
    inputs = {v.name: [str(d) for d in v.shape] for v in model.graph.inputs}
    assert inputs["input_ids"] == ["batch", "sequence"]
    outputs = [v.name for v in model.graph.outputs]
    assert outputs[0] == "logits" and "past_key_values.layers.1.values" in outputs
    assert str(model.graph.outputs[0].shape[0]) == "batch"
    assert not any(re.fullmatch(r"s\d+", str(d)) for v in model.graph.inputs for d in v.shape)


def test_t5_needs_the_reshape_fix_and_it_fires(onnx_export):
    """E1 (../shared/reference/stack.md): without the fix T5 fails in torch.onnx's decomposition step."""
    assert onnx_export("T5ForConditionalGeneration", False).metadata.workarounds_fired["_fix_reshape_of_strided"] > 0
    tiny = build_tiny("T5ForConditionalGeneration")
    config = OnnxConfig(without=frozenset({"_fix_reshape_of_strided"}))
    with pytest.raises(Exception, match="Cannot view a tensor with shape"):
        OnnxExporter(config).export(tiny.model, tiny.inputs)


def test_optimizer_off_keeps_numerics_and_more_nodes(onnx_export):
    tiny = build_tiny("BertModel")
    plain = OnnxExporter(OnnxConfig(dynamic=True, optimize=False)).export(tiny.model, tiny.inputs, validate=True)
    optimized = onnx_export("BertModel", True)
    assert plain.metadata.config["optimize"] is False and optimized.metadata.config["optimize"] is True
    assert len(list(plain.artifact.graph.all_nodes())) > len(list(optimized.artifact.graph.all_nodes()))


def file_runner(session: ort.InferenceSession):
    """A session made from the saved file, fed like the exporter's own runner (the graph's inputs only)."""
    names = {i.name for i in session.get_inputs()}
    return lambda kw: session.run(None, {k: v.numpy() for k, v in kw.items() if k in names})


def test_saved_model_loads_in_onnxruntime(onnx_export, tmp_path: Path, matches_eager):
    result = onnx_export("ViTForImageClassification", False)
    files = result.save(tmp_path)
    onnx.checker.check_model(str(files["artifact"]))
    session = ort.InferenceSession(str(files["artifact"]), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"pixel_values": result.inputs["pixel_values"].numpy()})[0]
    assert logits.shape == (result.inputs["pixel_values"].shape[0], result.model.config.num_labels)
    matches_eager(result, file_runner(session))  # every output's values, from the file


def test_saved_dynamic_model_matches_eager_at_both_shapes(onnx_export, tmp_path: Path, matches_eager):
    """A saved dynamic export, loaded back from disk, gives eager's values at the sample and a second shape
    (padded attention masks at both)."""
    result = onnx_export("BertModel", True)
    files = result.save(tmp_path)
    session = ort.InferenceSession(str(files["artifact"]), providers=["CPUExecutionProvider"])
    for inputs in (result.inputs, result.second_inputs):
        assert (inputs["attention_mask"] == 0).any()
        matches_eager(result, file_runner(session), inputs)


def test_stage_banners_are_in_order_and_workarounds_greppable():
    source = Path(exporter_onnx.__file__).read_text()
    banners = [(int(m[1]), m.start()) for m in re.finditer(r"^# ── Stage (\d+):", source, flags=re.M)]
    assert [number for number, _ in banners] == [1, 2, 3, 4, 5, 6, 7]
    starts = dict(banners)
    for stage, name in [(5, "apply_ir_fixes"), (6, "fuse_for_ort"), (7, "quantize")]:  # each stage's function under it
        assert starts[stage] < source.index(f"\ndef {name}(") < starts.get(stage + 1, len(source)), (stage, name)
    workarounds = re.findall(r"^def ((?:_patch_|_fix_|_aten_)\w+)", source, flags=re.M)
    assert "_fix_reshape_of_strided" in workarounds and "_patch_exact_zero_in_no_op_rules" in workarounds


def test_stage_seconds_account_for_the_whole_export_call(onnx_export):
    """Every second of ``export()`` is booked: named stages plus ``other`` add up to ``total``."""
    seconds = onnx_export("BertModel", True).metadata.stage_seconds
    assert {"torch.export", "torch.onnx.export", "ir fixes", "metadata"} <= set(seconds)
    parts = sum(v for k, v in seconds.items() if k not in {"total", "validation"})
    assert parts == pytest.approx(seconds["total"] - seconds.get("validation", 0.0), abs=2e-3)
    assert seconds["other"] < 0.05 * seconds["total"]


def ir_bytes(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString()


class MaskedAttention(torch.nn.Module):
    """SDPA with a boolean mask whose first query row of batch 0 attends to no key (a padded position)."""

    def forward(self, query, key, value, keep):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keep)


def test_boolean_mask_sdpa_goes_additive_keeps_eager_numerics_and_drops_the_nan_guard():
    torch.manual_seed(0)
    keep = torch.rand(2, 1, 6, 6) > 0.3
    keep[0, 0, 0, :] = False  # a row with no key: eager gives zeros there
    keep[:, :, 1:, 0] = True  # every other row keeps at least one key
    inputs = {"query": torch.randn(2, 2, 6, 8), "key": torch.randn(2, 2, 6, 8), "value": torch.randn(2, 2, 6, 8),
              "keep": keep}  # fmt: skip
    fixed = OnnxExporter(OnnxConfig()).export(MaskedAttention(), inputs, validate=True)
    assert fixed.metadata.workarounds_fired.get("_patch_sdpa_boolean_mask", 0) >= 1
    assert fixed.validation.status == "pass"
    plain = OnnxExporter(OnnxConfig(without=frozenset({"_patch_sdpa_boolean_mask"}))).export(MaskedAttention(), inputs)
    report = plain.validate(raise_on_failure=False)  # torchlib's guard misses the row: the mean of the values
    assert report.status == "mismatch" and max(report.max_abs_diff.values()) > 0.1
    ops = lambda result: [node.op_type for node in result.artifact.graph]  # noqa: E731
    assert "IsNaN" in ops(plain) and "IsNaN" not in ops(fixed)
    session = ort.InferenceSession(ir_bytes(fixed.artifact), providers=["CPUExecutionProvider"])
    out = session.run(None, {k: v.numpy() for k, v in inputs.items()})[0]
    assert not out[0, :, 0].any()  # the row with no key is exactly zero, as in eager


class TwoMaskedAttentionLayers(torch.nn.Module):
    """Two SDPA calls reading one boolean mask, as every layer of an encoder does."""

    def forward(self, query, key, value, keep):
        first = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keep)
        return torch.nn.functional.scaled_dot_product_attention(first, key, value, attn_mask=keep)


class TwoLayersTwoMasks(torch.nn.Module):
    """Two decoder layers: self-attention and cross-attention each, alternating two boolean masks."""

    def forward(self, query, key, value, keep, other):
        for _ in range(2):
            query = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keep)
            query = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=other)
        return query


def _traced_ops(model: torch.nn.Module, inputs: dict) -> list[str]:
    from exporters.utils import installed_patches

    with installed_patches("onnx"):
        program = torch.export.export(model, (), inputs)
    return [str(node.target) for node in program.graph.nodes if node.op == "call_function"]


def test_boolean_mask_is_made_additive_once_per_mask_in_the_traced_graph():
    """Built once per mask while tracing, not merged later: each node the patch adds is paid again by
    run_decompositions, translation and the optimizer. Alternating masks get one each, and stay exact."""
    keep, other = torch.ones(2, 1, 6, 6, dtype=torch.bool), torch.ones(2, 1, 6, 6, dtype=torch.bool)
    keep[0, 0, 0, :], other[1, 0, 2:, 3] = False, False
    qkv = {"query": torch.randn(2, 2, 6, 8), "key": torch.randn(2, 2, 6, 8), "value": torch.randn(2, 2, 6, 8)}
    shared = _traced_ops(TwoMaskedAttentionLayers(), {**qkv, "keep": keep})
    assert shared.count("aten.where.self") == 1 and shared.count("aten.any.dim") == 1
    separate = _traced_ops(TwoLayersTwoMasks(), {**qkv, "keep": keep, "other": other})
    assert separate.count("aten.where.self") == 2 and separate.count("aten.any.dim") == 2
    inputs = {**qkv, "keep": keep, "other": other}
    result = OnnxExporter(OnnxConfig()).export(TwoLayersTwoMasks(), inputs, validate=True)
    assert result.validation.status == "pass"


def test_boolean_mask_becomes_additive_once_for_all_layers_and_stores_no_mask_sized_constant():
    """The additive mask is built from 0-d constants, so the layers share one ``Where`` after CSE and a static
    graph carries no (batch, 1, query, key) zeros initializer per layer (16 MB a layer at 2048 tokens)."""
    keep = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    keep[0, 0, 0, :] = False
    inputs = {"query": torch.randn(2, 2, 6, 8), "key": torch.randn(2, 2, 6, 8), "value": torch.randn(2, 2, 6, 8),
              "keep": keep}  # fmt: skip
    result = OnnxExporter(OnnxConfig()).export(TwoMaskedAttentionLayers(), inputs, validate=True)
    assert result.validation.status == "pass"
    assert [node.op_type for node in result.artifact.graph].count("Where") == 1
    shapes = [tuple(value.shape) for value in result.artifact.graph.initializers.values()]
    assert all(len(shape) < 4 for shape in shapes), shapes
