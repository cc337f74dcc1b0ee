"""XNNPACK fixes (exporters/executorch/xnnpack.py): a partition output returned twice once XNNPACK's passes drop
a clone, and PReLU on inputs that are not 4-D; each .pte written, loaded back and run, and without the fix the
lowering refuses the program."""

from __future__ import annotations

import pytest
import torch
from pte_runtime import run_pte

from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter


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



class Prelus(torch.nn.Module):
    """DAB-DETR's box MLP activation, ``nn.PReLU()`` on [batch, queries, hidden], a per-channel PReLU on the
    same rank, and a 4-D one, which XNNPACK lowers itself."""

    def __init__(self) -> None:
        super().__init__()
        self.shared, self.per_channel, self.image = torch.nn.PReLU(), torch.nn.PReLU(5), torch.nn.PReLU(5)
        with torch.no_grad():
            self.per_channel.weight.copy_(torch.linspace(-0.5, 2.0, 5))

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.shared(x), self.per_channel(x * 2), self.image(image)


def _prelu_inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"x": torch.randn(2, 5, 6, generator=generator), "image": torch.randn(2, 5, 3, 3, generator=generator)}


def test_prelu_that_is_not_4d_is_written_as_a_select(tmp_path):
    model, inputs = Prelus().eval(), _prelu_inputs()
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired["_fix_prelu_not_4d_for_xnnpack"] == 2  # the 4-D one is XNNPACK's
    ran = run_pte(result.save(tmp_path / "bundle")["artifact"], list(inputs.values()))
    with torch.no_grad():
        for got, expected in zip(ran, model(**inputs), strict=True):
            assert (got - expected).abs().max() < 1e-6


def test_without_the_fix_xnnpack_cannot_retag_a_3d_prelu():
    without = ExecutorchConfig(without=frozenset({"_fix_prelu_not_4d_for_xnnpack"}))
    with pytest.raises(Exception, match=r"ChannelsLastTaggedReshapePass") as failure:
        ExecutorchExporter(without).export(Prelus().eval(), _prelu_inputs())
    assert "Attempting to convert non-NHWC compatible node to NHWC" in str(failure.value.__cause__)
