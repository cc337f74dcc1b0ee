"""Symbolic sizes through ExecuTorch's lowering (exporters/executorch/symbolic.py).

Each export here is dynamic and validated on the written ``.pte`` at the sample shape and at a second shape
that moves every dynamic dim, so a dim the lowering made static shows as a failure, not as a pass; the dim
orders of data-dependent sizes are exported static, as a model's count of matches is.
"""

from __future__ import annotations

import operator

import pytest
import sympy
import torch
from pte_runtime import run_pte, run_pte_in_child
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from exporters.executorch.symbolic import (
    LoweringSpecialisedError,
    bounds_from_checks,
    cancel_exact_floor_divisions,
    decide_sym_min_max,
    dim_order_by_multiples,
    python_mod_as_floor_division,
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


class AlibiWindow(torch.nn.Module):
    """MPT's attention bias window: ``bias[:, max(0, bias.size(1) - length):]`` over a bias as long as the largest
    context (2,048), which the slice's bounds check reads while tracing, before the export's upper bound holds."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        bias = torch.arange(2048.0).expand(input_ids.shape[0], 2048)
        return bias[:, max(0, 2048 - input_ids.shape[1]) :] + input_ids


def test_sym_max_decided_by_the_bound_dim_auto_applies_after_tracing():
    dims = {"input_ids": {0: torch.export.Dim.AUTO(min=1, max=8), 1: torch.export.Dim.AUTO(min=1, max=128)}}
    program = torch.export.export(AlibiWindow(), (), {"input_ids": torch.ones(2, 8)}, dynamic_shapes=dims)
    nodes = [n for n in program.graph.nodes if n.target is torch.sym_max]
    assert nodes, program.graph
    assert decide_sym_min_max(program.graph_module, nodes[0])  # 2048 - s >= 0 for every s <= 128
    assert not any(n.target is torch.sym_max for n in program.graph.nodes)


def test_alibi_window_exports_dynamic(executorch_needs):
    executorch_needs(
        AlibiWindow(), {"input_ids": torch.ones(2, 8)}, "_fix_sym_min_max_decided_by_bounds", r"^AssertionError: $",
        dynamic=True,
    )  # fmt: skip


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


class RelativeShift(torch.nn.Module):
    """XLNet's relative shift (``rel_shift_bnij``): scores over 2 * sequence relative positions reshaped with
    the two last dims swapped, the first row dropped, and reshaped back; torch leaves a ``(s**2)//s`` in the
    symbolic sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        q = x.reshape(x.shape[0], x.shape[1], 2, 4)
        scores = torch.einsum("bind,bjnd->bnij", q, torch.cat([q, q.flip(1)], dim=1))  # [b, 2, s, 2s]
        size = scores.shape
        shifted = scores.reshape(size[0], size[1], size[3], size[2])[:, :, 1:, :]
        shifted = shifted.reshape(size[0], size[1], size[2], size[3] - 1)
        return torch.index_select(shifted, 3, torch.arange(input_ids.shape[1]))


def test_planned_sizes_of_exact_divisions_fit_and_the_pte_loads(tmp_path):
    """Bounded as ``max(n) // min(d)``, ``(s**2)//s`` made a tensor larger than the arena planned for it, and
    the written ``.pte`` did not load (0x21, MemoryAllocationFailed)."""
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    model = RelativeShift().eval()
    inputs = {"input_ids": torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(5))}
    fixed = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_patch_upper_bound_of_exact_divisions"] >= 1
    assert [shape.status for shape in fixed.validation.shapes] == ["pass", "pass"]

    without = ExecutorchConfig(dynamic=True, without=frozenset({"_patch_upper_bound_of_exact_divisions"}))
    unfixed = ExecutorchExporter(without).export(model, inputs).save(tmp_path / "unfixed", validate=False)
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:?21"):
        run_pte(unfixed["artifact"], [inputs["input_ids"]])


def test_exact_floor_divisions_are_cancelled_and_inexact_ones_kept():
    from torch.utils._sympy.functions import FloorDiv

    s = sympy.Symbol("s", integer=True, positive=True)
    assert cancel_exact_floor_divisions(FloorDiv((2 * s - 1) * FloorDiv(s**2, s), s)) == 2 * s - 1
    assert cancel_exact_floor_divisions(4 * s * FloorDiv(s**2, s)) == 4 * s**2
    inexact = FloorDiv(s**2 + 1, s)
    assert cancel_exact_floor_divisions(inexact) == inexact
    halves = FloorDiv(3 * s, 2)  # 3/2 * s is a polynomial, but not with integer coefficients
    assert cancel_exact_floor_divisions(halves) == halves


class BlockPadding(torch.nn.Module):
    """LongT5's local-attention blocks: the sequence padded to a multiple of a block longer than any sequence
    with ``(-s) % block``, then cut into blocks whose length is read back as ``padded // blocks``."""

    block = 16

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        padded = torch.nn.functional.pad(x, (0, 0, 0, -x.shape[1] % self.block))
        blocks = padded.shape[1] // self.block
        return padded.reshape(x.shape[0], blocks, padded.shape[1] // blocks, x.shape[2]).sum(2)


def test_remainder_of_a_negative_size_is_pythons_in_the_pte(tmp_path):
    """ExecuTorch computes a size's ``%`` as C++ does (``-8 % 16 == -8``): the padded length and the block count
    come out 0, and the runtime rejects a kernel's arguments (0x12) or, in LongT5, ``padded // blocks`` kills the
    process (SIGFPE); with the fix, the ``.pte`` runs and both validation shapes pass."""
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    inputs = {"input_ids": torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(3))}
    ids = [inputs["input_ids"]]
    fixed = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(BlockPadding(), inputs)
    assert fixed.metadata.workarounds_fired["_fix_size_remainder_of_a_negative"] >= 1
    # In a child first: a .pte that kills its process must fail this test, not end the test session.
    child = run_pte_in_child(fixed.save(tmp_path / "fixed", validate=False)["artifact"], ids)
    assert child.returncode == 0, child.stderr[-2000:]
    assert [shape.status for shape in fixed.validate().shapes] == ["pass", "pass"]

    without = ExecutorchConfig(dynamic=True, without=frozenset({"_fix_size_remainder_of_a_negative"}))
    unfixed = ExecutorchExporter(without).export(BlockPadding(), inputs).save(tmp_path / "unfixed", validate=False)
    child = run_pte_in_child(unfixed["artifact"], ids)
    assert child.returncode < 0 or "method->execute() failed" in child.stderr, child.stderr[-2000:]


def test_remainder_of_sizes_known_non_negative_is_left_alone():
    dims = {"x": {1: torch.export.Dim.AUTO(min=2, max=64)}}

    class Remainders(torch.nn.Module):
        def forward(self, x):
            return x[:, : x.shape[1] % 5 + 1], x[:, : -x.shape[1] % 5 + 1]

    program = torch.export.export(Remainders(), (), {"x": torch.ones(2, 8)}, dynamic_shapes=dims)
    mods = [n for n in program.graph.nodes if n.target is operator.mod]
    assert [python_mod_as_floor_division(program.graph_module, n) for n in mods] == [False, True]


class CheckedGrid(torch.nn.Module):
    """Siglip2's resized position grid: a height and width read from a tensor, their product checked against
    the table's length, and a tensor of that grid's size."""

    def forward(self, pixel_values: torch.Tensor, spatial_shapes: torch.Tensor) -> torch.Tensor:
        height, width = spatial_shapes[0].tolist()
        torch._check(height > 0)
        torch._check(width > 0)
        torch._check(height * width <= pixel_values.shape[1])
        grid = torch.arange(height * width, dtype=pixel_values.dtype).reshape(height, width)
        return pixel_values[:, : height * width].sum() + grid.sum(0).sum()


def test_products_checked_by_the_model_bound_their_factors():
    program = torch.export.export(CheckedGrid(), (torch.randn(2, 16), torch.tensor([[2, 3]])))
    shape_env = next(v.node.shape_env for n in program.graph.nodes if isinstance(v := n.meta.get("val"), torch.SymInt))
    ranges = bounds_from_checks(shape_env)
    unbacked = sorted((s for s in ranges if str(s).startswith("u")), key=str)
    assert [(ranges[s].lower, ranges[s].upper) for s in unbacked] == [(1, 16), (1, 16)]
    assert all(shape_env.var_to_range[s].upper > 16 for s in unbacked)  # torch's own ranges stay unbounded


def test_a_grid_sized_from_a_tensor_lowers_within_its_checked_product(executorch_needs):
    inputs = {"pixel_values": torch.randn(2, 16), "spatial_shapes": torch.tensor([[2, 3]])}
    executorch_needs(
        CheckedGrid(), inputs, "_patch_upper_bound_from_product_checks",
        r"Cannot evaluate a finite upper bound for symbolic expression u\d+",
    )  # fmt: skip


class SplitByCounts(torch.nn.Module):
    """JetMoE's mixture of experts: each token routed to two of three experts, the copies split by per-expert
    counts read from a tensor (their sum, ``2 * batch * sequence``, is what torch records), each piece
    transformed by an op the portable runtime runs (so its output is planned memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        copies = self.embed(input_ids).flatten(0, 1).repeat_interleave(2, dim=0)
        experts = torch.stack([input_ids % 3, (input_ids + 1) % 3], dim=-1).flatten()
        gates = torch.zeros(experts.shape[0], 3, dtype=torch.long).scatter(1, experts[:, None], 1)
        pieces = copies.split(gates.sum(0).tolist(), dim=0)
        return torch.cat([piece.cumsum(0) * (index + 1) for index, piece in enumerate(pieces)], dim=0)


SPLIT_IDS = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])


def test_counts_checked_to_sum_to_a_bounded_size_are_bounded_by_it():
    dims = {"input_ids": {0: torch.export.Dim.AUTO(min=2, max=8), 1: torch.export.Dim.AUTO(min=2, max=16)}}
    program = torch.export.export(SplitByCounts(), (), {"input_ids": SPLIT_IDS}, dynamic_shapes=dims)
    shape_env = next(v.node.shape_env for n in program.graph.nodes if isinstance(v := n.meta.get("val"), torch.SymInt))
    ranges = bounds_from_checks(shape_env)
    counts = sorted((s for s in ranges if str(s).startswith("u")), key=str)
    assert [(ranges[s].lower, ranges[s].upper) for s in counts] == [(0, 2 * 8 * 16)] * 3
    assert all(shape_env.var_to_range[s].upper > 2 * 8 * 16 for s in counts)  # torch's own ranges stay unbounded


def test_tokens_split_by_data_dependent_counts_run_from_the_pte_at_other_shapes(executorch_needs, tmp_path):
    model = SplitByCounts().eval()
    fixed = executorch_needs(
        model, {"input_ids": SPLIT_IDS}, "_patch_upper_bound_from_product_checks",
        r"Cannot evaluate a finite upper bound for symbolic expression u\d+", dynamic=True,
    )  # fmt: skip
    written = fixed.save(tmp_path / "split", validate=False)["artifact"]
    longer = torch.randint(0, 16, (3, 30), generator=torch.Generator().manual_seed(8))  # 180 routed copies, not 16
    torch.testing.assert_close(run_pte(written, [longer])[0], model(longer), rtol=1e-5, atol=1e-3)


class EmptyLatentCache(torch.nn.Module):
    """MistralLarge4's MLA cache: a zero-width latent slice appended to an empty cache of symbolic shape."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(input_ids)
        latent = x[..., :0].unsqueeze(1)  # [batch, 1, sequence, 0]
        empty = x.new_zeros(0)  # DynamicLayer's initial keys, torch.tensor([]): cat skips it at any rank
        return x * 2, torch.cat([empty, latent, latent], dim=2)


def test_an_empty_cat_of_symbolic_shape_is_emitted(executorch_needs):
    inputs = {"input_ids": torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(4))}
    executorch_needs(
        EmptyLatentCache(), inputs, "_fix_empty_cat_of_symbolic_shape",
        r"InternalError: .*Unsupported type encountered in int list", dynamic=True,
    )  # fmt: skip


class RemainderTail(torch.nn.Module):
    """DeepseekV4's compressor in miniature: whole groups of 4 positions, and the ``length mod 4`` tail after them,
    which is empty at the sample length 8."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 16)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(input_ids)
        whole = 4 * (x.shape[1] // 4)
        return x[:, :whole].sum(1), x[:, whole:].cumsum(1)


def test_a_size_empty_at_the_sample_is_planned_with_torchs_strides():
    """ExecuTorch's spec strides multiply a symbolic size as it is, so the tail's ``s - 4*(s//4)`` (0 at the sample)
    made the strides before it 0, and ``to_executorch`` stopped: "0 in strides is not supported for ExecuTorch"
    (DeepseekV4Model and DeepseekV4ForCausalLM, dynamic)."""
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    inputs = {"input_ids": torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(7))}
    fixed = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(RemainderTail(), inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_patch_contiguous_stride_of_a_size_that_may_be_0"] >= 1
    assert [shape.status for shape in fixed.validation.shapes] == ["pass", "pass"]

    without = ExecutorchConfig(dynamic=True, without=frozenset({"_patch_contiguous_stride_of_a_size_that_may_be_0"}))
    with pytest.raises(RuntimeError, match="0 in strides is not supported for ExecuTorch"):
        ExecutorchExporter(without).export(RemainderTail(), inputs)


def test_a_spec_gets_torchs_strides_only_where_executorchs_are_0_at_the_sample():
    from executorch.exir.tensor import contiguous_stride_from_shape
    from torch._dynamo.source import ConstantSource

    from exporters.executorch.symbolic import _patch_contiguous_stride_of_a_size_that_may_be_0

    ours = _patch_contiguous_stride_of_a_size_that_may_be_0(contiguous_stride_from_shape)
    env = ShapeEnv()
    length = env.create_symintnode(env.create_symbol(8, source=ConstantSource("length")), hint=8)
    tail = length - 4 * (length // 4)  # 0 at the sample
    executorch_strides = contiguous_stride_from_shape((2, tail, 16))
    assert [int(s.node.hint) if isinstance(s, torch.SymInt) else s for s in executorch_strides] == [0, 16, 1]
    strides = ours((2, tail, 16))
    assert [int(s.node.hint) if isinstance(s, torch.SymInt) else s for s in strides] == [16, 16, 1]
    assert list(ours((2, 0, 16))) == list(torch.empty(2, 0, 16).stride())
    assert ours((2, length, 16))[0] == 16 * length  # a size >= 1 multiplies as it is
