"""Bundles are complete and relocatable: the checkpoint's tokenizer inside, optional inputs filled as eager
fills them, nothing outside the directory needed to load or generate, published with the umask's permissions."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import exporters
from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
from exporters.tiny.checkpoint import write_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def _exportbot(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=900)


def test_optional_inputs_are_filled_as_eager_fills_them(onnx_export, tmp_path: Path):
    result = onnx_export("BertModel", True)
    result.save(tmp_path / "bert")
    manifest = json.loads((tmp_path / "bert" / "export.json").read_text())
    assert manifest["components"]["model"]["optional"] == {
        "attention_mask": {"fill": 1, "shape_of": "input_ids"}, "token_type_ids": {"fill": 0, "shape_of": "input_ids"}}
    omitted = manifest["components"]["model"]["validation"]["omitted_inputs"]
    assert [(s["label"], s["status"]) for s in omitted] == [("sample shape without attention_mask", "pass"),
                                                            ("sample shape without token_type_ids", "pass")]
    loaded = exporters.load(tmp_path / "bert")
    ids, mask = result.inputs["input_ids"], result.inputs["attention_mask"]
    with torch.no_grad():
        expected = result.model(input_ids=ids, attention_mask=mask).last_hidden_state  # eager's own default
    assert torch.allclose(loaded(input_ids=ids, attention_mask=mask).last_hidden_state, expected, atol=1e-4, rtol=1e-3)
    with pytest.raises(exporters.InputError, match="missing input 'input_ids': model.onnx takes input_ids "
                                                   r"\(optional: attention_mask, token_type_ids\)"):
        loaded(attention_mask=mask)


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_published_bundles_have_the_umasks_permissions(tmp_path: Path, umask: int):
    result = DynamoExporter(DynamoConfig()).export(_Linear(), {"x": torch.randn(2, 4)})
    previous = os.umask(umask)
    try:
        result.save(tmp_path / "linear")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "linear").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tmp_path / "linear" / "export.json").stat().st_mode) == 0o666 & ~umask


def test_a_checkpoints_tokenizer_ships_in_its_bundle(tmp_path: Path):
    import transformers

    checkpoint = write_tiny_checkpoint(tmp_path / "ckpt", "BertModel")
    model = transformers.BertModel.from_pretrained(checkpoint).eval()
    text = ["hello world", "the lazy dog"]
    original = transformers.AutoTokenizer.from_pretrained(checkpoint)
    inputs = dict(original(text, return_tensors="pt", padding=True))
    DynamoExporter(DynamoConfig(dynamic=True)).export(model, inputs).save(tmp_path / "bundle")
    shutil.rmtree(checkpoint)
    bundle = exporters.load(tmp_path / "bundle")
    assert bundle.metadata.files["tokenizer"] == "tokenizer_config.json"
    encoded = bundle.tokenizer(text, return_tensors="pt", padding=True)
    assert torch.equal(encoded["input_ids"], inputs["input_ids"])
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
    assert torch.allclose(bundle(**encoded).last_hidden_state, expected, atol=1e-4, rtol=1e-4)


def test_a_tiny_models_bundle_has_no_tokenizer(onnx_export, tmp_path: Path):
    onnx_export("BertModel", True).save(tmp_path / "bert")
    bundle = exporters.load(tmp_path / "bert")
    assert "tokenizer" not in bundle.metadata.files and bundle.tokenizer is None


def test_a_generation_bundle_copied_elsewhere_generates_from_text_without_its_checkpoint(tmp_path: Path):
    """A checkpoint without weights: the bundle's own config.json and the seed rebuild the eager model, so the
    copy is compared token for token after the checkpoint is gone; the absolute path is provenance only."""
    checkpoint = write_tiny_checkpoint(tmp_path / "ckpt", weights=False)
    exported = _exportbot("export", "ckpt", "--task", "text-generation", "--backend", "onnx", "--out", "bundle",
                          cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-2000:]
    source = json.loads((tmp_path / "bundle" / "export.json").read_text())["generation"]["source"]
    assert source["weights"] is False and source["checkpoint"] == str(checkpoint.resolve())
    elsewhere = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "bundle", elsewhere)
    shutil.rmtree(checkpoint)
    shutil.rmtree(tmp_path / "bundle")
    run = _exportbot("generate", str(elsewhere), "--prompt", "the quick brown fox", "--prompt", "hello",
                     "--max-new-tokens", "6", "--json", cwd=tmp_path / "elsewhere")
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["eager_comparison"]["status"] == "pass", result["eager_comparison"]["detail"]
    assert result["prompt_lengths"][0] > result["prompt_lengths"][1] >= 1
    assert len(result["text"]) == 2 and all(isinstance(text, str) and text for text in result["text"])


def test_generate_from_text_needs_a_tokenizer(tmp_path: Path):
    from bot.run.generation import export_generation

    export_generation("LlamaForCausalLM", "onnx", tmp_path / "tiny", task="text-generation")
    run = _exportbot("generate", str(tmp_path / "tiny"), "--prompt", "hello", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].endswith(
        "holds no tokenizer (a tiny random model's bundle): generate from random token ids with --prompt-length")


@pytest.mark.slow
def test_an_executorch_generation_bundle_of_a_checkpoint_with_weights_generates_from_text_anywhere(tmp_path: Path):
    """End to end: a checkpoint with weights and a tokenizer, exported for generation on ExecuTorch, copied to
    another directory; generating from text there matches eager while the checkpoint exists, and after the
    checkpoint and the original bundle are deleted gives the same tokens and text (the comparison, which
    needs the weights, is skipped with a note)."""
    write_tiny_checkpoint(tmp_path / "ckpt")
    exported = _exportbot("export", "ckpt", "--task", "text-generation", "--backend", "executorch", "--out", "bundle",
                          cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "bundle", elsewhere)
    prompts = ["--prompt", "the quick brown fox", "--prompt", "hello world"]
    before = _exportbot("generate", str(elsewhere), *prompts, "--max-new-tokens", "8", "--json", cwd=tmp_path)
    assert before.returncode == 0, before.stderr[-2000:]
    compared = json.loads(before.stdout)
    assert compared["eager_comparison"]["status"] == "pass", compared["eager_comparison"]["detail"]
    shutil.rmtree(tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "bundle")
    after = _exportbot("generate", str(elsewhere), *prompts, "--max-new-tokens", "8", "--json",
                       cwd=tmp_path / "elsewhere")
    assert after.returncode == 0, after.stderr[-2000:]
    assert "no eager comparison: the weights of" in after.stderr
    relocated = json.loads(after.stdout)
    assert (relocated["tokens"], relocated["text"]) == (compared["tokens"], compared["text"])
    assert all(relocated["text"])
