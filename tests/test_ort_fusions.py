"""``--ort-fusions``: ONNX Runtime's fused operators in a generation bundle, validated token for token.

One tiny Llama generation export (ONNX) with the fusions; its written graphs hold the fused operators (decode's
attention too: every cache input shares one past length), its validation (from the files, against eager
``generate``) passed, and it generates eager's tokens past 64.
"""

from __future__ import annotations

import json
from collections import Counter

import onnx
import pytest
from click.testing import CliRunner

from bot.cli.main import main


@pytest.fixture(scope="module")
def fused_bundle(tmp_path_factory):
    from bot.run.generation import export_generation

    out = tmp_path_factory.mktemp("fused") / "llama-onnx-fused"
    export = export_generation("LlamaForCausalLM", "onnx", out, task="text-generation", ort_fusions=True)
    return out, export


def test_the_fused_bundle_holds_onnxruntime_ops_and_validates(fused_bundle):
    out, export = fused_bundle
    assert export.status == "pass", export.problems()
    for name in ("prefill", "decode"):
        ops = Counter(node.op_type for node in onnx.load(str(out / f"{name}.onnx")).graph.node)
        assert ops["SkipSimplifiedLayerNormalization"] > 0 and ops["SimplifiedLayerNormalization"] > 0, ops
    manifest = json.loads((out / "export.json").read_text())
    check = manifest["generation"]["validation"]
    assert check["status"] == "pass" and check["eager_tokens"] == check["exported_tokens"]


def test_decode_attention_fuses_over_one_shared_past_length(fused_bundle):
    out, _ = fused_bundle
    graph = onnx.load(str(out / "decode.onnx")).graph
    pasts = {i.name: i.type.tensor_type.shape.dim[2].dim_param for i in graph.input if i.name.startswith("past_")}
    assert len(set(pasts.values())) == 1 and "" not in pasts.values(), pasts
    attention = [n for n in graph.node if n.op_type in ("MultiHeadAttention", "GroupQueryAttention")]
    assert len(attention) == 2, Counter(n.op_type for n in graph.node)  # one per layer of the tiny Llama


def test_the_fused_bundle_generates_eagers_tokens_past_the_old_cap(fused_bundle):
    from exporters.bundle.loading import load
    from exporters.generation.check import check_generation
    from exporters.generation.components import sample_prompts

    out, export = fused_bundle
    prompts = sample_prompts(export.model, batch=2, prompt_length=16)
    check = check_generation(export.model, load(out), prompts, max_new_tokens=80)
    assert check.status == "pass", check.detail


def test_decode_attention_fuses_without_grouped_query_heads(tmp_path):
    """As many key/value heads as query heads: no ``repeat_kv`` between the cache and the attention, so the
    SDPA rule binds the batch from the cache output itself, which the graph must name as its inner values."""
    from bot.run.generation import export_generation

    out = tmp_path / "llama-mha"
    export = export_generation("LlamaForCausalLM", "onnx", out, task="text-generation", ort_fusions=True,
                               overrides={"num_key_value_heads": 4})
    assert export.status == "pass", export.problems()
    ops = Counter(node.op_type for node in onnx.load(str(out / "decode.onnx")).graph.node)
    assert ops["MultiHeadAttention"] == 2, ops


def test_ort_fusions_is_an_onnx_option(tmp_path):
    result = CliRunner().invoke(main, ["export", "LlamaForCausalLM", "--task", "text-generation", "--backend",
                                       "executorch", "--ort-fusions", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "--ort-fusions is an ONNX option; --backend is executorch" in result.output
