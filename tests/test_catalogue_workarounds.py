"""The backend workarounds the whole-catalogue sweep called for: ``histc``, ``bucketize``, FFTs and MoE experts on ExecuTorch,
complex rotary embeddings and vmap-built attention masks on ONNX and ExecuTorch.

Each test exports with the workaround and shows the real backend error without it (``without=``). The models are
small modules that repeat the transformers construct (so the default suite lowers little), except for the vmap
mask on ONNX, which only fails in a real model's graph (tiny Gemma 3); the classes that hit each construct in the
sweep are exported whole by the ``slow`` tests at the end.
"""

from __future__ import annotations

import re

import pytest
import torch
from transformers.masking_utils import causal_mask_function, or_masks

from exporters.base import StageClock
from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
from exporters.fx_rewrites import (
    count_bincount_by_comparison,
    count_bucketize_by_comparison,
    count_histc_by_comparison,
    count_searchsorted_by_comparison,
    fourier_transform_as_matmuls,
    running_extreme_by_triangle,
    split_complex_arithmetic,
)
from exporters.onnx.exporter import OnnxConfig, OnnxExporter
from exporters.tiny import build_tiny
from exporters.utils import all_workarounds

NEW_WORKAROUNDS = {
    "_fix_histc_not_core_aten": "executorch",
    "_fix_bucketize_not_core_aten": "executorch",
    "_fix_cummax_not_core_aten": "executorch",
    "_fix_bincount_not_core_aten": "executorch",
    "_fix_searchsorted_not_core_aten": "executorch",
    "_fix_fft_not_core_aten": "executorch",
    "_fix_tensor_check_not_core_aten": "executorch",
    "_patch_moe_experts_batched_mm": "executorch",
    "_fix_complex_rotary_for_executorch": "executorch",
    "_fix_complex_rotary_for_onnx": "onnx",
    "_patch_vmap_mask_expansion_for_executorch": "executorch",
    "_patch_vmap_mask_expansion_for_onnx": "onnx",
}


def test_new_workarounds_are_registered_with_their_lifecycle_metadata():
    registered = {w.name: w for w in all_workarounds()}
    for name, backend in NEW_WORKAROUNDS.items():
        workaround = registered[name]
        assert workaround.backend == backend and workaround.dependency in {"torch", "executorch"}
        assert workaround.summary
        assert workaround.upstream.startswith("https://github.com/pytorch/")



def assert_rewrite_is_exact(module: torch.nn.Module, args: tuple, rewrite, rewrites: int, gone: tuple[str, ...]) -> None:
    """Export ``module``, apply the node ``rewrite`` to every node, and check that it rewrote ``rewrites`` nodes,
    that none of the ``gone`` ops is left, and that the rewritten graph run eagerly equals ``module`` exactly
    (values and dtypes)."""
    program = torch.export.export(module, args)
    rewritten = sum(rewrite(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    assert rewritten == rewrites
    assert not any(op in program.graph_module.code for op in gone)
    for got, expected in zip(program.module()(*args), module(*args), strict=True):
        assert got.dtype == expected.dtype and torch.equal(got, expected)

# ── histc ──
class Router(torch.nn.Module):
    """Tokens per expert as transformers' MoE helpers count them: ``histc`` of the top-k expert ids."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.gate(x).topk(2, dim=-1).indices.reshape(-1).float()
        return torch.histc(ids, bins=4, min=0, max=3), torch.histc(x, bins=5, min=-1, max=1)


def test_histc_rewrite_bins_exactly_like_aten():
    """Edges, values outside the range and the last bin's closed end, on the rewritten graph run eagerly."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    x[..., :6] = torch.tensor([-1.0, 1.0, -0.6, 0.2, 1.5, -3.0])  # both ends, inner edges, outside the range
    assert_rewrite_is_exact(Router(), (x,), count_histc_by_comparison, rewrites=2, gone=("histc",))


def test_executorch_needs_histc_counted_by_compares(executorch_needs):
    torch.manual_seed(0)
    model, inputs = Router(), {"x": torch.randn(2, 5, 8)}
    fixed = executorch_needs(
        model, inputs, "_fix_histc_not_core_aten", r"aten\.histc\.default is not in Core ATen opset"
    )
    assert fixed.metadata.workarounds_fired["_fix_histc_not_core_aten"] == 2
    assert max(fixed.validation.max_abs_diff.values()) == 0.0


# ── bucketize ──
class PatchBuckets(torch.nn.Module):
    """Idefics3's vision position ids: fractional patch coordinates bucketed against a 1-D boundary table."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("boundaries", torch.arange(1 / 4, 1.0, 1 / 4), persistent=False)

    def forward(self, coords: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        right = torch.bucketize(coords, self.boundaries, right=True)
        return right * 4 + torch.bucketize(coords, self.boundaries), torch.bucketize(coords, self.boundaries, out_int32=True)


def bucket_inputs() -> dict[str, torch.Tensor]:
    coords = torch.rand(2, 7)
    coords[0, :5] = torch.tensor([0.0, 0.25, 0.5, 0.75, 0.9999])  # on the boundaries: where right= decides
    return {"coords": coords}


def test_bucketize_rewrite_buckets_exactly_like_aten():
    torch.manual_seed(0)
    inputs = bucket_inputs()
    assert_rewrite_is_exact(PatchBuckets(), (inputs["coords"],), count_bucketize_by_comparison, rewrites=3, gone=("bucketize",))


def test_executorch_needs_bucketize_counted_by_compares(executorch_needs):
    torch.manual_seed(0)
    fixed = executorch_needs(
        PatchBuckets(), bucket_inputs(), "_fix_bucketize_not_core_aten", r"aten\.bucketize\.Tensor is not in Core ATen opset"
    )
    assert fixed.metadata.workarounds_fired["_fix_bucketize_not_core_aten"] == 3
    assert max(fixed.validation.max_abs_diff.values()) == 0.0



# ── cummax / cummin ──
class SpecialTokenSpans(torch.nn.Module):
    """Grounding DINO's text mask builder: the previous special token by ``cummax``, the next by a flipped
    ``cummin``, plus both on a 3-D float tensor along a middle dim (values and indices)."""

    def forward(self, special: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        positions = torch.arange(special.shape[1]).expand_as(special)
        prev_special = torch.cummax(torch.where(special, positions, 0), dim=1)[0]
        ends = torch.where(special, positions, special.shape[1] - 1)
        next_special = torch.flip(torch.cummin(torch.flip(ends, dims=[1]), dim=1)[0], dims=[1])
        high, low = torch.cummax(x, dim=1), torch.cummin(x, dim=-2)
        return prev_special, next_special, high.values, high.indices, low.values, low.indices


def span_inputs() -> dict[str, torch.Tensor]:
    special = torch.zeros(2, 9, dtype=torch.bool)
    special[0, [0, 4, 8]] = True
    special[1, [0, 2, 3]] = True
    x = torch.randn(2, 6, 3)
    x[0, :, 0] = torch.tensor([1.0, 1.0, 0.5, 2.0, 2.0, -1.0])  # tied running maxima: torch takes the latest
    return {"special": special, "x": x}


def test_cummax_rewrite_matches_aten_with_ties():
    torch.manual_seed(0)
    inputs = tuple(span_inputs().values())
    assert_rewrite_is_exact(SpecialTokenSpans(), inputs, running_extreme_by_triangle, rewrites=4, gone=("cummax", "cummin"))


@pytest.mark.parametrize("dynamic", [False, True])
def test_executorch_needs_cummax_as_a_masked_triangle(executorch_needs, dynamic):
    """Dynamic too: the triangle's side is the token count, which a dynamic export keeps symbolic."""
    error = r"aten\.cum(max|min)\.default is not in Core ATen opset"
    fixed = executorch_needs(SpecialTokenSpans(), span_inputs(), "_fix_cummax_not_core_aten", error, dynamic=dynamic)
    assert fixed.metadata.workarounds_fired["_fix_cummax_not_core_aten"] == 4
    assert max(fixed.validation.max_abs_diff.values()) == 0.0
    assert len(fixed.validation.shapes) == (2 if dynamic else 1)  # a dynamic export is also run at a second shape


# ── bincount ──
class QuestionCounts(torch.nn.Module):
    """Splinter's question positions: ``bincount`` of the rows holding a question token, checked to give one
    count per row (which fixes its otherwise data-dependent length)."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows, _ = torch.where(input_ids == 7)
        counts = torch.bincount(rows)
        torch._check(counts.size(0) == input_ids.size(0))
        return counts * 10 + counts.max()


def question_ids() -> dict[str, torch.Tensor]:
    ids = torch.tensor([[7, 1, 7, 2, 7, 3], [4, 7, 5, 6, 1, 2], [7, 7, 7, 7, 1, 7]])
    return {"input_ids": ids}


def test_bincount_rewrite_counts_exactly_like_aten():
    assert_rewrite_is_exact(QuestionCounts(), (question_ids()["input_ids"],), count_bincount_by_comparison, rewrites=1, gone=("bincount",))


def test_executorch_needs_bincount_counted_by_compares(executorch_needs):
    fixed = executorch_needs(
        QuestionCounts(), question_ids(), "_fix_bincount_not_core_aten", r"aten\.bincount\.default is not in Core ATen opset"
    )
    assert fixed.metadata.workarounds_fired["_fix_bincount_not_core_aten"] == 1


# ── searchsorted ──
class QuestionColumns(torch.nn.Module):
    """Splinter's question columns, ``i - searchsorted(rows, rows)`` over the sorted row ids, and the right-side
    search of other values."""

    def forward(self, rows: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = torch.searchsorted(rows, rows, side="left")
        return torch.arange(rows.size(0)) - first, torch.searchsorted(rows, values, right=True, out_int32=True)


def sorted_rows() -> dict[str, torch.Tensor]:
    return {"rows": torch.tensor([0, 0, 0, 1, 2, 2, 2, 2]), "values": torch.tensor([[-1, 0, 1], [2, 3, 1]])}


def test_searchsorted_rewrite_matches_aten_on_both_sides():
    inputs = tuple(sorted_rows().values())
    assert_rewrite_is_exact(QuestionColumns(), inputs, count_searchsorted_by_comparison, rewrites=2, gone=("searchsorted",))


def test_executorch_needs_searchsorted_counted_by_compares(executorch_needs):
    fixed = executorch_needs(
        QuestionColumns(), sorted_rows(), "_fix_searchsorted_not_core_aten",
        r"aten\.searchsorted\.Tensor is not in Core ATen opset",
    )
    assert fixed.metadata.workarounds_fired["_fix_searchsorted_not_core_aten"] == 2

# ── MoE experts ──
def test_executorch_runs_moe_experts_as_batched_mm(executorch_needs):
    """One-layer Mixtral: the grouped_mm experts fail to lower (histc, then empty_permuted, sort, custom op)."""
    tiny = build_tiny("MixtralModel")
    tiny.model.config.use_cache = False
    tiny.model.layers = tiny.model.layers[:1]
    executorch_needs(tiny.model, tiny.inputs, "_patch_moe_experts_batched_mm", r"is not in Core ATen opset")
    assert tiny.model.config._experts_implementation != "batched_mm"  # the model's own setting is untouched


# ── Complex rotary embeddings ──
class ComplexRotary(torch.nn.Module):
    """Llama 4's rotary embedding: ``polar(1, angle)`` frequencies times ``view_as_complex`` query pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 4, dtype=torch.float) / 4)), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        freqs = position_ids[..., None].float() * self.inv_freq
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs) * 0.5
        query = self.proj(x).view(*x.shape[:2], 2, 8)  # (batch, sequence, heads, head_dim)
        query_ = torch.view_as_complex(query.float().reshape(*query.shape[:-1], -1, 2))
        return torch.view_as_real(query_ * freqs_cis[:, :, None, :]).flatten(3).type_as(x)


def rotary_inputs() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"x": torch.randn(2, 6, 16), "position_ids": torch.arange(6).repeat(2, 1)}


def test_complex_rewrite_keeps_the_values():
    model, inputs = ComplexRotary(), rotary_inputs()
    program = DynamoExporter(DynamoConfig()).export_program(model, dict(inputs), StageClock({}))
    assert split_complex_arithmetic(program.graph_module) > 0
    assert "complex" not in program.graph_module.code and "polar" not in program.graph_module.code
    assert torch.allclose(program.module()(**inputs), model(**inputs), atol=1e-6)


def test_complex_rewrite_leaves_graphs_it_cannot_finish_alone():
    class ComplexOutput(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.view_as_complex(x.reshape(2, -1, 2)).unsqueeze(0)  # a complex graph output

    program = torch.export.export(ComplexOutput(), (torch.randn(2, 8),))
    code = program.graph_module.code
    assert split_complex_arithmetic(program.graph_module) == 0
    assert program.graph_module.code == code


def test_onnx_needs_complex_rotary_as_real_pairs():
    model, inputs = ComplexRotary(), rotary_inputs()
    fixed = OnnxExporter(OnnxConfig(dynamic=True)).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_fix_complex_rotary_for_onnx"] == 1
    assert fixed.validation.status == "pass" and len(fixed.validation.shapes) == 2
    without = OnnxConfig(without=frozenset({"_fix_complex_rotary_for_onnx"}))
    with pytest.raises(Exception, match=r"complex"):
        OnnxExporter(without).export(model, inputs)


class ComplexRotaryBuffer(torch.nn.Module):
    """Llama 4's vision rotary: a complex table precomputed with ``view_as_complex`` and kept as a buffer
    (Llama4VisionRotaryEmbedding.freqs_ci), returned by a module and multiplied into complex query pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        angles = torch.arange(6, dtype=torch.float)[:, None] * torch.linspace(0.1, 1.0, 4)
        self.freqs_ci = torch.nn.Buffer(torch.view_as_complex(torch.stack([angles.cos(), angles.sin()], -1)),
                                        persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        query = self.proj(x).view(*x.shape[:2], 2, 8)
        query_ = torch.view_as_complex(query.float().reshape(*query.shape[:-1], -1, 2))
        return torch.view_as_real(query_ * self.freqs_ci[None, :, None, :]).flatten(3).type_as(x)


def test_onnx_needs_a_complex_rotary_buffer_as_real_pairs():
    model, inputs = ComplexRotaryBuffer(), {"x": rotary_inputs()["x"]}
    program = DynamoExporter(DynamoConfig()).export_program(model, dict(inputs), StageClock({}))
    assert split_complex_arithmetic(program.graph_module) == 0  # without the program its buffer stays complex
    fixed = OnnxExporter(OnnxConfig()).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_fix_complex_rotary_for_onnx"] == 1
    assert fixed.validation.status == "pass", fixed.validation.problems()
    assert model.freqs_ci.is_complex()  # the model's own buffer is untouched
    without = OnnxConfig(without=frozenset({"_fix_complex_rotary_for_onnx"}))
    with pytest.raises(Exception, match=r"complex"):
        OnnxExporter(without).export(model, inputs)


def test_executorch_needs_complex_rotary_as_real_pairs():
    model, inputs = ComplexRotary(), rotary_inputs()
    fixed = ExecutorchExporter(ExecutorchConfig()).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_fix_complex_rotary_for_executorch"] == 1
    assert fixed.validation.status == "pass", fixed.validation.problems()
    without = ExecutorchConfig(without=frozenset({"_fix_complex_rotary_for_executorch"}))
    with pytest.raises(Exception, match=r"(?i)complex"):
        ExecutorchExporter(without).export(model, inputs).validate()


# ── Fourier transforms ──
class FourierMixing(torch.nn.Module):
    """FNet's token mixing, ``fftn(h, dim=(1, 2)).real``, and the other transforms the rewrite takes."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spectrum = torch.fft.fftn(x)  # complex input of the inverse below; every dim
        return (
            torch.fft.fftn(x, dim=(1, 2)).real,
            torch.fft.fft(x, norm="ortho").imag,
            torch.view_as_real(torch.fft.ifftn(spectrum * 0.5, dim=(0, 2), norm="forward")),
            torch.fft.ifft(x, dim=1).real,
        )


# The rewrite's error bound. A transform along a dim of length N is, per output, a dot product of the input
# (a + ib) with a row of tables C, S of N**-e·cos / ·sin(2π·jk/N): Re = Σ C·a + S·b, Im = Σ C·b − S·a (the
# inverse flips S). In float32 (unit roundoff u = 2**-24) a dot product of 2N terms, in any summation order (so
# whatever the thread count or BLAS blocking), is off by at most γ(2N)·Σ|terms|, γ(n) = n·u/(1 − n·u). The
# tables carry their own error: the angle jk mod N (exact) · 2π / N takes three roundings, at most 6π·u off;
# cos and sin add 1 ulp (≤ u below 1); the norm factor N**-e (pow, 1 ulp ≤ 2u relative) and its product another
# 3u: |Ĉ − C|, |Ŝ − S| ≤ 24u·N**-e. With |a| + |b| ≤ √2·|a + ib| the complex output of one dim is off by at most
#     N**-e · (Σ_j |e_j| + κ(N) · Σ_j (|x_j| + |e_j|)),  κ(N) = 2·(γ(2N) + 24u),
# where x_j is the exact input along the dim and e_j its error bound (from the dims already transformed; the
# exact map carries it on at most N**-e·Σ|e_j|). Dim after dim, from a float64 reference of the intermediates,
# that is an elementwise bound on the rewrite's error against exact arithmetic: torch.fft's own float32 error is
# no yardstick (pocketfft's is about half the rewrite's, and either can be the larger on one element).
_U = 2.0**-24
_NORM_EXPONENT = {("backward", True): 0.0, ("backward", False): 1.0, ("ortho", True): 0.5, ("ortho", False): 0.5,
                  ("forward", True): 1.0, ("forward", False): 0.0}  # torch.fft's norm: the factor N**-e  # fmt: skip


def _dft_with_bound(exact: torch.Tensor, error: torch.Tensor, dims: list[int], forward: bool,
                    norm: str = "backward") -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The float64 transform of ``exact`` along ``dims`` (one dim at a time, as the rewrite goes) and the bound on
    the float32 rewrite's error there, given ``error``, the bound on its input's (see above)."""
    for dim in dims:
        n = exact.shape[dim]
        scale, kappa = n ** -_NORM_EXPONENT[norm, forward], 2 * (2 * n * _U / (1 - 2 * n * _U) + 24 * _U)
        error = scale * (error.sum(dim, keepdim=True) + kappa * (exact.abs() + error).sum(dim, keepdim=True))
        error = error.expand(exact.shape)
        exact = (torch.fft.fft if forward else torch.fft.ifft)(exact, dim=dim, norm=norm)
    return exact, error


def assert_within_rounding(outputs: tuple[torch.Tensor, ...], x: torch.Tensor) -> None:
    """Each of FourierMixing's rewritten ``outputs`` for ``x`` lies within its float32 rounding bound of the exact
    values (float64, whose own error is some 1e-9 of the bound's)."""
    exact, none = x.double(), torch.zeros(x.shape, dtype=torch.float64)
    mixed, mixed_error = _dft_with_bound(exact, none, [1, 2], forward=True)
    ortho, ortho_error = _dft_with_bound(exact, none, [2], forward=True, norm="ortho")
    spectrum, spectrum_error = _dft_with_bound(exact, none, [0, 1, 2], forward=True)
    back, back_error = _dft_with_bound(0.5 * spectrum, 0.5 * spectrum_error, [0, 2], forward=False, norm="forward")
    inverse, inverse_error = _dft_with_bound(exact, none, [1], forward=False)
    expected = [(mixed.real, mixed_error), (ortho.imag, ortho_error),
                (torch.view_as_real(back), back_error.unsqueeze(-1).expand(*back.shape, 2)),
                (inverse.real, inverse_error)]  # fmt: skip
    for index, (got, (value, bound)) in enumerate(zip(outputs, expected, strict=True)):
        ratio = (got.double() - value).abs() / bound
        assert ratio.max() <= 1, (f"output {index}: {int((ratio > 1).sum())} of {ratio.numel()} elements over its "
                                  f"float32 rounding bound, up to {ratio.max():.3g} times")  # fmt: skip


def test_fourier_rewrite_matches_torch_fft():
    """Forward and inverse, real and complex inputs, each norm: the real-only graph computes torch.fft's values to
    within float32 rounding (the bound above, against float64)."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    program = torch.export.export(FourierMixing(), (x,))
    assert sum(fourier_transform_as_matmuls(program.graph_module, node) for node in list(program.graph.nodes)) == 5
    assert split_complex_arithmetic(program.graph_module, program) > 0
    assert not any(_is_complex_node(node) for node in program.graph.nodes)
    assert_within_rounding(program.module()(x), x)



def test_fourier_rewrite_keeps_a_dynamic_length_symbolic():
    """Exported with a dynamic batch and length, the tables follow N: the graph computes torch.fft's values, to
    within float32 rounding, at a length other than the sample's."""
    torch.manual_seed(0)
    dims = {"x": {0: torch.export.Dim("batch", max=4), 1: torch.export.Dim("length", min=2, max=64)}}
    program = torch.export.export(FourierMixing(), (torch.randn(2, 8, 32),), dynamic_shapes=dims)
    assert sum(fourier_transform_as_matmuls(program.graph_module, node) for node in list(program.graph.nodes)) == 5
    split_complex_arithmetic(program.graph_module, program)
    other = torch.randn(3, 13, 32)
    assert_within_rounding(program.module()(other), other)


@pytest.mark.parametrize("wrong", ["a table one sample off", "the sine's sign flipped"])
def test_the_fourier_rounding_bound_rejects_a_wrong_table(wrong: str, monkeypatch: pytest.MonkeyPatch):
    """The bound is tight enough to matter: tables one column off (k+1 for k) or with the sine's sign flipped
    exceed it a thousandfold and more, where the correct rewrite's rounding errors stay under 1/16 of it."""
    correct, aten = fourier_transform_as_matmuls.__globals__["_dft_tables"], torch.ops.aten

    def broken(emit, *args):
        cosine, sine = correct(emit, *args)
        if wrong == "a table one sample off":
            return emit(aten.roll.default, cosine, [1], [1]), emit(aten.roll.default, sine, [1], [1])
        return cosine, emit(aten.neg.default, sine)

    monkeypatch.setitem(fourier_transform_as_matmuls.__globals__, "_dft_tables", broken)
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    program = torch.export.export(FourierMixing(), (x,))
    assert sum(fourier_transform_as_matmuls(program.graph_module, node) for node in list(program.graph.nodes)) == 5
    split_complex_arithmetic(program.graph_module, program)
    with pytest.raises(AssertionError, match=r"over its float32 rounding bound"):
        assert_within_rounding(program.module()(x), x)


def _is_complex_node(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.dtype.is_complex


class FNetMixer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fftn(self.proj(x), dim=(1, 2)).real


def test_executorch_needs_fft_as_matmuls(executorch_needs):
    torch.manual_seed(0)
    fixed = executorch_needs(
        FNetMixer(), {"x": torch.randn(2, 8, 16)}, "_fix_fft_not_core_aten", r"aten\._fft_c2c\.default is not in Core ATen opset"
    )
    assert fixed.metadata.workarounds_fired["_fix_complex_rotary_for_executorch"] == 1  # it carried the pair on


def test_executorch_needs_fft_as_matmuls_with_a_dynamic_sequence(executorch_needs):
    """FNet exported with a dynamic sequence: the .pte matches eager at the sample and at a second length."""
    torch.manual_seed(0)
    shapes = {"x": {1: torch.export.Dim("sequence", min=2, max=16)}}
    fixed = executorch_needs(
        FNetMixer(), {"x": torch.randn(2, 8, 16)}, "_fix_fft_not_core_aten",
        r"aten\._fft_c2c\.default is not in Core ATen opset", dynamic_shapes=shapes,
    )  # fmt: skip
    assert [shape.status for shape in fixed.validation.shapes] == ["pass", "pass"]


# ── vmap-built attention masks ──
def test_broadcast_mask_is_the_vmap_mask():
    from transformers.masking_utils import _vmap_expansion_sdpa

    from exporters.masks import broadcast_expansion

    function = or_masks(causal_mask_function, lambda b, h, q, kv: kv < 2)
    ranges = (torch.arange(2), torch.arange(1), torch.arange(5) + 1, torch.arange(6))
    assert torch.equal(broadcast_expansion(function)(*ranges), _vmap_expansion_sdpa(function)(*ranges))


def test_onnx_needs_vmap_masks_built_by_broadcasting():
    """Gemma 3's image-block mask (an ``or_mask_function``): the ledger's gemma3-vision-mask-vmap-decompose case.

    A small module with the same mask construction exports fine without the patch: the decomposition failure
    needs the model's own graph, so this one exports the tiny model (built directly, past the ledger's skip).
    """
    tiny = build_tiny("Gemma3Model")
    fixed = OnnxExporter(OnnxConfig()).export(tiny.model, tiny.inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_patch_vmap_mask_expansion_for_onnx"] >= 1
    assert fixed.validation.status == "pass", fixed.validation.problems()
    without = OnnxConfig(without=frozenset({"_patch_vmap_mask_expansion_for_onnx"}))
    with pytest.raises(Exception, match=r"(?s)decompose|vmap"):
        OnnxExporter(without).export(tiny.model, tiny.inputs)


# ── The classes the sweep found, exported whole (slow: run by hand, `pytest -m slow`) ──
@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "backend", "workaround", "failure"),
    [
        ("NemotronAsrStreamingEncoder", "executorch", "_patch_vmap_mask_expansion_for_executorch", r"vmap"),
        ("Llama4TextModel", "executorch", "_fix_complex_rotary_for_executorch", r"(?i)complex"),
        ("Llama4TextModel", "onnx", "_fix_complex_rotary_for_onnx", r"convert the exported program"),
        ("FlintModel", "executorch", "_patch_moe_experts_batched_mm", r"not in Core ATen opset"),
        ("MixtralModel", "executorch", "_patch_moe_experts_batched_mm", r"not in Core ATen opset"),
    ],
)
def test_swept_classes_pass_with_the_workaround_and_fail_without(model, backend, workaround, failure):
    from bot.outcome import ExportRequest
    from bot.run.runner import export_one

    fixed = export_one(ExportRequest(model, backend, ignore_ledger=("all",)))
    assert fixed.status == "pass", fixed.error
    assert fixed.workarounds_fired[workaround] >= 1
    without = export_one(ExportRequest(model, backend, without=(workaround,), ignore_ledger=("all",)))
    assert without.status != "pass" and re.search(failure, without.error or ""), without.error


@pytest.mark.slow
def test_mixtral_aux_loss_without_attention_mask_needs_histc_counted_by_compares(executorch_needs):
    """``load_balancing_loss_func`` counts tokens per expert with ``histc`` when no attention mask is given."""
    tiny = build_tiny("MixtralForCausalLM")
    tiny.model.config.output_router_logits, tiny.model.config.use_cache = True, False
    tiny.inputs.pop("attention_mask", None)
    fixed = executorch_needs(
        tiny.model, tiny.inputs, "_fix_histc_not_core_aten", r"aten\.histc\.default is not in Core ATen opset"
    )
    assert "aux_loss" in fixed.metadata.output_names


# ── _is_all_true (torch_compilable_check on a tensor condition) ──
class TensorChecked(torch.nn.Module):
    """Checks a tensor condition as transformers' ``torch_compilable_check`` does under tracing (Llava's
    placeholder count: a 0-d bool tensor into ``torch._check_tensor_all``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check_tensor_all((x > -1e9).sum() * 4 == x.numel() * 4)
        return x * 2


def test_tensor_check_removal_drops_only_the_assertion():
    from exporters.fx_rewrites import drop_tensor_check

    program = torch.export.export(TensorChecked(), (torch.randn(3, 4),))
    assert "_is_all_true" in program.graph_module.code and "_assert_scalar" in program.graph_module.code
    removed = sum(drop_tensor_check(program.graph_module, node) for node in list(program.graph.nodes))
    program.graph_module.recompile()
    assert removed == 1
    assert "_is_all_true" not in program.graph_module.code and "sym_ite" not in program.graph_module.code
    x = torch.randn(3, 4)
    assert torch.equal(program.graph_module(x)[0], x * 2)


def test_executorch_needs_tensor_checks_dropped(executorch_needs):
    model, inputs = TensorChecked(), {"x": torch.randn(3, 4)}
    fixed = executorch_needs(
        model, inputs, "_fix_tensor_check_not_core_aten", r"aten\._is_all_true\.default is not in Core ATen opset"
    )
    assert fixed.metadata.workarounds_fired["_fix_tensor_check_not_core_aten"] == 1
