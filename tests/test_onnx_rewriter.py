"""The onnxscript pattern-rewriter patches (exporters/onnx/rewriter.py), on a tiny module that needs each."""

from __future__ import annotations

import functools

import pytest
import torch
from onnxscript.rewriter import _matcher

from exporters.onnx.exporter import OnnxConfig, OnnxExporter

_FIRST_NODE_CHECK = "_patch_multi_output_match_checks_its_first_node"


class _RowRecurrence(torch.nn.Module):
    """The chunked delta rule's forward substitution in small (modeling_kimi_linear.py:519-522): each step
    reads and writes slices of one matrix, so the graph holds many ``Slice`` nodes, and the two returned
    halves of the last axis are a ``SlicesSplit`` candidate (two Slices of one input)."""

    def forward(self, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        attn = attn.clone()
        for i in range(1, attn.shape[-1]):
            row = attn[..., i, :i].clone()
            attn[..., i, :i] = row + (row.unsqueeze(-1) * attn[..., :i, :i]).sum(-2)
        return attn[..., :3] * 2, attn[..., 3:] + 1


_INPUTS = {"attn": torch.randn(2, 6, 6) * 0.3}


@functools.cache
def _export(without: frozenset[str]) -> tuple[object, list[str]]:
    """The export, and the op of the node each multi-output comparison (``_multi_match``) started from."""
    first_ops: list[str] = []
    original = _matcher.SimplePatternMatcher._multi_match

    def counted(self, candidate, check_removable):
        first_ops.append(candidate[0].op_type)
        return original(self, candidate, check_removable)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_matcher.SimplePatternMatcher, "_multi_match", counted)
        result = OnnxExporter(OnnxConfig(without=without)).export(_RowRecurrence().eval(), dict(_INPUTS))
    return result, first_ops


def test_multi_output_patterns_are_tried_only_from_nodes_of_their_first_op_and_the_graph_is_unchanged():
    result, first_ops = _export(frozenset())
    plain, _ = _export(frozenset({_FIRST_NODE_CHECK}))
    assert result.metadata.workarounds_fired[_FIRST_NODE_CHECK] >= 1
    assert first_ops and set(first_ops) == {"Slice"}  # SlicesSplit, the default rule set's multi-output rule
    assert [node.op_type for node in result.artifact.graph] == [node.op_type for node in plain.artifact.graph]
    expected = _RowRecurrence()(_INPUTS["attn"])
    for actual, wanted in zip(result.run_artifact(dict(_INPUTS)), expected):
        torch.testing.assert_close(torch.as_tensor(actual), wanted)


def test_without_the_check_every_node_starts_a_walk_of_the_graph():
    _, first_ops = _export(frozenset())
    _, plain_ops = _export(frozenset({_FIRST_NODE_CHECK}))
    assert set(plain_ops) - {"Slice"}, "the unpatched matcher also starts from nodes that are not a Slice"
    assert len(plain_ops) > 2 * len(first_ops)
