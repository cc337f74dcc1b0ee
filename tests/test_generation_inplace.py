"""The in-place KV cache (``--cache in-place``, exporters.generation.inplace): one ExecuTorch method whose cache is
its own mutable buffers, validated token for token from the written ``.pte`` like every generation bundle."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from exporters.generation.components import sample_prompts
from exporters.tiny import build_tiny

NAME = "LlamaForCausalLM"
MAX_CACHE_LEN = 64  # conftest's IN_PLACE_MAX_CACHE_LEN


@pytest.fixture(scope="module")
def in_place_bundle(in_place_bundle_of):
    """The tiny Llama's in-place ExecuTorch bundle, written and validated once: (directory, export)."""
    return in_place_bundle_of("executorch")


def test_the_in_place_pte_takes_no_cache_and_generates_eagers_tokens(in_place_bundle, generates_eagers_tokens):
    from executorch.runtime import Runtime


    out, export = in_place_bundle
    assert export.status == "pass", export.problems()
    manifest = json.loads((out / "export.json").read_text())
    layout = manifest["generation"]
    assert layout["cache"] == "in-place" and layout["max_cache_len"] == MAX_CACHE_LEN
    assert layout["components"] == ["step"] and layout["validation"]["status"] == "pass"
    assert layout["cache_buffers"]["key_shape"][1] == MAX_CACHE_LEN  # sequence-major, as ExecuTorch's custom ops
    step = manifest["components"]["step"]
    assert [t["name"] for t in step["inputs"]] == ["input_ids", "cache_position"]
    assert [t["name"] for t in step["outputs"]] == ["logits"]
    assert step["validation"]["status"] == "pass"
    # The written program itself: two inputs (tokens, positions), one output; the cache is not among them.
    meta = Runtime.get().load_program(out / "step.pte").metadata("forward")
    assert (meta.num_inputs(), meta.num_outputs()) == (2, 1)

    # Loaded back fresh: a long generation, then a shorter prompt on the same loaded method (its cache now holds
    # the first generation's slots past the new prompt, masked), each token for token with eager generate().
    generates_eagers_tokens(out, export)


def test_the_cache_buffers_start_from_values_the_pte_holds(in_place_bundle):
    """ExecuTorch promises nothing about a mutable buffer's first value unless the .pte carries it (its emitter
    writes only the shape of a mutated buffer); a masked slot holding NaN would still poison attention
    (0 x NaN), so every cache buffer's zeros are serialized and copied in when the method loads."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import Tensor

    out, _ = in_place_bundle
    pte = deserialize_pte_binary((out / "step.pte").read_bytes())
    plan = getattr(pte, "program", pte).execution_plan[0]
    tensors = [value.val for value in plan.values if isinstance(value.val, Tensor)]
    shaped = [t for t in tensors if len(t.sizes) == 4 and t.sizes[1] == MAX_CACHE_LEN]  # buffers and activations
    initialized = [t for t in shaped if t.data_buffer_idx > 0]  # with their initial value in the program
    assert len(initialized) == 4  # 2 layers x key, value
    assert all(t.allocation_info is not None for t in initialized)  # memory-planned: mutable, not constants


def test_generate_refuses_what_the_in_place_bundle_cannot_run(in_place_bundle):
    import exporters

    out, export = in_place_bundle
    bundle = exporters.load(out)
    prompts = sample_prompts(export.model, batch=2, prompt_length=8)
    with pytest.raises(ValueError, match="one unpadded prompt"):
        bundle.generate(prompts["input_ids"], attention_mask=prompts["attention_mask"], max_new_tokens=4)
    with pytest.raises(ValueError, match=f"max_cache_len {MAX_CACHE_LEN}"):
        bundle.generate(prompts["input_ids"][:1, :8], max_new_tokens=MAX_CACHE_LEN)


@pytest.mark.parametrize(("model", "arguments", "says"), [
    (NAME, ["--task", "text-generation", "--backend", "dynamo"], "executorch or onnx; --backend is dynamo"),
    (NAME, ["--task", "text-generation", "--backend", "onnx", "--batch-size", "2"], "serves batch 1"),
    (NAME, ["--task", "text-generation", "--backend", "onnx", "--quantize", "int8"], "float only"),
    (NAME, ["--task", "text-generation", "--backend", "executorch", "--batch-size", "2"], "serves batch 1"),
    (NAME, ["--task", "text-generation", "--backend", "executorch", "--quantize", "8da4w"], "float only"),
    ("LlamaModel", ["--backend", "executorch"], "--cache in-place is a generation option"),
])
def test_export_refuses_what_the_in_place_cache_does_not_serve(model, arguments, says, tmp_path):
    from bot.cli.main import main

    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["export", model, *arguments, "--cache", "in-place", "--seed", "0",
                                    "--out", str(out)])
    assert run.exit_code == 2, run.output
    assert says in run.output and "Traceback" not in run.output
    assert not out.exists()


@pytest.mark.parametrize(("model", "says"), [
    ("T5ForConditionalGeneration", "T5ForConditionalGeneration is encoder-decoder"),
    ("Gemma2ForCausalLM", "has StaticSlidingWindowLayer cache layers"),
])
def test_models_the_in_place_cache_does_not_serve_are_refused_before_tracing(model, says):
    from bot.run.generation import build_generation_model
    from exporters.generation.inplace import InPlaceUnsupported, check_in_place

    built, _ = build_generation_model(model, 0)
    with pytest.raises(InPlaceUnsupported, match=says):
        check_in_place(built, sample_prompts(built, batch=1, prompt_length=8), "executorch")


def test_a_padded_sample_prompt_is_refused():
    from exporters.generation.inplace import InPlaceUnsupported, check_in_place

    model = build_tiny(NAME, 0).model.eval()
    prompt = sample_prompts(model, batch=1, prompt_length=8)
    prompt["attention_mask"] = torch.cat([torch.zeros(1, 2, dtype=torch.long), prompt["attention_mask"][:, 2:]], 1)
    with pytest.raises(InPlaceUnsupported, match="unpadded"):
        check_in_place(model, prompt, "executorch")


def test_the_export_help_names_the_cache_modes():
    from bot.cli.main import main

    run = CliRunner().invoke(main, ["export", "--help"])
    assert "--cache [dynamic|in-place]" in run.output and "mutable buffers" in run.output
    assert "GroupQueryAttention" in run.output


def test_exportbot_generate_runs_the_in_place_bundle_unchanged(in_place_bundle):
    """The user's side does not change: `exportbot generate DIR` runs an in-place bundle and compares it with
    eager generate() on the model its manifest records."""
    from bot.cli.main import main

    out, _ = in_place_bundle
    run = CliRunner().invoke(main, ["generate", str(out), "--batch-size", "1", "--prompt-length", "6",
                                    "--max-new-tokens", "24", "--json"])
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    assert result["eager_comparison"]["status"] == "pass", result["eager_comparison"]["detail"]
    assert len(result["tokens"]) == 1 and len(result["tokens"][0]) == 24
