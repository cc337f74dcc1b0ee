"""torch.export patches (exporters/patches_dynamo.py): each export that needs one, with and without it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exporters.exporter_dynamo import DynamoConfig, DynamoExporter


class Codec(torch.nn.Module):
    """XcodecModel's encoder strides in miniature (8, 5, 4, 2; kernels 8, 9, 7, 1), each frame decoded back
    to 320 samples and added to the input: the length must be 320 times the frames the strides give."""

    def forward(self, audio):  # [batch, 1, samples]
        frames = audio
        for kernel, stride in ((8, 8), (9, 5), (7, 4), (1, 2)):
            frames = F.avg_pool1d(frames, kernel, stride)
        return frames.repeat_interleave(320, dim=-1) + audio


def _codec_export(**config):
    return DynamoExporter(DynamoConfig(dynamic=True, **config)).export(
        Codec(), {"audio": torch.randn(2, 1, 1600)}, validate=True)


def test_guards_sympy_cannot_solve_leave_the_length_dynamic_and_guarded():
    """Was: ``NotImplementedError: The inequality, Eq(-x + 320*(((x/40)//8)), 0), cannot be solved using
    solve_univariate_inequality`` (XcodecModel, Sam2HieraDetModel), from the solver that only writes
    suggested fixes. The program keeps the guard: whole hops run, any other length is refused."""
    result = _codec_export()
    assert result.metadata.workarounds_fired.get("_patch_dim_constraint_solver_gives_up", 0) >= 1
    assert set(result.metadata.dynamic_dims["audio"]) == {"0", "2"}
    second = result.validation.shapes[1]
    assert second.input_shapes["audio"] == [3, 1, 3200] and second.status == "pass"  # twice the hops
    program = result.artifact.module()
    assert program(audio=torch.randn(1, 1, 1920)).shape == (1, 1, 1920)
    with pytest.raises(AssertionError, match="Guard failed"):
        program(audio=torch.randn(1, 1, 1601))


def test_the_solver_patch_is_needed():
    with pytest.raises(NotImplementedError, match="solve_univariate_inequality"):
        _codec_export(without=frozenset({"_patch_dim_constraint_solver_gives_up"}))
