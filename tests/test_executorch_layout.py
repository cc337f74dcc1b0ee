"""XNNPACK layout patches (exporters/executorch/layout.py): each .pte written, loaded back and run, with and
without the patch."""

from __future__ import annotations

import pytest
import torch
from pte_runtime import run_pte

from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
from exporters.validation import ValidationError


class SinkSoftmax(torch.nn.Module):
    """The attention-sink softmax (GPT-OSS, MiMo-V2-Flash, HunYuan V4): the row max taken off the logits in
    the one ``max.dim`` form XNNPACK serialises (a max pooling, computed in NHWC), then the softmax."""

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.max(dim=3, keepdim=True).values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(x), dim=-1)


class ConvSoftmax(torch.nn.Module):
    """A softmax straight after a convolution, XNNPACK's other NHWC producer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(x), dim=-1)


def _sample() -> torch.Tensor:
    return torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("model_class", [SinkSoftmax, ConvSoftmax])
def test_a_softmax_after_an_nhwc_op_normalises_over_the_dim_the_graph_names(model_class, tmp_path):
    torch.manual_seed(0)
    model, x = model_class().eval(), _sample()
    result = ExecutorchExporter(ExecutorchConfig()).export(model, {"x": x})
    assert result.metadata.workarounds_fired["_patch_xnnpack_softmax_of_channels_last"] == 1
    (ran,) = run_pte(result.save(tmp_path / "bundle")["artifact"], [x])
    with torch.no_grad():
        assert (ran - model(x)).abs().max() < 1e-6
    assert torch.allclose(ran.sum(-1), torch.ones(2, 4, 8))


@pytest.mark.parametrize("model_class", [SinkSoftmax, ConvSoftmax])
def test_without_the_patch_xnnpack_normalises_over_the_channels(model_class, tmp_path):
    torch.manual_seed(0)
    model, x = model_class().eval(), _sample()
    without = ExecutorchConfig(without=frozenset({"_patch_xnnpack_softmax_of_channels_last"}))
    result = ExecutorchExporter(without).export(model, {"x": x})
    (ran,) = result.run_artifact({"x": x})  # the in-memory program: save() would refuse to write it
    with torch.no_grad():
        assert (ran - model(x)).abs().max() > 0.1
        assert (ran - torch.softmax(model.logits(x), dim=1)).abs().max() < 1e-5  # over the channels instead
    with pytest.raises(ValidationError, match=r"mismatch: \d+ of 512 elements off"):
        result.save(tmp_path / "bundle")
