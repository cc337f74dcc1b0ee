"""Fast checks of the generation export's own fixes (no export, no model build unless stated).

Each test fails without the fix it names; the slow end-to-end evidence is the sweep re-run
(``sweeps/generation/onnx-export.rerun.jsonl`` in git history, merged into
``sweeps/generation/onnx-shard-*-of-8.jsonl``).
"""

from __future__ import annotations

import torch

from exporters.bundle.decoding import run_generation
from exporters.bundle.stepping import ComponentSession

VOCAB = 8


def _components(favourite: int):
    """A decoder-only prefill/decode pair whose logits always prefer ``favourite``, then token 5."""

    def step(**inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = inputs["input_ids"].shape[0]
        logits = torch.zeros(batch, VOCAB)
        logits[:, favourite], logits[:, 5] = 2.0, 1.0
        return {"logits": logits, "present_key_0": torch.zeros(batch, 1, 1, 2),
                "present_value_0": torch.zeros(batch, 1, 1, 2)}

    return {"prefill": step, "decode": step}


def test_min_new_tokens_skips_eos_ids_outside_the_vocabulary():
    # GLM's config lists eos ids 151329.. that a small-vocabulary model cannot emit; masking them must not
    # index past the logits (IndexError before), and the in-vocabulary EOS must still be masked.
    layout = {"kind": "decoder-only", "eos_token_id": [2, 151329], "pad_token_id": 0}
    prompt = {"input_ids": torch.tensor([[3, 4]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)}
    out = run_generation(ComponentSession(_components(favourite=2), layout), layout, prompt, max_new_tokens=3,
                         min_new_tokens=2)
    assert out.tokens.tolist() == [[5, 5, 2]]


# ── Failure records of generation exports (bot.run.generation): as complete as a static export's ──
def _failing_export(**kwargs):
    """Raises as export_for_generation does when prefill's torch.export fails inside a model helper."""
    from exporters.generation.export import GenerationExportError

    def rotary_helper():
        raise IndexError("index 9 is out of bounds for dimension 0 with size 4")

    stages = kwargs["stages"]
    with stages.stage("exporting components"), stages.stage("torch.export"):
        try:
            rotary_helper()
        except IndexError as error:
            raise GenerationExportError("TinyForCausalLM: component 'prefill' failed on onnx: IndexError: index 9 "
                                        "is out of bounds for dimension 0 with size 4", "prefill") from error


def test_a_raised_generation_failure_keeps_traceback_stage_and_a_reproducing_command(monkeypatch, tmp_path):
    import json

    import bot.run.generation
    from bot.run.generation import generation_outcome

    monkeypatch.setattr(bot.run.generation, "export_generation", lambda *args, **kwargs: _failing_export(**kwargs))
    outcome = generation_outcome("LlamaForCausalLM", "onnx", tmp_path / "bundle")
    assert outcome.status == "failed" and outcome.error_type == "GenerationExportError"
    assert "rotary_helper" in outcome.traceback_tail  # the cause's frames, not the wrapper's re-raise
    assert outcome.traceback_tail.rstrip().endswith("IndexError: index 9 is out of bounds for dimension 0 with size 4")
    assert outcome.failed_stage == "prefill: torch.export"
    assert outcome.cause == "IndexError: index 9 is out of bounds for dimension 0 with size 4"
    assert outcome.hint == "reproduce: exportbot export LlamaForCausalLM --task text-generation --backend onnx --debug"
    assert outcome.repro_source == "generation export of the tiny model"
    record = json.loads((tmp_path / "bundle.failed.json").read_text())
    assert "rotary_helper" in record["traceback"] and record["failed_stage"] == "prefill: torch.export"


def test_a_generation_build_failure_and_a_mismatch_name_their_stage(monkeypatch, tmp_path):
    import types

    import bot.run.generation
    from bot.errors import UsageProblem
    from bot.run.generation import generation_outcome

    def unbuildable(*args, **kwargs):
        with kwargs["stages"].stage("building model"):
            raise UsageProblem("T5ForConditionalGeneration: no decoder_start_token_id")

    monkeypatch.setattr(bot.run.generation, "export_generation", unbuildable)
    built = generation_outcome("T5ForConditionalGeneration", "onnx", tmp_path / "t5")
    assert (built.status, built.failed_stage) == ("build-error", "building model")
    assert built.traceback_tail and "unbuildable" in built.traceback_tail
    assert "--task text2text-generation" in built.hint  # an encoder-decoder is reproduced with its own task

    mismatch = types.SimpleNamespace(status="mismatch", results={}, check=None, quantization_record=lambda: {},
                                     problems=lambda: ["generate: first differing token at step 5, row 1"])
    monkeypatch.setattr(bot.run.generation, "export_generation", lambda *args, **kwargs: mismatch)
    off = generation_outcome("GitForCausalLM", "onnx", tmp_path / "git")
    assert (off.status, off.failed_stage) == ("mismatch", "validating")
    assert off.hint.startswith("reproduce: exportbot export GitForCausalLM --task text-generation")


# ── Named dims torch's constraint solver cannot prove (exporters.generation.export.export_component) ──
class _RoutedTokens(torch.nn.Module):
    """Flattens the tokens, routes each to one slot and back, as MoE layers do (Aria, Llama4): the reshape's
    contiguity guard is ``tokens * Min(32, 32 * tokens) == 32 * tokens``, which the solver cannot prove."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, 32)
        routed = tokens[:, None, :].expand(-1, 1, 32).reshape(-1, 32)
        return routed.view(x.shape[0], x.shape[1], 32) * 2


def test_a_named_dim_the_solver_cannot_prove_is_exported_as_auto_and_stays_dynamic():
    from torch.export import Dim

    from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
    from exporters.generation.components import ComponentPlan
    from exporters.generation.export import export_component

    spec = {"x": {0: Dim("batch", min=1, max=8), 1: Dim("sequence", min=1, max=64)}}
    plan = ComponentPlan("prefill", _RoutedTokens(), {"x": torch.randn(2, 8, 32)}, spec)
    result = export_component(DynamoExporter(DynamoConfig()), plan)
    other = torch.randn(3, 5, 32)
    assert torch.equal(result.artifact.module()(x=other), other * 2)  # neither dim was specialised
    assert any("sequence exported as Dim.AUTO" in note for note in result.metadata.notes)


def test_prefill_zeroes_padded_slots_and_keeps_slots_the_model_prepends():
    from exporters.generation.components import zero_padded_slots

    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    same = zero_padded_slots(torch.ones(2, 1, 3, 2), mask)
    assert same[:, 0, :, 0].tolist() == [[1, 1, 1], [0, 1, 1]]
    # CpmAnt's cache is its 2 (tiny: 32) learned prompt slots longer than the mask: a size error before
    longer = zero_padded_slots(torch.ones(2, 1, 5, 2), mask)
    assert longer[:, 0, :, 0].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 1, 1]]


# ── onnxscript's no-op rules and an epsilon of 1e-8 (exporters.onnx.exporter._patch_exact_zero_in_no_op_rules) ──
class _TinyEpsilonNorm(torch.nn.Module):
    """Helium's and Moshi's RMSNorm: ``x * rsqrt(mean(x^2) + 1e-8)``, here on a row that is all zeros."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8)


def test_onnx_keeps_an_epsilon_of_1e_8_that_the_no_op_rules_would_delete():
    from exporters.onnx.exporter import OnnxConfig, OnnxExporter

    x = torch.randn(2, 3, 4)
    x[1, 0] = 0  # a padding_idx embedding: eager gives 0 there, without the epsilon it is 0 * inf = NaN
    fixed = OnnxExporter(OnnxConfig()).export(_TinyEpsilonNorm(), {"x": x}, validate=True)
    assert fixed.validation.status == "pass"
    assert fixed.metadata.workarounds_fired.get("_patch_exact_zero_in_no_op_rules", 0) >= 1
    plain = OnnxExporter(OnnxConfig(without=frozenset({"_patch_exact_zero_in_no_op_rules"})))
    report = plain.export(_TinyEpsilonNorm(), {"x": x}).validate(raise_on_failure=False)
    assert report.status == "mismatch"  # the Add of 1e-8 was removed as "x + 0"


def test_a_failure_that_was_recovered_from_does_not_name_the_stage_of_the_next_one():
    from exporters.stages import StageTracker

    tracker = StageTracker(lambda _name: None)
    try:
        with tracker.stage("prefill"), tracker.stage("torch.export"):
            raise ValueError("Constraints violated (sequence)!")  # handled: retried with Dim.AUTO
    except ValueError:
        pass
    try:
        with tracker.stage("prefill"), tracker.stage("torch.export"), tracker.stage("torch.onnx.export"):
            raise RuntimeError("the optimizer failed")
    except RuntimeError:
        pass
    assert tracker.failed == "torch.onnx.export"


def test_the_reproducing_command_uses_the_task_whose_mapping_lists_the_class():
    from bot.run.generation import reproduce_command

    assert "--task text-generation" in reproduce_command("ProphetNetForCausalLM", "onnx")  # config: encoder-decoder
    assert "--task text2text-generation" in reproduce_command("T5ForConditionalGeneration", "onnx")
    assert "--task automatic-speech-recognition" in reproduce_command("WhisperForConditionalGeneration", "onnx")
