"""The ONNX in-place KV cache (``--cache in-place --backend onnx``, exporters.generation.gqa): one ``step`` graph
whose attention is ONNX Runtime's ``GroupQueryAttention``, its ``past_*`` and ``present_*`` bound to one buffer
by the loop, validated token for token from the written ``step.onnx`` like every generation bundle."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from exporters.generation.components import sample_prompts

NAME = "LlamaForCausalLM"
MAX_CACHE_LEN = 64  # conftest's IN_PLACE_MAX_CACHE_LEN


@pytest.fixture(scope="module")
def onnx_in_place_bundle(in_place_bundle_of):
    """The tiny Llama's ONNX in-place bundle, written and validated once: (directory, export)."""
    return in_place_bundle_of("onnx")


def test_the_onnx_step_attends_with_group_query_attention_and_generates_eagers_tokens(onnx_in_place_bundle,
                                                                                      generates_eagers_tokens):
    out, export = onnx_in_place_bundle
    assert export.status == "pass", export.problems()
    manifest = json.loads((out / "export.json").read_text())
    layout = manifest["generation"]
    assert layout["cache"] == "in-place" and layout["components"] == ["step"]
    assert layout["validation"]["status"] == "pass" and layout["backend"] == "onnx"
    step = manifest["components"]["step"]
    names = [t["name"] for t in step["inputs"]]
    assert names[:2] == ["input_ids", "cache_position"] and names[2:] == [row["input"] for row in
                                                                         layout["cache_tensors"]]
    # The written graph: one GroupQueryAttention per layer (com.microsoft), no rotary inside it, and each
    # cache input of the max-length buffer's shape, as ONNX Runtime's shared-buffer form takes it.
    graph = onnx.load(out / "step.onnx").graph
    gqa = [node for node in graph.node if node.op_type == "GroupQueryAttention"]
    assert len(gqa) == layout["layers"] == 2 and {node.domain for node in gqa} == {"com.microsoft"}
    assert all(next(a.i for a in node.attribute if a.name == "do_rotary") == 0 for node in gqa)
    key = next(i for i in graph.input if i.name == "past_key_0")
    assert [d.dim_value for d in key.type.tensor_type.shape.dim][2] == MAX_CACHE_LEN

    generates_eagers_tokens(out, export)  # loaded back fresh: 40 and then 12 tokens equal eager's


def test_past_and_present_share_one_buffer_in_the_loop(onnx_in_place_bundle):
    """No cache copy per step: every ``present_*`` output is the ``past_*`` input's own OrtValue memory, and the
    step's keys land in it at their positions (slots past the position stay zero)."""
    import exporters
    from exporters.bundle.stepping import OrtInPlaceSession, open_session

    out, export = onnx_in_place_bundle
    bundle = exporters.load(out)
    session = open_session(bundle)
    assert isinstance(session, OrtInPlaceSession)
    prompt = sample_prompts(export.model, batch=1, prompt_length=6, seed=3)
    logits = session.prefill(prompt, {}, steps=3)
    for _ in range(2):
        logits = session.decode(np.argmax(logits, axis=-1))
    rows = bundle.metadata.generation["cache_tensors"]
    bound = [row["output"] for row in rows] + ["logits"]  # ONNX Runtime returns them in the order bound
    outputs = dict(zip(bound, session.binding.get_outputs(), strict=True))
    for row in rows:
        assert outputs[row["output"]].data_ptr() == session.buffers[row["input"]].data_ptr()
    key = session.buffers["past_key_0"].numpy()  # [1, kv_heads, max_cache_len, head_dim]
    written = np.abs(key[0]).sum(axis=(0, 2)) > 0
    assert written[:8].all() and not written[8:].any()  # 6 prompt slots + 2 decode steps


def test_the_eager_kernel_computes_grouped_causal_attention_over_the_written_slots():
    """``exportbot::group_query_attention`` against plain attention over the whole sequence: a 5-token prompt
    then a 3-token chunk into an 8-slot buffer, 4 query heads over 2 key/value heads."""
    from exporters.generation.gqa import group_query_attention

    torch.manual_seed(0)
    heads, kv_heads, dim, slots = 4, 2, 8, 8
    keys, values = torch.randn(1, 8, kv_heads * dim), torch.randn(1, 8, kv_heads * dim)
    queries = torch.randn(1, 8, heads * dim)
    past_key, past_value = torch.zeros(1, kv_heads, slots, dim), torch.zeros(1, kv_heads, slots, dim)
    for start, end in ((0, 5), (5, 8)):
        total = torch.tensor(end, dtype=torch.int32)
        out, past_key, past_value = group_query_attention(
            queries[:, start:end], keys[:, start:end], values[:, start:end], past_key, past_value,
            (total - 1).reshape(1), total, heads, kv_heads, dim**-0.5)
    full_k = keys.view(1, 8, kv_heads, dim).transpose(1, 2).repeat_interleave(2, dim=1)
    full_v = values.view(1, 8, kv_heads, dim).transpose(1, 2).repeat_interleave(2, dim=1)
    reference = torch.nn.functional.scaled_dot_product_attention(
        queries.view(1, 8, heads, dim).transpose(1, 2), full_k, full_v, is_causal=True)
    torch.testing.assert_close(out, reference.transpose(1, 2).reshape(1, 8, heads * dim)[:, 5:8])
    torch.testing.assert_close(past_key, keys.view(1, 8, kv_heads, dim).transpose(1, 2))


def test_exportbot_export_writes_an_onnx_in_place_bundle(tmp_path):
    from bot.cli.main import main

    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["export", NAME, "--task", "text-generation", "--backend", "onnx", "--cache",
                                    "in-place", "--max-sequence", "32", "--seed", "0", "--out", str(out)])
    assert run.exit_code == 0, run.output
    layout = json.loads((out / "export.json").read_text())["generation"]
    assert layout["cache"] == "in-place" and layout["max_cache_len"] == 32
    assert layout["validation"]["status"] == "pass"
