"""Quantized exports: the schemes, fidelity against the same quantization in PyTorch, quality against float.

Every export here is validated from the files written to disk, loaded back in a fresh runtime object (ONNX
Runtime, the ExecuTorch runtime), as ``ExportResult.save`` always does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from exporters.quantize import QuantizeConfig, QuantizeError
from exporters.quantize.fidelity import FLIP_MARGIN, fidelity_tolerance, nudged_run, output_step
from exporters.quantize.quality import (
    INCONCLUSIVE,
    MISMATCH,
    PASS,
    compare_output,
    compare_tokens,
    token_meaning,
)

THRESHOLDS = {"min_cosine": 0.98, "min_top1": 0.9, "min_equal_tokens": 4}


# ── Schemes ──
@pytest.mark.parametrize(("backend", "scheme"), [("executorch", "int4"), ("onnx", "8da4w"), ("dynamo", "int8")])
def test_a_scheme_the_backend_has_not_is_refused_naming_the_ones_it_has(backend, scheme):
    with pytest.raises(QuantizeError, match=f"no such scheme for --backend {backend}"):
        QuantizeConfig(scheme).check(backend)


def test_group_sizes_the_kernels_do_not_take_and_loose_thresholds_are_refused():
    with pytest.raises(QuantizeError, match="--group-size"):
        QuantizeConfig("8da4w", group_size=48).check("executorch")
    with pytest.raises(QuantizeError, match="--min-cosine"):
        QuantizeConfig("8da4w", min_cosine=1.5).check("executorch")


def test_thresholds_are_the_schemes_unless_the_user_gives_one():
    assert QuantizeConfig("int4").thresholds("onnx") == {"min_cosine": 0.98, "min_top1": 0.85, "min_equal_tokens": 4}
    assert QuantizeConfig("int4", min_top1=0.99).thresholds("onnx")["min_top1"] == 0.99


# ── Fidelity tolerance ──
def test_one_output_step_is_the_range_over_255():
    assert output_step(torch.tensor([-1.0, 0.5, 1.55])) == pytest.approx(2.55 / 255)
    assert output_step(torch.tensor([float("-inf"), 0.0, 2.55])) == pytest.approx(0.01)
    assert output_step(torch.tensor([3, 4])) == 0.0  # integers: no grid



class _RequantizedStack(torch.nn.Module):
    """Sixteen residual layers, each ``nn.Linear`` quantizing its input at run time as ONNX int8's reference does
    (``DynamicQuantizeLinear``): deep enough for rounding flips to compound past one output step."""

    def __init__(self, depth: int = 16, width: int = 64, shift_one_step: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.norm = torch.nn.LayerNorm(width)
        for layer in self.layers:
            layer.register_forward_pre_hook(self._shifted if shift_one_step else self._quantized)

    @staticmethod
    def _quantized(_module, args):
        from exporters.onnx.quantize import dynamic_quantize_linear

        return (dynamic_quantize_linear(args[0]),)

    @staticmethod
    def _shifted(module, args):  # a zero point off by one: every activation one step off
        from exporters.onnx.quantize import dynamic_quantize_linear

        x = args[0]
        return (dynamic_quantize_linear(x) + (torch.clamp(x.max(), min=0) - torch.clamp(x.min(), max=0)) / 255,)

    def forward(self, x):
        for layer in self.layers:
            x = self.norm(x + torch.nn.functional.gelu(layer(x)))
        return x


def _allowed(tolerance, expected, inputs):
    atol, rtol = tolerance("output", expected, inputs)
    return atol + rtol * expected.abs()


def test_rounding_flips_past_one_step_pass_within_the_flip_envelope_and_a_zero_point_bug_does_not():
    reference = _RequantizedStack().eval()
    inputs = {"x": torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(1))}
    layers = [f"layers.{i}" for i in range(16)]
    with torch.no_grad():
        expected = reference(**inputs)
        broken = _RequantizedStack(shift_one_step=True).eval()(**inputs)
    step = output_step(expected)
    # Another accumulation order (stood in for by other one-ulp nudges) flips codes that compound past one step,
    rounded_otherwise = nudged_run(reference, layers, inputs, seed=7)
    assert (rounded_otherwise - expected).abs().max() > step + 1e-4 + 1e-3 * expected.abs().max()
    seen = {}
    tolerance = fidelity_tolerance(1e-4, 1e-3, reference, layers, lambda name, s, e: seen.update({name: e / s}))
    allowed = _allowed(tolerance, expected, inputs)
    assert ((rounded_otherwise - expected).abs() <= allowed).all()  # within the envelope the reference measured
    assert 1.0 < seen["output"] < 3.0
    assert ((broken - expected).abs() > allowed).any()  # a real bug stays caught
    assert float((broken - expected).abs().max()) > FLIP_MARGIN * seen["output"] * step


def test_without_layers_quantized_at_run_time_the_tolerance_is_one_step():
    reference = _RequantizedStack().eval()
    inputs = {"x": torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(1))}
    with torch.no_grad():
        expected = reference(**inputs)
    atol, rtol = fidelity_tolerance(1e-4, 1e-3, reference, [])("output", expected, inputs)
    assert (atol, rtol) == (pytest.approx(1e-4 + output_step(expected)), 1e-3)

# ── Quality: what can and cannot be told ──
def _logits(sharpness: float, rows: int = 12, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, rows, vocab, generator=generator) * sharpness


def test_near_uniform_logits_are_inconclusive_even_when_every_number_is_poor():
    flat = _logits(0.01)
    noisy = flat + _logits(0.05, seed=1)
    quality = compare_output("logits", flat, noisy, None, THRESHOLDS)
    assert quality.status == INCONCLUSIVE, quality.detail
    assert quality.top1_agreement < 0.5 and "predicts nothing" in quality.detail


def test_confident_logits_that_quantization_reordered_are_below_threshold():
    sharp = _logits(8.0)
    reordered = sharp.roll(1, dims=-1)  # every arg-max moved: a broken quantization
    quality = compare_output("logits", sharp, reordered, None, THRESHOLDS)
    assert quality.status == MISMATCH
    assert quality.top1_agreement < 0.2 and "< 90%" in quality.detail


def test_confident_logits_close_to_float_pass():
    sharp = _logits(8.0)
    quality = compare_output("logits", sharp, sharp + 0.01 * _logits(1.0, seed=2), None, THRESHOLDS)
    assert quality.status == PASS and quality.top1_agreement == 1.0 and quality.cosine > 0.999


def test_cosine_says_nothing_when_float_rows_are_already_that_alike():
    shared = torch.randn(64)
    hidden = shared + 0.01 * torch.randn(1, 6, 64)  # every position the same direction
    constant = shared.expand(1, 6, 64)  # a model that lost every input-dependent signal
    quality = compare_output("last_hidden_state", hidden, constant, None, THRESHOLDS)
    assert quality.status == INCONCLUSIVE and "already cosine" in quality.detail


def test_padded_positions_are_left_out():
    sharp = _logits(8.0, rows=4)
    garbage_in_padding = sharp.clone()
    garbage_in_padding[0, :2] = garbage_in_padding[0, :2].roll(3, dims=-1)
    mask = torch.tensor([[0, 0, 1, 1]])
    assert compare_output("logits", sharp, garbage_in_padding, mask, THRESHOLDS).top1_agreement == 1.0
    assert compare_output("logits", sharp, garbage_in_padding, None, THRESHOLDS).top1_agreement == 0.5


def test_tokens_name_the_first_divergence_and_a_repeated_float_path_is_inconclusive():
    float_tokens = torch.tensor([[5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6]])
    quantized = float_tokens.clone()
    quantized[1, 3:] = 0
    verdict = compare_tokens(float_tokens, quantized, min_equal=4)
    assert (verdict.status, verdict.equal_steps, verdict.first_divergence) == (MISMATCH, 3, {"step": 3, "row": 1})
    assert compare_tokens(float_tokens, quantized, min_equal=3).status == PASS
    repeated = token_meaning(float_tokens, [_logits(8.0)[0]], repeats_one_token=True)
    uniform = token_meaning(float_tokens, [_logits(0.01)[0]], repeats_one_token=False)
    assert token_meaning(float_tokens, [_logits(8.0)[0]], repeats_one_token=False) == ""
    for reason in (repeated, uniform):
        assert compare_tokens(float_tokens, quantized, min_equal=4, says_nothing=reason).status == INCONCLUSIVE


# ── The ONNX reference: ONNX Runtime's own operator semantics ──
def test_dynamic_quantize_linear_is_onnx_runtimes():
    import onnx
    import onnxruntime as ort

    from exporters.onnx.quantize import dynamic_quantize_linear

    node = onnx.helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    graph = onnx.helper.make_graph(
        [node], "q", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, None])],
        [onnx.helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in
         (("y", onnx.TensorProto.UINT8, [None, None]), ("scale", onnx.TensorProto.FLOAT, []),
          ("zero_point", onnx.TensorProto.UINT8, []))])
    session = ort.InferenceSession(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
                                   .SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(5):
        x = torch.randn(7, 33, generator=torch.Generator().manual_seed(seed)) * (seed + 1) + seed - 2
        y, scale, zero_point = session.run(None, {"x": x.numpy()})
        onnx_runtime = (y.astype(np.float32) - zero_point.astype(np.float32)) * scale
        assert np.array_equal(dynamic_quantize_linear(x).numpy(), onnx_runtime)


# ── Exports, validated from the written files ──
def _export(backend: str, name: str, config: QuantizeConfig, dynamic: bool = False, **settings):
    from exporters.tiny import build_tiny

    tiny = build_tiny(name)
    if backend == "onnx":
        from exporters.onnx.exporter import OnnxConfig, OnnxExporter

        exporter = OnnxExporter(OnnxConfig(dynamic=dynamic, quantize=config, **settings))
    else:
        from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

        exporter = ExecutorchExporter(ExecutorchConfig(dynamic=dynamic, quantize=config, **settings))
    return exporter.export(tiny.model, tiny.inputs)


def _saved(result, directory):
    result.save(directory)
    return json.loads((directory / "export.json").read_text())


@pytest.mark.parametrize(("scheme", "operator"), [("int8", "MatMulInteger"), ("int4", "MatMulNBits")])
def test_onnx_schemes_ship_quantized_graphs_that_match_the_same_scales_in_pytorch(tmp_path, scheme, operator):
    import onnx

    import exporters

    result = _export("onnx", "LlamaForCausalLM", QuantizeConfig(scheme), dynamic=True)
    manifest = _saved(result, tmp_path / "bundle")
    graph = onnx.load(str(tmp_path / "bundle" / "model.onnx")).graph
    assert sum(node.op_type == operator for node in graph.node) == manifest["quantization"]["quantized"] == 15
    assert not [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in {i.name for i in graph.initializer}]
    record = manifest["quantization"]
    assert record["scheme"] == scheme and record["config"]["block_size"] == 32 and record["kept_float"] == {}
    fidelity = record["fidelity"]["logits"]
    assert fidelity["steps"] < 0.01, fidelity  # the same scales: float rounding apart, far inside one step
    shapes = manifest["components"]["model"]["validation"]["shapes"]
    assert [s["label"] for s in shapes] == ["sample shape", "second shape"]
    assert all(o["atol"] > 1e-4 for s in shapes for o in s["outputs"])  # one output step on top of float's
    quality = manifest["components"]["model"]["validation"]["quality"]
    assert quality["status"] == "inconclusive"  # a tiny random Llama predicts nothing
    loaded = exporters.load(tmp_path / "bundle")  # a fresh process's view: the manifest and the file
    assert loaded.metadata.quantization["scheme"] == scheme


def test_a_reference_that_is_not_the_shipped_quantization_fails_fidelity(monkeypatch):
    """Fidelity can fail: the int4 reference unpacked with the nibbles swapped is not what ONNX Runtime runs."""
    from exporters.onnx import quantize as onnx_quantize
    from exporters.validation import ValidationError

    unpack = onnx_quantize._unpack_nbits

    def swapped_nibbles(packed, scales, attributes):
        return unpack(((packed.to(torch.int16) & 0x0F) << 4 | (packed.to(torch.int16) >> 4)).to(torch.uint8),
                      scales, attributes)

    monkeypatch.setattr(onnx_quantize, "_unpack_nbits", swapped_nibbles)
    result = _export("onnx", "LlamaForCausalLM", QuantizeConfig("int4"))
    with pytest.raises(ValidationError, match="mismatch"):
        result.validate()
    worst = max(o.max_abs_diff / (o.atol - result.atol) for s in result.validation.shapes for o in s.outputs)
    assert worst > 2, worst  # many steps off, not a rounding boundary


def test_quality_below_a_threshold_the_user_tightened_fails_the_export(tmp_path):
    from exporters.validation import ValidationError

    result = _export("onnx", "BertModel", QuantizeConfig("int4", min_cosine=0.99999))
    with pytest.raises(ValidationError, match="quality: last_hidden_state: cosine"):
        result.save(tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()
    assert result.validation.quality.status == MISMATCH
    assert all(s.status == PASS for s in result.validation.shapes)  # fidelity itself passed


def test_executorch_8da4w_matches_torchao_only_with_its_scales_in_bf16(tmp_path):
    """Without the bf16-scale workaround the .pte runs other weights than the eager quantized model."""
    from exporters.validation import ValidationError

    fixed = _export("executorch", "LlamaForCausalLM", QuantizeConfig("8da4w"))
    manifest = _saved(fixed, tmp_path / "bundle")
    assert fixed.metadata.workarounds_fired["_patch_group_scales_as_xnnpack_stores_them"] == 15
    assert manifest["quantization"]["fidelity"]["logits"]["steps"] < 0.01
    assert manifest["quantization"]["per_channel_fallback"] == []
    unfixed = _export("executorch", "LlamaForCausalLM", QuantizeConfig("8da4w"),
                      without=frozenset({"_patch_group_scales_as_xnnpack_stores_them"}))
    with pytest.raises(ValidationError, match="logits: mismatch"):
        unfixed.validate()
    steps = unfixed.validation.shapes[0].outputs[0].max_abs_diff / output_step(unfixed.quantization.reference(
        **unfixed.inputs).logits)
    assert steps > 1, steps


def test_executorch_8da4w_falls_back_to_per_channel_where_the_group_does_not_divide(tmp_path):
    result = _export("executorch", "LlamaForCausalLM", QuantizeConfig("8da4w", group_size=256))
    manifest = _saved(result, tmp_path / "bundle")
    assert len(manifest["quantization"]["per_channel_fallback"]) == manifest["quantization"]["quantized"] == 15
    assert manifest["validation"]["status"] == "pass"


def test_executorch_8da4w_gives_int8_weights_to_a_layer_no_int4_layout_of_xnnpack_takes(tmp_path):
    """ALBERT's embedding projection is 16 wide: no group of a multiple of 32 fits, a per-channel int4 row
    included, and XNNPACK refused the whole program ('requires group_size to be a multiple of 32')."""
    result = _export("executorch", "AlbertModel", QuantizeConfig("8da4w"))
    manifest = _saved(result, tmp_path / "bundle")
    assert manifest["quantization"]["int8_fallback"] == ["encoder.embedding_hidden_mapping_in"]
    assert manifest["quantization"]["per_channel_fallback"] == []
    assert manifest["validation"]["status"] == "pass"


def test_executorch_8da4w_keeps_a_linear_with_a_forward_of_its_own_float(tmp_path):
    """FalconLinear computes input @ weight.T itself; torchao's quantized weight has no permute, and the export
    failed (NotImplementedError: IntxUnpackedToInt8Tensor ... aten.permute). Its layers stay float, recorded."""
    result = _export("executorch", "FalconForCausalLM", QuantizeConfig("8da4w"))
    manifest = _saved(result, tmp_path / "bundle")
    kept = manifest["quantization"]["kept_float"]
    assert kept and all("FalconLinear computes in a forward of its own" in why for why in kept.values())
    assert manifest["quantization"]["quantized"] >= 1 and manifest["validation"]["status"] == "pass"


def test_executorch_int8_calibrates_xnnpacks_quantizer_and_matches_the_converted_program(tmp_path):
    """PT2E static int8: the .pte against PyTorch running the converted program's quantize/dequantize ops.
    Without the scalar-dtype workaround XNNPACK's quantizer makes Llama's integer mask arithmetic float."""
    fixed = _export("executorch", "LlamaForCausalLM", QuantizeConfig("int8", calibration=2))
    manifest = _saved(fixed, tmp_path / "bundle")
    assert fixed.metadata.workarounds_fired["_patch_scalar_constants_keep_their_dtype"] >= 1
    record = manifest["quantization"]
    assert record["calibration_batches"] == 3 and record["quantized"] == 15  # the sample + 2 random batches
    assert record["fidelity"]["logits"]["steps"] < 0.01
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        _export("executorch", "LlamaForCausalLM", QuantizeConfig("int8", calibration=0),
                without=frozenset({"_patch_scalar_constants_keep_their_dtype"}))


# ── Quality on a model with structure ──
def _checkpoint_export(checkpoint, config: QuantizeConfig):
    from exporters.export_options import ExportOptions, build_model
    from exporters.onnx.exporter import OnnxConfig, OnnxExporter

    built = build_model(str(checkpoint), ExportOptions(), 0, torch.float32)
    return OnnxExporter(OnnxConfig(dynamic=True, quantize=config)).export(built.model, built.inputs)


def test_the_trained_llama_predicts_where_a_random_one_does_not(trained_llama):
    from exporters.export_options import ExportOptions, build_model
    from exporters.quantize.quality import predicts_nothing, rows_of
    from exporters.tiny import build_tiny

    trained = build_model(str(trained_llama), ExportOptions(), 0, torch.float32)
    random = build_tiny("LlamaForCausalLM")
    with torch.no_grad():
        assert predicts_nothing(rows_of(trained.model(**trained.inputs).logits, trained.inputs["attention_mask"])) == ""
        assert "near-uniform" in predicts_nothing(rows_of(random.model(**random.inputs).logits, None))


def test_quality_on_the_trained_llama_is_conclusive_both_ways(tmp_path, trained_llama):
    passing = _checkpoint_export(trained_llama, QuantizeConfig("int4"))
    manifest = _saved(passing, tmp_path / "bundle")
    quality = manifest["components"]["model"]["validation"]["quality"]
    logits = quality["outputs"][0]
    assert quality["status"] == "pass" and logits["name"] == "logits", quality
    assert logits["positions"] >= 100 and 0.85 <= logits["top1_agreement"] < 1.0 and logits["cosine"] >= 0.98
    assert manifest["quantization"]["quality"]["top1_agreement"] == logits["top1_agreement"]
    strict = _checkpoint_export(trained_llama, QuantizeConfig("int4", min_top1=0.999))
    report = strict.validate(raise_on_failure=False)
    assert report.status == MISMATCH and "top-1 agreement" in report.problems()[0]


# ── The command line ──
def _cli(*args: str):
    from click.testing import CliRunner

    from bot.cli.main import main

    return CliRunner().invoke(main, list(args), terminal_width=80)


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "onnx", "--quantize", "8da4w"], "--quantize 8da4w: no such scheme for --backend onnx; choose from int8, int4"),
    (["--backend", "dynamo", "--quantize", "int8"], "quantized exports need --backend executorch or onnx"),
    (["--backend", "onnx", "--group-size", "64"], "--group-size is a quantization setting: add --quantize SCHEME"),
    (["--backend", "onnx", "--quantize", "int4", "--dtype", "float16"], "quantizes a float32 model; --dtype is float16"),
    (["--backend", "executorch", "--quantize", "int8", "--task", "text-generation"],
     "generation bundles take a dynamic scheme"),
    (["--backend", "executorch", "--quantize", "8da4w", "--quantize-embeddings"], "only the ONNX schemes quantize"),
    (["--backend", "executorch", "--quantize", "8da4w", "--group-size", "16"],
     "XNNPACK's int4 kernels take groups of a multiple of 32 input channels"),
])
def test_quantize_options_that_cannot_work_exit_2_in_one_line_before_any_work(tmp_path, args, message):
    result = _cli("export", "LlamaForCausalLM", *args, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_export_quantize_records_and_shows_both_verdicts(tmp_path):
    result = _cli("export", "BertModel", "--backend", "onnx", "--quantize", "int8", "--out", str(tmp_path / "bert"))
    assert result.exit_code == 0, result.output
    assert "fidelity: against the same quantization in PyTorch" in result.stdout
    assert "quality inconclusive: last_hidden_state: cosine" in result.stdout  # the tiny model is random
    manifest = json.loads((tmp_path / "bert" / "export.json").read_text())
    assert manifest["options"]["quantize"]["scheme"] == "int8" and manifest["config"]["quantize"]["scheme"] == "int8"
    quality = manifest["components"]["model"]["validation"]["quality"]
    assert quality["status"] == "inconclusive" and quality["outputs"][0]["detail"].startswith("random weights")
    assert quality["outputs"][0]["cosine"] > 0.99  # the numbers are still measured and recorded


# ── Generation bundles ──
def _generation(model, backend: str, config: QuantizeConfig, inputs):
    from bot.run.generation import make_generation_exporter
    from exporters.generation.components import GenerationExportConfig
    from exporters.generation.export import export_for_generation

    return export_for_generation(make_generation_exporter(backend, quantize=config), model, inputs,
                                 GenerationExportConfig(max_cache_len=64))


def test_a_quantized_generation_bundle_generates_float_greedy_tokens_in_a_fresh_process(tmp_path, trained_llama):
    """Both components quantized alike; generate() token for token against the components' PyTorch references,
    greedy tokens against float on prompts from the training corpus; then loaded and run in another process."""
    import subprocess
    import sys

    from bot.run.generation import build_generation_model
    from exporters.tiny.trained import TrainingRecipe, corpus_prompts

    model, _ = build_generation_model(str(trained_llama), 0)
    prompts = corpus_prompts(2, 8, TrainingRecipe().vocab, seed=3)
    export = _generation(model, "onnx", QuantizeConfig("int4"), prompts)
    export.save(tmp_path / "bundle")
    assert export.status == PASS and export.check.status == PASS
    assert (export.tokens.status, export.tokens.equal_steps) == (PASS, 16), export.tokens.detail
    record = json.loads((tmp_path / "bundle" / "export.json").read_text())["quantization"]
    assert set(record["components"]) == {"prefill", "decode"} and record["tokens"]["equal_steps"] == 16
    script = ("import json, sys, torch, exporters; bundle = exporters.load(sys.argv[1]); "
              "prompts = {k: torch.tensor(v) for k, v in json.loads(sys.argv[2]).items()}; "
              "print(json.dumps(bundle.generate(**prompts, max_new_tokens=16, min_new_tokens=16).tokens.tolist()))")
    completed = subprocess.run([sys.executable, "-c", script, str(tmp_path / "bundle"),
                                json.dumps({k: v.tolist() for k, v in prompts.items()})],
                               capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == export.tokens.quantized_tokens


def test_generate_judges_a_quantized_bundle_against_float_by_its_floor_not_token_for_token(tmp_path, trained_llama):
    """`exportbot generate` on a quantized bundle: float eager's tokens are its quality (steps equal before the
    first divergence, the same count its export recorded on the same prompts), not a token-for-token verdict,
    which int4 on random prompts (a near-tie moved) would fail."""
    from bot.run.generation import export_generation

    export = export_generation(str(trained_llama), "onnx", tmp_path / "bundle", quantize=QuantizeConfig("int4"))
    assert export.status == PASS and 4 <= export.tokens.equal_steps < 16, export.tokens.detail  # diverges, above 4
    result = _cli("generate", str(tmp_path / "bundle"), "--json")
    assert result.exit_code == 0, result.output
    tokens = json.loads(result.output)["float_comparison"]
    assert (tokens["status"], tokens["equal_steps"]) == (PASS, export.tokens.equal_steps)
    assert tokens["first_divergence"] == export.tokens.first_divergence
    strict = json.loads((tmp_path / "bundle" / "export.json").read_text())
    strict["quantization"]["config"]["min_equal_tokens"] = 16  # the floor it was exported with, tightened
    (tmp_path / "bundle" / "export.json").write_text(json.dumps(strict))
    assert _cli("generate", str(tmp_path / "bundle")).exit_code == 1


def test_greedy_tokens_below_the_threshold_fail_a_quantized_generation_bundle(trained_llama):
    from bot.run.generation import build_generation_model
    from exporters.generation.components import sample_prompts

    model, _ = build_generation_model(str(trained_llama), 0)
    export = _generation(model, "onnx", QuantizeConfig("int4", min_equal_tokens=12), sample_prompts(model))
    assert export.validate(raise_on_failure=False) == MISMATCH
    assert export.check.status == PASS  # fidelity held: the bundle is what PyTorch computes with these scales
    assert export.tokens.equal_steps < 12 and "quality: tokens:" in export.problems()[0]


# ── The ledger's quantize scope ──
def _entry(tmp_path, scope: str, repro: str = ""):
    (tmp_path / "export_skips.toml").write_text(f"""
[[entry]]
id = "llama-int4"
models = ["LlamaForCausalLM"]
backend = "onnx"
scope = "{scope}"
dependency = "onnxruntime"
reason = "a test entry"
model_change = "none"
failure = "x"
added = 2026-12-05
{repro}""")
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    return tmp_path


def test_a_quantize_entry_gates_its_scheme_only(tmp_path):
    from exporters.ledger import load_ledger

    ledger = load_ledger(_entry(tmp_path, "quantize", '[entry.repro.export]\nquantize = "int4"\n'))
    assert ledger.skip("LlamaForCausalLM", "onnx", dynamic=False, quantize="int4").id == "llama-int4"
    assert ledger.skip("LlamaForCausalLM", "onnx", dynamic=True, generate=True, quantize="int4") is not None
    assert ledger.skip("LlamaForCausalLM", "onnx", dynamic=False, quantize="int8") is None
    assert ledger.skip("LlamaForCausalLM", "onnx", dynamic=False) is None


def test_a_quantize_entry_must_name_a_scheme_of_its_backend(tmp_path):
    from exporters.ledger import LedgerError, load_ledger

    with pytest.raises(LedgerError, match="names its scheme in"):
        load_ledger(_entry(tmp_path, "quantize"))
    with pytest.raises(LedgerError, match="'8da4w' is no onnx scheme"):
        load_ledger(_entry(tmp_path, "quantize", '[entry.repro.export]\nquantize = "8da4w"\n'))


class _LinearBesideAWeight(torch.nn.Module):
    """A Linear, then a MatMul by a bare parameter that no layer owns: the MatMul has a constant weight, but
    PyTorch has no quantized reference of it, so it must stay float on both sides."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)
        self.mixing = torch.nn.Parameter(torch.randn(64, 32))

    def forward(self, x):
        return self.linear(x) @ self.mixing


@pytest.mark.parametrize("scheme", ["int4", "int8"])
def test_onnx_quantizes_only_the_layers_pytorch_can_reference(scheme):
    """MatMulNBits' ``nodes_to_include`` only adds nodes: restricted that way, the bare-parameter MatMul was
    quantized too and fidelity caught it (Falcon, Inkling, DeepseekV4 in the text-generation sweep); and
    quantize_dynamic restricted to MatMul quantized BERT's pooler Gemm (the CLI test below)."""
    from exporters.onnx.exporter import OnnxConfig, OnnxExporter

    torch.manual_seed(0)
    model = _LinearBesideAWeight().eval()
    result = OnnxExporter(OnnxConfig(quantize=QuantizeConfig(scheme))).export(model, {"x": torch.randn(2, 8, 64)})
    record = result.quantization
    assert record.quantized == ["linear"] and list(record.kept_float) == ["node_matmul"], record.kept_float
    assert result.validate(raise_on_failure=False).status == PASS, result.validation.problems()


@pytest.mark.parametrize(("scheme", "table_op"), [("int8", "DequantizeLinear"), ("int4", "GatherBlockQuantized")])
def test_onnx_quantizes_the_embedding_table_on_request(scheme, table_op):
    import onnx_ir as ir

    result = _export("onnx", "LlamaForCausalLM", QuantizeConfig(scheme, embeddings=True))
    assert "model.embed_tokens" in result.quantization.quantized
    assert table_op in {node.op_type for node in ir.serde.serialize_model(result.artifact).graph.node}
    assert result.validate(raise_on_failure=False).status == PASS  # its reference dequantizes the same table
