"""Symbolic sizes through ExecuTorch's lowering (exporters/executorch_symbolic.py).

Each export here is dynamic and validated on the written ``.pte`` at the sample shape and at a second shape
that moves every dynamic dim, so a dim the lowering made static shows as a failure, not as a pass.
"""

from __future__ import annotations

import pytest
import torch

from exporters.executorch_symbolic import LoweringSpecialisedError, decide_sym_min_max, require_dims_kept


class BoundedTopk(torch.nn.Module):
    """A sparse-attention indexer's ``topk = min(budget, scores.shape[-1])`` over a mask's key positions, with a
    budget above any sequence the export allows (DeepSeek-V3.2: 2,048 against at most ``max_sequence`` 128)."""

    def __init__(self, budget: int = 2048) -> None:
        super().__init__()
        self.budget = budget

    def forward(self, attention_mask: torch.Tensor) -> torch.Tensor:
        scores = attention_mask * 1.5 - attention_mask.cumsum(-1) * 0.25
        return scores.topk(min(self.budget, scores.shape[-1]), dim=-1).values


class EmptyThenFilled(torch.nn.Module):
    """A buffer made with ``new_empty`` of symbolic sizes and then written (DeepSeek-V3.2's ``expand_kv``)."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = input_ids.float()
        out = x.new_empty([x.shape[0], 2, x.shape[1]])
        out[:, 0] = x * 2
        out[:, 1] = x + 1
        return out


def _mask(seed: int = 0) -> dict[str, torch.Tensor]:
    return {"attention_mask": torch.randint(0, 2, (2, 8), generator=torch.Generator().manual_seed(seed)).float()}


def test_sym_min_of_a_bounded_size_is_that_size(executorch_needs):
    fixed = executorch_needs(
        BoundedTopk(), _mask(), "_fix_sym_min_max_decided_by_bounds", r"^AssertionError: $", dynamic=True
    )
    assert set(fixed.metadata.dynamic_dims["attention_mask"]) == {"0", "1"}


def test_new_empty_of_symbolic_sizes_keeps_them_dynamic(executorch_needs):
    fixed = executorch_needs(
        EmptyThenFilled(), {"input_ids": torch.randint(0, 9, (2, 8))}, "_fix_empty_specialised_by_dim_order",
        r"specialised input_ids dim 0, input_ids dim 1, which torch.export kept dynamic", dynamic=True,
    )  # fmt: skip
    second = fixed.validation.shapes[1].input_shapes["input_ids"]
    assert second != [2, 8], "the second shape must move the dims the .pte keeps dynamic"


def test_undecided_sym_min_is_left_for_the_verifier():
    # With the sequence allowed past the budget, min(4, s) depends on the input: nothing to decide.
    dims = {"attention_mask": {0: torch.export.Dim.AUTO(min=1, max=8), 1: torch.export.Dim.AUTO(min=1, max=16)}}
    program = torch.export.export(BoundedTopk(budget=4), (), _mask(), dynamic_shapes=dims, strict=False)
    nodes = [n for n in program.graph.nodes if n.target is torch.sym_min]
    assert nodes, program.graph
    assert not decide_sym_min_max(program.graph_module, nodes[0])
    assert any(n.target is torch.sym_min for n in program.graph.nodes)


def test_a_dim_lost_in_lowering_is_named():
    exported = {"input_ids": {"0": {}, "1": {}}, "attention_mask": {"0": {}, "1": {}}}
    lowered = {"attention_mask": {"0": {}, "1": {}}}
    with pytest.raises(LoweringSpecialisedError, match=r"specialised input_ids dim 0, input_ids dim 1,"):
        require_dims_kept(exported, lowered)
    require_dims_kept(exported, exported)  # nothing lost: no error
