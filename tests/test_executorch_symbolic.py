"""Symbolic sizes through ExecuTorch's lowering (exporters/executorch_symbolic.py).

Each export here is dynamic and validated on the written ``.pte`` at the sample shape and at a second shape
that moves every dynamic dim, so a dim the lowering made static shows as a failure, not as a pass; the dim
orders of data-dependent sizes are exported static, as a model's count of matches is.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from exporters.executorch_symbolic import (
    LoweringSpecialisedError,
    decide_sym_min_max,
    dim_order_by_multiples,
    require_dims_kept,
)


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


class WhereRows(torch.nn.Module):
    """``torch.where`` positions stacked as rows: a contiguous ``[2, count]`` tensor with strides ``(count, 1)``,
    ``count`` data-dependent (Splinter's question positions)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack(torch.where(x > 0)) * 2


def test_dim_order_of_a_data_dependent_count_comes_from_its_multiples(executorch_needs):
    inputs = {"x": torch.randn(4, 5, generator=torch.Generator().manual_seed(3))}
    executorch_needs(
        WhereRows(), inputs, "_patch_dim_order_of_unbacked_strides",
        r"GuardOnDataDependentSymNode: Could not guard on data-dependent expression u\d+ < 1",
    )  # fmt: skip


def test_strides_are_ordered_by_multiples_and_an_unrelated_pair_stays_undecided():
    env = ShapeEnv()
    u0, u1 = env.create_unbacked_symint(), env.create_unbacked_symint()
    assert dim_order_by_multiples((u0, 1)) == (0, 1)  # row-major [2, u0]
    assert dim_order_by_multiples((1, u0)) == (1, 0)  # column-major, as torch makes nonzero
    assert dim_order_by_multiples((384 * u0, 384, 1)) == (0, 1, 2)
    assert dim_order_by_multiples((u0 + u1 + 16, 1)) == (0, 1)
    assert dim_order_by_multiples((u0, u1)) is None  # no fact orders them: ExecuTorch's error stands
    assert dim_order_by_multiples((4, 3, 1, 1)) == (0, 1, 2, 3)  # concrete ties keep dim order, as ExecuTorch's
    assert dim_order_by_multiples((3, 1, 3, 3)) == (0, 2, 3, 1)
