"""Generation exports: one tiny Llama exported once per session (ONNX), loaded back, generated from.

The full model matrix (every decoder-only and encoder-decoder model, ONNX and ExecuTorch) is the slow
script ``scripts/generation_matrix.py``; its committed results are sweeps/generation-matrix.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from exporters.bundle.decoding import EagerGeneration, run_generation
from exporters.generation.check import check_generation
from exporters.generation.components import GenerationExportConfig, plan_components, sample_prompts
from exporters.tiny import build_tiny

ROOT = Path(__file__).resolve().parent.parent
NAME = "LlamaForCausalLM"


@pytest.fixture(scope="session")
def llama_bundle(tmp_path_factory):
    """The tiny Llama's generation bundle (ONNX), written and validated once; (directory, export, prompts)."""
    from bot.run.generation import export_generation

    out = tmp_path_factory.mktemp("generation") / "llama-onnx"
    export = export_generation(NAME, "onnx", out, task="text-generation")
    model = export.model
    return out, export, sample_prompts(model, batch=2, prompt_length=8)


def test_bundle_holds_both_components_and_the_cache_layout(llama_bundle):
    out, export, _ = llama_bundle
    assert export.status == "pass", export.problems()
    manifest = json.loads((out / "export.json").read_text())
    assert set(manifest["components"]) == {"prefill", "decode"}
    assert (out / "prefill.onnx").is_file() and (out / "decode.onnx").is_file()
    layout = manifest["generation"]
    assert layout["kind"] == "decoder-only" and layout["cache"] == "dynamic"
    assert layout["self_attention"]["key_shape"][0] == "batch" and layout["layers"] == 2
    assert layout["self_attention"]["layers"] == [0, 1] and len(layout["cache_tensors"]) == 4
    decode_inputs = [spec["name"] for spec in manifest["components"]["decode"]["inputs"]]
    assert decode_inputs[:2] == ["input_ids", "attention_mask"]
    assert {"past_key_0", "past_value_1"} <= set(decode_inputs)
    # Both components validated from the written files at two shapes, none nondeterministic.
    for name in ("prefill", "decode"):
        validation = manifest["components"][name]["validation"]
        assert validation["status"] == "pass"
        assert [s["label"] for s in validation["shapes"]] == ["sample shape", "second shape"]
    check = layout["validation"]
    assert check["status"] == "pass" and check["new_tokens"] == 16
    assert check["prompt_lengths"][0] != check["prompt_lengths"][1]
    assert check["eager_tokens"] == check["exported_tokens"]


def test_generate_in_a_fresh_process_matches_eager(llama_bundle):
    out, _, _ = llama_bundle
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "bot", "generate", str(out), "--prompt-length", "11", "--max-new-tokens", "20",
         "--json"], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    check = result["eager_comparison"]
    assert check["status"] == "pass", check["detail"]
    assert len(result["tokens"]) == 2 and all(len(row) == 20 for row in result["tokens"])
    assert result["prompt_lengths"] == [11, 8]
    assert result["decode_tokens_per_second"] > 0


def test_one_token_prompts_and_batch_1_are_validated_and_generate(llama_bundle):
    """torch.export's ranges start at 2 (decode's past, its mask at 3): the bundle validates a one-token prompt
    and batch 1 on the written files, records those minima, and generates there as eager does."""
    out, _, _ = llama_bundle
    manifest = json.loads((out / "export.json").read_text())
    for name in ("prefill", "decode"):
        component = manifest["components"][name]
        smaller = component["validation"]["smaller_shapes"]
        assert [(s["label"], s["status"]) for s in smaller] == [("one-token prompt", "pass"), ("batch 1", "pass")]
        assert component["dims"]["batch"]["min"] == 1
    decode = manifest["components"]["decode"]
    assert decode["dims"]["sequence"]["min"] == 2  # the mask of a one-token prompt's first decode step
    past = {shape[2] for spec in decode["inputs"] if spec["name"].startswith("past_") for shape in [spec["shape"]]}
    assert {decode["dims"][name]["min"] for name in past} == {1}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "bot", "generate", str(out), "--prompt-length", "1", "--batch-size", "1",
         "--max-new-tokens", "8", "--json"], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["prompt_lengths"] == [1] and result["eager_comparison"]["status"] == "pass"


def test_the_runtime_only_script_generates_eagers_tokens_from_the_manifest_alone(llama_bundle, tmp_path):
    """scripts/run_bundle_without_exportbot.py on a generation bundle: a greedy loop over onnxruntime alone,
    written from export.json, gives the tokens exporters.load(dir).generate gives on its prompt."""
    from exporters.bundle.loading import load

    out, _, _ = llama_bundle
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_bundle_without_exportbot.py"), str(out),
                          "--new-tokens", "6"], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert "exporters" not in result["imported"] and "transformers" not in result["imported"]
    ids = torch.tensor(result["prompt_ids"])
    vocabulary = json.loads((out / "export.json").read_text())["components"]["prefill"]["inputs"][0]["values"]
    assert vocabulary[0] <= int(ids.min()) and int(ids.max()) <= vocabulary[1]
    expected = load(out).generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6)
    assert result["tokens"] == expected.tokens.tolist()


def test_a_different_model_is_a_mismatch_at_the_first_differing_step(llama_bundle):
    out, _, prompts = llama_bundle
    from exporters.bundle.loading import load

    other = build_tiny(NAME, seed=1).model
    check = check_generation(other, load(out), prompts, max_new_tokens=16)
    assert check.status == "mismatch"
    assert check.first_mismatch == {"step": 0, "row": 0}
    assert "step 0, row 0" in check.detail


def test_eos_stops_rows_and_pads_them(llama_bundle):
    out, _, prompts = llama_bundle
    from exporters.bundle.loading import load

    bundle = load(out)
    free = bundle.generate(**prompts, max_new_tokens=6)
    eos = int(free.tokens[0, 1])  # row 0's second token becomes EOS: row 0 stops after step 1
    stopped = bundle.generate(**prompts, max_new_tokens=6, eos_token_id=eos, pad_token_id=0)
    assert stopped.tokens[0, 1] == eos
    assert (stopped.tokens[0, 2:] == 0).all()
    row1 = free.tokens[1].tolist()
    expected_row1 = row1[: row1.index(eos) + 1] if eos in row1 else row1
    assert stopped.tokens[1, : len(expected_row1)].tolist() == expected_row1


def test_sampling_is_seeded(llama_bundle):
    out, _, prompts = llama_bundle
    from exporters.bundle.loading import load

    bundle = load(out)
    first = bundle.generate(**prompts, max_new_tokens=8, do_sample=True, seed=3, top_k=50)
    again = bundle.generate(**prompts, max_new_tokens=8, do_sample=True, seed=3, top_k=50)
    other = bundle.generate(**prompts, max_new_tokens=8, do_sample=True, seed=4, top_k=50)
    assert torch.equal(first.tokens, again.tokens)
    assert not torch.equal(first.tokens, other.tokens)


def test_a_constant_greedy_path_is_inconclusive():
    model = build_tiny(NAME).model
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: argmax is token 0 forever, for every row
    prompts = sample_prompts(model)
    plans = plan_components(model, prompts, GenerationExportConfig(), "onnx")
    from exporters.generation.components import cache_layout

    reference = EagerGeneration(plans, cache_layout(model, plans, GenerationExportConfig(), "onnx"))
    check = check_generation(model, reference, prompts, max_new_tokens=16)
    assert check.status == "inconclusive"
    assert "degenerate" in check.detail


def test_eager_components_reproduce_eager_generate():
    """The wrappers' loop is transformers' greedy loop: the eager baseline of the benchmarks is the same."""
    model = build_tiny(NAME, seed=2).model
    prompts = sample_prompts(model, prompt_length=9, seed=2)
    config = GenerationExportConfig()
    plans = plan_components(model, prompts, config, "onnx")
    from exporters.generation.components import cache_layout

    layout = cache_layout(model, plans, config, "onnx")
    check = check_generation(model, EagerGeneration(plans, layout), prompts, max_new_tokens=16)
    assert check.status == "pass", check.detail
    output = run_generation({p.name: p.module for p in plans}, layout, prompts, max_new_tokens=3)
    assert output.tokens.shape == (2, 3) and output.decode_steps == 2


def test_generate_refuses_a_non_generation_bundle_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "bot", "generate", str(tmp_path / "missing")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


GENERATE_SKIP = """\
[[entry]]
id = "llama-generate-onnx"
models = ["LlamaForCausalLM"]
backend = "onnx"
scope = "generate"
dependency = "onnxruntime"
reason = "decode step fails in the runtime"
model_change = "none: a runtime bug"
failure = "Fail"
added = 2026-12-01
"""


def test_a_generate_scope_entry_gates_only_generation_exports(tmp_path):
    from exporters.ledger import load_ledger

    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(GENERATE_SKIP)
    ledger = load_ledger(tmp_path)
    assert ledger.skip("LlamaForCausalLM", "onnx", True, generate=True).id == "llama-generate-onnx"
    assert ledger.skip("LlamaForCausalLM", "onnx", True) is None
    assert ledger.skip("LlamaForCausalLM", "onnx", False) is None
    assert ledger.skip("LlamaForCausalLM", "executorch", True, generate=True) is None


@pytest.mark.parametrize(("model", "task", "says"), [
    ("ViTModel", "text-generation", "has no text-generation model"),
    ("LlamaForCausalLM", "text2text-generation", "needs an encoder-decoder model"),
])
def test_export_task_refuses_a_model_that_cannot_do_it(model, task, says, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "bot", "export", model, "--task", task, "--backend", "onnx",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300,
                         cwd=ROOT)
    assert run.returncode == 2, run.stderr[-1000:]
    assert says in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()
