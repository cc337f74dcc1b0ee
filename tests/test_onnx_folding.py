"""The onnxscript constant-folder patches (exporters/onnx/folding.py), each on a tiny module that needs it."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from exporters.onnx.exporter import OnnxConfig, OnnxExporter


class _NgramStreams(torch.nn.Module):
    """ProphetNet's n-gram self-attention in small: a (batch, 3 * seq, hidden) tensor chunked back into 3
    streams of a dynamic length, which torchlib lowers to SplitToSequence with a computed scalar split."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        main, first, second = torch.cat([x, x + 1, x * 2], dim=1).chunk(3, dim=1)
        return main + first * second


_DYNAMIC_LENGTH = {"x": {1: Dim.AUTO}}


def test_chunk_of_a_dynamic_length_exports_unfolded_and_matches_eager():
    model = _NgramStreams().eval()
    result = OnnxExporter(OnnxConfig(dynamic_shapes=_DYNAMIC_LENGTH)).export(model, {"x": torch.randn(2, 5, 4)})
    assert result.metadata.workarounds_fired["_patch_split_to_sequence_fold_needs_a_split_value"] >= 1
    assert "SplitToSequence" in {node.op_type for node in result.artifact.graph}  # left for ONNX Runtime
    for length in (5, 2, 9):  # the length stays dynamic: each chunk is `length` long
        x = torch.randn(2, length, 4)
        (actual,) = result.run_artifact({"x": x})
        torch.testing.assert_close(torch.as_tensor(actual), model(x))


def test_chunk_of_a_dynamic_length_fails_in_the_folder_without_the_patch():
    plain = OnnxConfig(dynamic_shapes=_DYNAMIC_LENGTH, without=frozenset({"_patch_split_to_sequence_fold_needs_a_split_value"}))
    with pytest.raises(Exception) as failure:
        OnnxExporter(plain).export(_NgramStreams().eval(), {"x": torch.randn(2, 5, 4)})
    chain = []
    error: BaseException | None = failure.value
    while error is not None:
        chain.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    assert any("'NoneType' object has no attribute 'ndim'" in link for link in chain), chain
