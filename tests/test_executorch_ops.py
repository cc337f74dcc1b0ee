"""ExecuTorch fixes for Core ATen operators without a portable kernel (exporters/executorch/ops.py).

Such an operator lowers and is written, so the failure shows only when the ``.pte`` is loaded back: every
test here runs the written file in ``executorch.runtime``, as a user would.
"""

from __future__ import annotations

import pytest
import torch
from pte_runtime import run_pte

from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
from exporters.executorch.ops import (
    antialiased_resize_as_matmuls,
    conv3d_as_conv2d_sum,
    negative_pad_as_slices,
    scatter_reduce_by_mask,
    sort_as_topk,
)

FIX = "_fix_scatter_reduce_without_portable_kernel"
REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
SEGMENTS, TOKENS = 6, 10


class SegmentReduce(torch.nn.Module):
    """Tapas' segment reduction, ``zeros(segments).scatter_reduce(0, index, values, reduce, include_self)``,
    batched (dim 1) and with both ``include_self``."""

    def __init__(self, reduce: str) -> None:
        super().__init__()
        self.reduce = reduce

    def forward(self, base: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            base.scatter_reduce(1, index, values, self.reduce, include_self=False),
            base.scatter_reduce(1, index, values, self.reduce, include_self=True),
        )


def _inputs(seed: int) -> dict[str, torch.Tensor]:
    """Repeated segment ids and, as ids are drawn below ``SEGMENTS - 2``, at least two empty segments."""
    generator = torch.Generator().manual_seed(seed)
    return {
        "base": torch.randn(2, SEGMENTS, generator=generator),
        "index": torch.randint(0, SEGMENTS - 2, (2, TOKENS), generator=generator),
        "values": torch.randn(2, TOKENS, generator=generator),
    }


def _assert_matches(reduce: str, ran: list[torch.Tensor], eager: tuple[torch.Tensor, ...]) -> None:
    assert len(ran) == len(eager)
    for got, want in zip(ran, eager, strict=True):
        if reduce in ("amax", "amin"):
            assert torch.equal(got, want), (got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize(("reduce", "dtype"), [(r, torch.float32) for r in REDUCTIONS]
                         + [(r, torch.int64) for r in REDUCTIONS if r != "mean"])  # integer mean: left alone
def test_scatter_reduce_rewrite_matches_aten(reduce, dtype, dim):
    generator = torch.Generator().manual_seed(7)
    base = (torch.randn(5, 6, generator=generator) * 4).to(dtype)
    src = (torch.randn(5, 6, generator=generator) * 4).to(dtype)
    index = torch.randint(0, base.shape[dim] - 2, src.shape, generator=generator)

    class Model(torch.nn.Module):
        def forward(self, base, index, src):
            return tuple(base.scatter_reduce(dim, index, src, reduce, include_self=flag) for flag in (False, True))

    program = torch.export.export(Model(), (base, index, src))
    fired = sum(scatter_reduce_by_mask(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    assert fired == 2 and "scatter_reduce" not in program.graph_module.code
    _assert_matches(reduce, list(program.module()(base, index, src)), Model()(base, index, src))


def test_scatter_reduce_rewrite_reads_only_the_part_of_src_that_index_covers():
    class LongerSource(torch.nn.Module):
        def forward(self, base, index, src):
            return base.scatter_reduce(0, index, src, "amax", include_self=False)

    generator = torch.Generator().manual_seed(9)
    args = (torch.zeros(5, 6), torch.randint(0, 5, (3, 6), generator=generator), torch.randn(5, 6, generator=generator))
    program = torch.export.export(LongerSource(), args)
    assert sum(scatter_reduce_by_mask(program.graph_module, node) for node in list(program.graph.nodes)) == 1
    program.graph_module.recompile()
    assert torch.equal(program.module()(*args), LongerSource()(*args))


def test_scatter_reduce_rewrite_leaves_what_it_does_not_handle():
    class IntegerMean(torch.nn.Module):
        def forward(self, base, index, src):
            return base.scatter_reduce(0, index, src, "mean")

    class ShortIndex(torch.nn.Module):  # index smaller than self on a non-scatter dim
        def forward(self, base, index, src):
            return base.scatter_reduce(0, index, src, "sum")

    cases = [
        (IntegerMean(), (torch.zeros(4, dtype=torch.int64), torch.tensor([0, 1, 1]), torch.tensor([3, 4, 6]))),
        (ShortIndex(), (torch.zeros(4, 3), torch.zeros(2, 2, dtype=torch.int64), torch.ones(2, 2))),
    ]
    for model, args in cases:
        program = torch.export.export(model, args)
        assert not any(scatter_reduce_by_mask(program.graph_module, node) for node in list(program.graph.nodes))
        assert "scatter_reduce" in program.graph_module.code


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_executorch_runs_scatter_reduce_from_the_written_pte(reduce, tmp_path):
    model, inputs = SegmentReduce(reduce).eval(), _inputs(0)
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired[FIX] == 2
    written = result.save(tmp_path / reduce)["artifact"]
    for seed in (0, 1):  # the traced example, and index values the trace never saw
        fresh = _inputs(seed)
        _assert_matches(reduce, run_pte(written, list(fresh.values())), model(**fresh))


class FlatSegmentReduce(torch.nn.Module):
    """Tapas' batched segment reduction as it is written: segment ids offset per example, batch x segments
    flattened into the one scattered dim, so a dynamic batch makes that dim symbolic, and the ids' and the
    values' batch dims two symbols torch does not know to be equal."""

    def forward(self, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        batch = index.shape[0]
        flat = (index + torch.arange(batch)[:, None] * SEGMENTS).flatten()
        means = values.new_zeros(batch * SEGMENTS).scatter_reduce(0, flat, values.flatten(), "mean", include_self=False)
        return means.view(batch, SEGMENTS)


def test_executorch_runs_scatter_reduce_over_a_dynamic_dim_from_the_written_pte(tmp_path):
    model, inputs = FlatSegmentReduce().eval(), {k: v for k, v in _inputs(0).items() if k != "base"}
    result = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(model, inputs)
    assert result.metadata.workarounds_fired[FIX] == 1
    written = result.save(tmp_path / "flat")["artifact"]
    larger = {k: torch.cat([v, v.flip(0), v]) for k, v in _inputs(1).items() if k != "base"}  # batch 6, not 2
    _assert_matches("mean", run_pte(written, list(larger.values())), (model(**larger),))


def test_without_the_fix_the_written_pte_cannot_be_loaded(tmp_path):
    model, inputs = SegmentReduce("amax").eval(), _inputs(0)
    without = ExecutorchExporter(ExecutorchConfig(without=frozenset({FIX}))).export(model, inputs)
    assert FIX not in without.metadata.workarounds_fired
    missing = r"Failed to load method forward, error: 0x:?14"  # Error::OperatorMissing
    written = without.save(tmp_path / "unvalidated", validate=False)["artifact"]
    with pytest.raises(RuntimeError, match=missing):
        run_pte(written, list(inputs.values()))
    with pytest.raises(RuntimeError, match=missing):  # save() loads what it wrote back before keeping it
        without.save(tmp_path / "validated")


class Tubelets(torch.nn.Module):
    """VJEPA2's video patch embedding, ``Conv3d(...)(x).flatten(2).transpose(1, 2)``, and a padded, dilated,
    grouped 3-D convolution without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Conv3d(4, 6, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.other = torch.nn.Conv3d(4, 6, 3, stride=(2, 1, 2), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2,
                                     bias=False)  # fmt: skip

    def forward(self, video: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.embed(video).flatten(2).transpose(1, 2), self.other(video)


def test_conv3d_rewrite_matches_aten():
    model, video = Tubelets().eval(), torch.randn(2, 4, 7, 9, 9)
    program = torch.export.export(model, (video,))
    fired = sum(conv3d_as_conv2d_sum(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    assert fired == 2 and "conv3d" not in program.graph_module.code
    for got, want in zip(program.module()(video), model(video), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_executorch_runs_conv3d_from_the_written_pte(tmp_path):
    model, inputs = Tubelets().eval(), {"video": torch.randn(2, 4, 7, 9, 9)}
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired["_fix_conv3d_without_portable_kernel"] == 2
    written = result.save(tmp_path / "tubelets")["artifact"]
    for got, want in zip(run_pte(written, [inputs["video"]]), model(**inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)

    without = ExecutorchConfig(without=frozenset({"_fix_conv3d_without_portable_kernel"}))
    unfixed = ExecutorchExporter(without).export(model, inputs).save(tmp_path / "unfixed", validate=False)
    with pytest.raises(RuntimeError, match=r"method->execute\(\) failed with error 0x:?12"):  # InvalidArgument
        run_pte(unfixed["artifact"], [inputs["video"]])


class Sorts(torch.nn.Module):
    """SamHQ's ``torch.sort(iou_pred, dim=2, descending=True)`` with the order applied by ``gather``, an
    ascending sort over the last dim, and ViTMAE's shuffle and restore, ``argsort`` of the noise and of that
    (an ``aten.argsort`` until the decompositions)."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ordered, order = torch.sort(scores, dim=2, descending=True)
        ascending, positions = scores.sort(-1)
        shuffle = torch.argsort(scores.flatten(1), dim=1)
        restore = torch.argsort(shuffle, dim=1, descending=True)
        return ordered, order, scores.gather(2, order), ascending, positions, shuffle, restore


class StableSort(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return scores.sort(stable=True)


def _scores() -> torch.Tensor:
    return torch.randperm(2 * 3 * 4 * 5, generator=torch.Generator().manual_seed(3)).float().view(2, 3, 4, 5)  # no ties


def test_sort_rewrite_matches_aten():
    model, scores = Sorts(), _scores()
    program = torch.export.export(model, (scores,))
    fired = sum(sort_as_topk(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    assert fired == 4 and "aten.sort" not in program.graph_module.code and "argsort" not in program.graph_module.code
    for got, want in zip(program.module()(scores), model(scores), strict=True):
        assert torch.equal(got, want)
    stable = torch.export.export(StableSort(), (scores,))  # a stable sort's order of ties is part of its answer
    assert not any(sort_as_topk(stable.graph_module, node) for node in list(stable.graph.nodes))
    assert "aten.sort.stable" in stable.graph_module.code


def test_executorch_runs_sort_from_the_written_pte(tmp_path):
    model, inputs = Sorts().eval(), {"scores": _scores()}
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired["_fix_sort_without_portable_kernel"] == 4
    written = result.save(tmp_path / "sorts")["artifact"]
    for got, want in zip(run_pte(written, [inputs["scores"]]), model(**inputs), strict=True):
        assert torch.equal(got, want)

    without = ExecutorchConfig(without=frozenset({"_fix_sort_without_portable_kernel"}))
    unfixed = ExecutorchExporter(without).export(model, inputs).save(tmp_path / "unfixed", validate=False)
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:?14"):  # OperatorMissing
        run_pte(unfixed["artifact"], [inputs["scores"]])


class RoutedSort(torch.nn.Module):
    """JetMoE's router: the experts of the routed tokens sorted along a dim as long as the sequence."""

    def forward(self, experts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ordered, order = experts.flatten().sort(0)
        return ordered, order


def test_executorch_runs_a_sort_over_a_dynamic_dim_from_the_written_pte(tmp_path):
    model, experts = RoutedSort().eval(), torch.randperm(16, generator=torch.Generator().manual_seed(6)).view(8, 2)
    result = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(model, {"experts": experts})
    assert result.metadata.workarounds_fired["_fix_sort_without_portable_kernel"] == 1
    written = result.save(tmp_path / "routed")["artifact"]
    fewer = torch.randperm(10, generator=torch.Generator().manual_seed(7)).view(5, 2)  # dim 0 is in [2, 8]
    for got, want in zip(run_pte(written, [fewer]), model(fewer), strict=True):
        assert torch.equal(got, want)


@pytest.mark.slow
def test_tapas_classification_runs_with_scatter_reduce_as_masks():
    from exporters.tiny import build_tiny

    tiny = build_tiny("TapasForSequenceClassification")
    result = ExecutorchExporter(ExecutorchConfig()).export(tiny.model, tiny.inputs, validate=True)
    assert result.metadata.workarounds_fired[FIX] >= 1
    assert result.validation.status == "pass", result.validation.problems()


# ── negative pads: cropping, which ATen allows and the portable kernel rejects ──
class NegativePads(torch.nn.Module):
    """RWKV's time shift (crop only) and a pad that crops one side and pads the other."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (torch.nn.functional.pad(x, (0, 0, 1, -1)), torch.nn.functional.pad(x, (-1, 2, 0, -2), value=0.5),
                torch.nn.functional.pad(x, (1, 1)))


def test_negative_pad_rewrite_matches_aten_and_leaves_non_negative_pads():
    model, x = NegativePads(), torch.randn(2, 5, 4)
    program = torch.export.export(model, (x,))
    fired = sum(negative_pad_as_slices(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    code = program.graph_module.code
    assert fired == 2 and "constant_pad_nd" in code and code.count("aten.pad.default") == 1  # (1, 1) left as it is
    for got, want in zip(program.module()(x), model(x), strict=True):
        assert torch.equal(got, want)


def test_executorch_runs_negative_pads_from_the_written_pte(tmp_path):
    fix = "_fix_negative_pad_without_portable_kernel"
    model, inputs = NegativePads().eval(), {"x": torch.randn(2, 5, 4)}
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired[fix] == 2
    written = result.save(tmp_path / "pads")["artifact"]
    for got, want in zip(run_pte(written, [inputs["x"]]), model(**inputs), strict=True):
        assert torch.equal(got, want)

    unfixed = ExecutorchExporter(ExecutorchConfig(without=frozenset({fix}))).export(model, inputs)
    with pytest.raises(RuntimeError, match=r"execute\(\) failed with error 0x12"):  # InvalidArgument
        run_pte(unfixed.save(tmp_path / "unfixed", validate=False)["artifact"], [inputs["x"]])


class TimeShift(torch.nn.Module):
    """RWKV's time shift, ``nn.ZeroPad2d((0, 0, 1, -1))`` over embedded tokens: the crop is on the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.shift = torch.nn.Embedding(16, 4), torch.nn.ZeroPad2d((0, 0, 1, -1))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.shift(self.embed(input_ids))


def test_executorch_runs_a_negative_pad_of_a_dynamic_dim_from_the_written_pte(tmp_path):
    model, ids = TimeShift().eval(), torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(11))
    result = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(model, {"input_ids": ids})
    assert result.metadata.workarounds_fired["_fix_negative_pad_without_portable_kernel"] == 1
    written = result.save(tmp_path / "shift")["artifact"]
    longer = torch.randint(0, 16, (3, 21), generator=torch.Generator().manual_seed(12))
    assert torch.equal(run_pte(written, [longer])[0], model(longer))


class NonzeroColumns(torch.nn.Module):
    """OneFormer's and Splinter's use of ``nonzero``: its index columns read by slices, and (what a copy-based
    fix would do) a contiguous copy of it read the same way."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = (x > 0).nonzero()
        copied = idx.clone(memory_format=torch.contiguous_format)
        return idx[:, 0] * 10 + idx[:, 1], copied[:, 1] * 10 + copied[:, 0]


def _signs() -> torch.Tensor:
    return torch.randn(5, 7, generator=torch.Generator().manual_seed(4))


def test_executorch_runs_nonzero_columns_from_the_written_pte(tmp_path):
    model, x = NonzeroColumns().eval(), _signs()
    result = ExecutorchExporter(ExecutorchConfig()).export(model, {"x": x})
    assert result.metadata.workarounds_fired["_patch_nonzero_planned_row_major"] >= 1
    written = result.save(tmp_path / "nonzero")["artifact"]
    for got, want in zip(run_pte(written, [x]), model(x), strict=True):
        assert torch.equal(got, want)

    without = ExecutorchConfig(without=frozenset({"_patch_nonzero_planned_row_major"}))
    unfixed = ExecutorchExporter(without).export(model, {"x": x}).save(tmp_path / "unfixed", validate=False)
    with pytest.raises(RuntimeError, match=r"method->execute\(\) failed with error 0x:?12"):  # InvalidArgument
        run_pte(unfixed["artifact"], [x])


class ResizeToGrid(torch.nn.Module):
    """Siglip2's position grid: a table resized, antialiased, to a height and width read from a tensor."""

    def forward(self, table: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        height, width = grid.tolist()
        torch._check(height > 0)
        torch._check(width > 0)
        torch._check(height * width <= 64)
        return torch.nn.functional.interpolate(table, size=(height, width), mode="bilinear", antialias=True)


TABLE = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(10))


@pytest.mark.parametrize("grid", [(3, 5), (6, 6), (2, 12), (8, 4), (1, 1)])  # down, same, mixed, up, one
def test_antialiased_resize_rewrite_matches_aten(grid):
    program = torch.export.export(ResizeToGrid(), (TABLE, torch.tensor([3, 5])))
    assert sum(antialiased_resize_as_matmuls(program.graph_module, node) for node in list(program.graph.nodes)) == 1
    program.graph_module.recompile()
    assert "upsample" not in program.graph_module.code
    want = ResizeToGrid()(TABLE, torch.tensor(grid))
    torch.testing.assert_close(program.module()(TABLE, torch.tensor(grid)), want, rtol=1e-5, atol=1e-6)


def test_executorch_runs_an_antialiased_resize_to_sizes_read_from_a_tensor(tmp_path):
    model, inputs = ResizeToGrid().eval(), {"table": TABLE, "grid": torch.tensor([3, 5])}
    result = ExecutorchExporter(ExecutorchConfig()).export(model, inputs)
    assert result.metadata.workarounds_fired["_fix_antialiased_resize_to_a_symbolic_size"] == 1
    written = result.save(tmp_path / "grid")["artifact"]
    for grid in ([3, 5], [8, 4], [2, 12]):  # the traced size, and sizes the trace never saw
        got, want = run_pte(written, [TABLE, torch.tensor(grid)])[0], model(TABLE, torch.tensor(grid))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)

    without = ExecutorchConfig(without=frozenset({"_fix_antialiased_resize_to_a_symbolic_size"}))
    unfixed = ExecutorchExporter(without).export(model, inputs).save(tmp_path / "unfixed", validate=False)
    with pytest.raises(RuntimeError, match=r"method->execute\(\) failed with error 0x12"):  # InvalidArgument
        run_pte(unfixed["artifact"], [TABLE, torch.tensor([3, 5])])
