"""XNNPACK partition outputs (exporters/executorch_xnnpack_outputs.py): a value returned twice once XNNPACK's
passes drop a clone, written to a .pte, loaded back and run; without the patch the lowering refuses it."""

from __future__ import annotations

import pytest
import torch
from pte_runtime import run_pte

from exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter


class ReturnsAClone(torch.nn.Module):
    """``y`` and ``y.clone()``: one value once XNNPACKRemoveCloneOpsTransform has run (PeAudio's embedder)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.cat([x, x * 2], dim=1).permute(0, 2, 1)
        return y, y.clone()


class ReturnsContiguous(torch.nn.Module):
    """``y`` and ``y.contiguous()`` of a permuted ``y``: the contiguous copy is a clone too."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.cat([x, x * 2], dim=1).permute(0, 2, 1)
        return y.contiguous(), y


def _sample() -> torch.Tensor:
    return torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("model_class", [ReturnsAClone, ReturnsContiguous])
def test_an_output_returned_twice_gets_a_copy_of_its_own(model_class, tmp_path):
    model, x = model_class().eval(), _sample()
    result = ExecutorchExporter(ExecutorchConfig()).export(model, {"x": x})
    assert result.metadata.workarounds_fired["_patch_xnnpack_output_passed_through"] == 1
    ran = run_pte(result.save(tmp_path / "bundle")["artifact"], [x])
    for got, expected in zip(ran, model(x), strict=True):
        assert torch.equal(got, expected)
    assert ran[0].data_ptr() != ran[1].data_ptr()


@pytest.mark.parametrize("model_class", [ReturnsAClone, ReturnsContiguous])
def test_without_the_patch_xnnpack_refuses_the_repeated_output(model_class):
    without = ExecutorchConfig(without=frozenset({"_patch_xnnpack_output_passed_through"}))
    with pytest.raises(RuntimeError, match=r"is already in the inputs\. This is likely due to pass through arguments"):
        ExecutorchExporter(without).export(model_class().eval(), {"x": _sample()})


def test_distinct_outputs_are_left_alone():
    class Two(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x + 1

    result = ExecutorchExporter(ExecutorchConfig()).export(Two().eval(), {"x": _sample()}, validate=True)
    assert "_patch_xnnpack_output_passed_through" not in result.metadata.workarounds_fired
