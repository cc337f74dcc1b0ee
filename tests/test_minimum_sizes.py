"""Batch 1 and one-token sequences: validated on the written bundle, accepted where right, refused with a reason.

torch.export starts every dynamic range at 2 (its 0/1 specialisation); the bundle's ``dims`` record the smallest
size validated instead (exporters.minimum_sizes), and a size the program computes wrongly stays out with the
reason in the manifest and in the loader's refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import exporters
from exporters.dynamo.exporter import DynamoConfig, DynamoExporter


def _outputs_match(model, loaded, inputs, atol=1e-4, rtol=1e-3):
    with torch.no_grad():
        expected = model(**inputs)
    actual = loaded(**inputs)
    for name in ("last_hidden_state", "logits"):
        if hasattr(expected, name):
            assert torch.allclose(getattr(actual, name), getattr(expected, name), atol=atol, rtol=rtol), name
            return
    raise AssertionError("no output compared")


def test_a_dynamic_onnx_bundle_accepts_batch_1_and_one_token_sequences(onnx_export, tmp_path: Path):
    result = onnx_export("BertModel", True)
    result.save(tmp_path / "bert")
    manifest = json.loads((tmp_path / "bert" / "export.json").read_text())
    dims = manifest["components"]["model"]["dims"]
    assert {name: d["min"] for name, d in dims.items()} == {"batch": 1, "sequence": 1, "attention_mask_batch": 1}
    smaller = manifest["components"]["model"]["validation"]["smaller_shapes"]
    assert [(s["label"], s["status"]) for s in smaller] == [("batch 1", "pass"), ("sequence 1", "pass")]
    assert smaller[0]["input_shapes"]["input_ids"] == [1, 8] and smaller[1]["input_shapes"]["input_ids"] == [2, 1]
    loaded = exporters.load(tmp_path / "bert")  # a fresh load: the manifest's ranges are what it checks
    _outputs_match(result.model, loaded, {name: value[:1] for name, value in result.inputs.items()})
    _outputs_match(result.model, loaded, {name: value[:, :1] for name, value in result.inputs.items()})
    _outputs_match(result.model, loaded, {name: value[:1, :1] for name, value in result.inputs.items()})


def test_a_dynamic_executorch_bundle_accepts_batch_1(et_export, tmp_path: Path):
    result = et_export("LlamaForCausalLM", True)
    result.save(tmp_path / "llama")
    dims = exporters.load(tmp_path / "llama").metadata.components["model"].dims
    assert dims["batch"].min == 1 and dims["sequence"].min == 1
    loaded = exporters.load(tmp_path / "llama")
    _outputs_match(result.model, loaded, {name: value[:1] for name, value in result.inputs.items()})


class BranchesOnBatchOfOne(torch.nn.Module):
    """Eager takes another path at batch 1; torch.export, assuming batch >= 2, traces only the other one."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embedding(input_ids)
        if hidden.shape[0] == 1:
            return hidden * 2
        return hidden + 1


def test_a_program_wrong_at_1_keeps_its_minimum_and_says_why(tmp_path: Path):
    model = BranchesOnBatchOfOne()
    inputs = {"input_ids": torch.arange(12).reshape(2, 6) % 16}
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(model, inputs)
    result.save(tmp_path / "branch")  # the sample and second shapes pass: the export itself is right
    assert result.validation.status == "pass"
    assert [(s.label, s.status) for s in result.validation.smaller_shapes] == [("batch 1", "mismatch"),
                                                                                ("sequence 1", "pass")]
    manifest = json.loads((tmp_path / "branch" / "export.json").read_text())
    batch = manifest["components"]["model"]["dims"]["batch"]
    assert batch["min"] == 2 and "0/1 specialisation" in batch["min_reason"] and "wrong at 1" in batch["min_reason"]
    assert manifest["components"]["model"]["dims"]["sequence"] == {"min": 1, "max": None}
    loaded = exporters.load(tmp_path / "branch")
    with pytest.raises(exporters.InputError) as refused:
        loaded(input_ids=inputs["input_ids"][:1])
    message = str(refused.value)
    assert "is 1, outside the validated range 2..inf: torch.export traced the program assuming batch >= 2" in message
    assert "\n" not in message
    assert torch.equal(loaded(input_ids=inputs["input_ids"][:, :1]), model(inputs["input_ids"][:, :1]))
