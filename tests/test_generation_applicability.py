"""Generation failures that came from the builder or the model's cache API, not from the export (#17).

* encoder-style configs behind a causal LM head get ``is_decoder=True`` (the tiny builder's generation knob);
* models with no KV cache in ``Cache`` are refused before tracing with one line naming why, and the sweep
  records them ``skipped`` with that reason instead of a raw ``AttributeError``;
* a degenerate greedy path (one token forever) makes the sweep's task try other builds, bounded, recorded,
  and still ``inconclusive`` when every try is degenerate.

Eager only (no export is traced), except the CLI's one-line refusal, which runs ``bot export`` in a process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bot.run.generation import NotForGeneration, build_generation_model
from exporters.generation.check import degenerate
from exporters.generation.components import (
    DecoderOnlyStep,
    GenerationExportConfig,
    plan_components,
    sample_prompts,
)
from exporters.generation.support import GenerationUnsupported, unsupported_reason
from exporters.tiny import build_tiny
from exporters.tiny.generation import generation_overrides, lively_attempt

ROOT = Path(__file__).resolve().parent.parent


# ── 1. is_decoder on encoder-style configs ──
def test_encoder_style_causal_heads_are_built_as_decoders_and_return_a_cache():
    from transformers import BertConfig, LlamaConfig

    assert generation_overrides(BertConfig()) == {"is_decoder": True}
    assert generation_overrides(LlamaConfig()) == {}
    model, source = build_generation_model("BertLMHeadModel", 0)
    assert model.config.is_decoder and source["overrides"] == {"is_decoder": True}  # replayed by rebuild_source
    prompts = sample_prompts(model)
    with torch.no_grad():
        out = DecoderOnlyStep(model, with_past=False)(**prompts)
    assert out["present_key_0"].shape[2] == prompts["input_ids"].shape[1]


def test_an_encoder_config_that_returns_no_cache_is_named_not_an_attribute_error():
    model = build_tiny("BertLMHeadModel").model  # is_decoder False: the cache is forced off
    with pytest.raises(GenerationUnsupported, match="is_decoder is False"):
        plan_components(model, sample_prompts(model), GenerationExportConfig(), "onnx")


# ── 2. no KV cache in Cache ──
@pytest.mark.parametrize(("name", "says"), [
    ("MambaForCausalLM", "`cache_params`"),
    ("RwkvForCausalLM", "`state`, a list of tensors outside transformers' Cache"),
    ("XLNetLMHeadModel", "`mems`"),
    ("XLMWithLMHeadModel", "re-runs the whole sequence every step"),
    ("OpenAIGPTLMHeadModel", "re-runs the whole sequence every step"),
])
def test_models_without_a_kv_cache_are_refused_before_tracing(name, says):
    model = build_tiny(name).model
    reason = unsupported_reason(model)
    assert reason is not None and says in reason and "past_key_values" in reason
    from exporters.generation.export import export_for_generation
    from exporters.onnx.exporter import OnnxExporter

    with pytest.raises(GenerationUnsupported) as refused:  # the early reason, not the first prefill's
        export_for_generation(OnnxExporter(), model, sample_prompts(model))
    assert str(refused.value) == reason
    with pytest.raises(NotForGeneration):
        build_generation_model(name, 0)


def test_state_kept_in_modules_is_refused_before_tracing():
    model = build_tiny("RecurrentGemmaForCausalLM").model
    reason = unsupported_reason(model)  # it takes past_key_values, but its state lives in its modules
    assert reason is not None and "CausalLM" in reason and "in its modules" in reason
    from exporters.generation.export import export_for_generation
    from exporters.onnx.exporter import OnnxExporter

    with pytest.raises(GenerationUnsupported) as refused:  # before its first prefill, which would fail inside
        export_for_generation(OnnxExporter(), model, sample_prompts(model))  # the model's get_seq_length
    assert str(refused.value) == reason


def test_kv_cache_models_are_not_refused():
    for name in ("LlamaForCausalLM", "GPT2LMHeadModel", "T5ForConditionalGeneration"):
        assert unsupported_reason(build_tiny(name).model) is None


@pytest.mark.parametrize("name", ["Qwen3NextForCausalLM", "ZayaForCausalLM", "Zamba2ForCausalLM"])
def test_stateful_hybrids_whose_states_live_in_the_cache_are_not_refused(name):
    """transformers marks them ``_is_stateful`` (no cache rollback), yet their conv and recurrent states are the
    ``Cache``'s linear-attention layers, which the components carry: refusing them on that flag skipped them all."""
    model = build_tiny(name).model
    assert model._is_stateful
    assert unsupported_reason(model) is None


def test_the_sweep_records_a_model_without_a_kv_cache_as_skipped_with_its_reason():
    from bot.run.generation import sweep_generation_outcome

    outcome = sweep_generation_outcome("OpenAIGPTLMHeadModel", "onnx", [])
    assert outcome.status == "skipped" and outcome.ledger_entry is None
    assert outcome.cause.startswith("OpenAIGPTLMHeadModel has no KV cache")


def test_export_task_refuses_a_model_without_a_kv_cache_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "bot", "export", "RwkvForCausalLM", "--task", "text-generation",
                          "--backend", "onnx", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                         env=env, timeout=300, cwd=ROOT)
    assert run.returncode == 2, run.stderr[-1000:]
    assert "Traceback" not in run.stderr and "AttributeError" not in run.stderr
    assert "RwkvForCausalLM has no KV cache" in run.stderr
    assert not (tmp_path / "out").exists()


# ── 3. degenerate greedy paths ──
def _build(name):
    return lambda seed, overrides: build_generation_model(name, seed, overrides=overrides)[0]


def test_a_degenerate_tied_head_is_retried_untied_and_every_try_is_recorded():
    seed, overrides, tries = lively_attempt(_build("BloomForCausalLM"))
    assert (seed, overrides) == (0, {"tie_word_embeddings": False})
    assert [t["degenerate"] for t in tries] == [True, False]


def test_when_every_try_is_degenerate_the_first_build_is_kept():
    seed, overrides, tries = lively_attempt(_build("BloomForCausalLM"), attempts=((0, {}), (1, {})))
    assert (seed, overrides) == (0, {})
    assert len(tries) == 2 and all(t["degenerate"] for t in tries)


def test_a_lively_model_is_built_once():
    seed, overrides, tries = lively_attempt(_build("LlamaForCausalLM"))
    assert (seed, overrides) == (0, {}) and tries == [{"seed": 0, "overrides": {}, "degenerate": False}]


def test_degenerate_means_one_token_in_every_row():
    assert degenerate(torch.tensor([[5, 5, 5], [7, 7, 7]]))
    assert not degenerate(torch.tensor([[5, 5, 5], [7, 8, 7]]))


def test_the_sweep_exports_the_lively_build_and_says_when_none_was(monkeypatch):
    import bot.run.generation as outcome_module
    from bot.outcome import ExportOutcome

    seen = {}

    def fake_outcome(model_class, backend, out_dir, seed=0, overrides=None, without=(), quantize=None):
        seen.update(seed=seed, overrides=overrides)
        outcome = ExportOutcome(model_class, backend, True, "inconclusive", 0.0, error="generate: degenerate")
        outcome.options = {"task": "generation"}
        return outcome

    monkeypatch.setattr(outcome_module, "generation_outcome", fake_outcome)
    monkeypatch.setattr(outcome_module, "lively_build", lambda name: (0, {"tie_word_embeddings": False},
                        [{"seed": 0, "overrides": {}, "degenerate": True},
                         {"seed": 0, "overrides": {"tie_word_embeddings": False}, "degenerate": False}]))
    outcome = outcome_module.sweep_generation_outcome("BloomForCausalLM", "onnx", [])
    assert seen == {"seed": 0, "overrides": {"tie_word_embeddings": False}}
    assert len(outcome.options["tries"]) == 2 and "all 2 tries" not in outcome.error
    monkeypatch.setattr(outcome_module, "lively_build", lambda name: (0, {}, [
        {"seed": 0, "overrides": {}, "degenerate": True}, {"seed": 1, "overrides": {}, "degenerate": True}]))
    outcome = outcome_module.sweep_generation_outcome("BloomForCausalLM", "onnx", [])
    assert outcome.status == "inconclusive" and "all 2 tries degenerate" in outcome.error


def test_the_cli_builds_a_class_name_as_the_sweep_does_unless_a_build_is_chosen():
    """`exportbot export T5ForConditionalGeneration --task text2text-generation` exited 1 "inconclusive": seed 0
    is degenerate in eager, and only the sweep tried other builds. The CLI now tries the same ones (eager
    only), and `--seed` / `--init-scale` choose the build instead."""
    from bot.run.generation import tiny_build

    seed, overrides, tries = tiny_build("T5ForConditionalGeneration", 0, None, None, try_builds=True)
    assert tries[0] == {"seed": 0, "overrides": {}, "degenerate": True} and not tries[-1]["degenerate"]
    assert (seed, overrides) == (tries[-1]["seed"], tries[-1]["overrides"])
    assert tiny_build("T5ForConditionalGeneration", 3, None, None, try_builds=False) == (3, None, [])
    _, scaled, tries = tiny_build("T5ForConditionalGeneration", 0, None, 4.0, try_builds=True)
    assert scaled == {"initializer_factor": 4.0} and tries == []
    _, scaled, _ = tiny_build("LlamaForCausalLM", 0, None, 2.5, try_builds=False)
    assert scaled == {"initializer_range": pytest.approx(0.05)}


def test_init_scale_applies_to_tiny_models_only(tmp_path):
    from click.testing import CliRunner

    from bot.cli.main import main

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    for task in ([], ["--task", "text-generation"]):
        result = CliRunner().invoke(main, ["export", str(tmp_path / "ckpt"), *task, "--init-scale", "2",
                                           "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines()[-1].endswith(
            f"--init-scale scales a tiny model built from a class name; {tmp_path / 'ckpt'} is a checkpoint")


# ── 4. tiny sizes that made hybrid generation exports run out of memory or time ──
def test_fields_named_by_an_alias_keep_their_shrunk_value():
    # KimiLinearConfig declares ``num_local_experts`` (256) and ``num_experts_per_tok`` (8), aliases stored as
    # ``num_experts`` / ``num_experts_per_token``: the rebuild read the declared names, found nothing, and the
    # constructor's defaults came back, a 6.5 M-parameter "tiny" model whose generation export timed out at 600 s.
    from exporters.tiny.shrink import default_config, model_class, shrink_config
    from exporters.tiny.sizes import EXPERTS

    config = shrink_config(default_config(model_class("KimiLinearForCausalLM")))
    assert config.num_experts <= EXPERTS and config.num_experts_per_token <= 2
    assert config.num_local_experts == config.num_experts  # read through the alias, as the model reads it


def test_mamba2_blocks_of_every_family_get_tiny_heads_state_and_chunks():
    # Falcon-H1 names them mamba_*: left at 128 heads and a 256-wide state, its chunked scan made one eager
    # forward 6.4 s and 500 MB, and the generation export ran out of the sweep's 4 GiB.
    from exporters.generation.components import default_max_cache_len
    from exporters.tiny.layers import SSM_STATE
    from exporters.tiny.shrink import default_config, model_class, shrink_config
    from exporters.tiny.sizes import HEADS

    config = shrink_config(default_config(model_class("FalconH1ForCausalLM")))
    assert config.mamba_n_heads <= HEADS and config.mamba_d_state <= SSM_STATE
    assert config.mamba_chunk_size > default_max_cache_len(config)  # every prompt padded, as full-size
    assert config.mamba_n_heads * config.mamba_d_head == config.mamba_d_ssm == config.mamba_expand * config.hidden_size
