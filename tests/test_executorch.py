"""ExecutorchExporter: real XNNPACK lowerings validated in the ExecuTorch runtime, bounds, backend errors.

Each (model, dynamic) pair is lowered at most once per session (``et_export``): a lowering costs 10-40 s.
The default suite lowers tiny BertModel static and tiny LlamaForCausalLM dynamic; heavier models are slow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_patches_dynamo import CodebookRows
from torch.export import Dim

from exporters.executorch import exporter as exporter_executorch
from exporters.executorch.exporter import (
    DEFAULT_MAX_BATCH,
    BackendUnavailableError,
    ExecutorchConfig,
    ExecutorchExporter,
    UnboundedDimError,
)
from exporters.executorch.symbolic import LoweringSpecialisedError
from exporters.tiny import build_tiny
from exporters.utils import all_workarounds


def test_static_bert_runs_in_executorch_runtime_and_matches_eager(et_export):
    result = et_export("BertModel", False)
    report = result.validate(raise_on_failure=False)
    assert report.status == "pass", report.problems()
    assert len(report.shapes) == 1
    assert set(report.max_abs_diff) == set(result.metadata.output_names) == {"last_hidden_state", "pooler_output"}
    assert all(diff <= 1e-4 for diff in report.max_abs_diff.values())
    assert result.metadata.dynamic is False and result.metadata.dynamic_dims == {}
    seconds = result.metadata.stage_seconds
    assert {"torch.export", "to_edge_transform_and_lower", "to_executorch", "metadata", "total"} <= set(seconds)
    parts = sum(v for k, v in seconds.items() if k not in {"total", "validation"})
    assert parts == pytest.approx(seconds["total"] - seconds.get("validation", 0.0), abs=2e-3)


def test_dynamic_llama_records_bounds_and_validates_a_second_shape(et_export):
    result = et_export("LlamaForCausalLM", True)
    report = result.validate(raise_on_failure=False)
    assert report.status == "pass", report.problems()
    sample, second = report.shapes
    assert second.label == "second shape" and second.input_shapes["input_ids"] != sample.input_shapes["input_ids"]
    assert len(report.max_abs_diff) == len(result.metadata.output_names) > 1  # logits and the cache tensors
    dims = result.metadata.dynamic_dims["input_ids"]
    assert dims["0"]["max"] == DEFAULT_MAX_BATCH
    assert 2 < dims["1"]["max"] <= result.model.config.max_position_embeddings
    assert result.metadata.dynamic is True
    assert result.metadata.config["max_batch"] == DEFAULT_MAX_BATCH


def test_dynamic_bounds_hold_at_the_maximum_and_are_enforced_above_it(et_export):
    """E2 (../shared/reference/stack.md): bounded dims run across the range; the max is a hard runtime limit."""
    result = et_export("LlamaForCausalLM", True)
    max_sequence = result.metadata.dynamic_dims["input_ids"]["1"]["max"]
    largest = build_tiny("LlamaForCausalLM", batch=DEFAULT_MAX_BATCH, sequence=max_sequence).inputs
    with torch.no_grad():
        expected = result.model(**largest).logits
    assert torch.allclose(result.run_artifact(largest)[0], expected, atol=1e-4, rtol=1e-3)
    too_large = build_tiny("LlamaForCausalLM", batch=DEFAULT_MAX_BATCH + 1, sequence=4).inputs
    with pytest.raises(RuntimeError):
        result.run_artifact(too_large)


def test_saved_pte_loads_from_file_and_runs(et_export, tmp_path: Path, matches_eager):
    from executorch.runtime import Runtime

    result = et_export("BertModel", False)
    files = result.save(tmp_path)
    assert files["artifact"].name == "model.pte" and files["artifact"].stat().st_size > 0
    program = Runtime.get().load_program(files["artifact"])
    method = program.load_method("forward")
    shape = matches_eager(result, lambda kw: list(method.execute(list(kw.values()))))
    assert [c.name for c in shape.outputs] == ["last_hidden_state", "pooler_output"]


def test_gpt2_needs_the_strided_reshape_fix_and_it_fires(executorch_needs):
    """pytorch/pytorch#141107: lowering re-decomposes SDPA into another layout; GPT-2's Conv1D view then fails.

    ``use_cache=False`` keeps the check on the attention path alone (no cache outputs to carry).
    """
    tiny = build_tiny("GPT2LMHeadModel")
    tiny.model.config.use_cache = False
    executorch_needs(tiny.model, tiny.inputs, "_fix_strided_reshape_input", "Cannot view a tensor with shape")


class AfmoeAttentionTail(torch.nn.Module):
    """Afmoe's attention tail: SDPA's strided output reshaped to its own shape, transposed back and viewed."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        q, k, v = (proj(x).view(2, 8, 4, 8).transpose(1, 2) for proj in (self.q, self.k, self.v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v).reshape(2, -1, 8, 8).transpose(1, 2)
        return out.view(2, 8, -1)


def test_strided_reshape_fix_keeps_a_later_view_of_a_transpose_valid():
    """The reshape's contiguous input changes the transposed layout; without the view's own contiguous the
    lowering fails with ``Cannot view a tensor with shape torch.Size([2, 8, 4, 8]) and strides (256, 8, 64, 1)``
    (AfmoeModel in ExecuTorch static shard 3)."""
    torch.manual_seed(0)
    result = ExecutorchExporter(ExecutorchConfig()).export(AfmoeAttentionTail(), {"x": torch.randn(2, 8, 32)}, validate=True)
    assert result.metadata.workarounds_fired["_fix_strided_reshape_input"] == 2  # the reshape and the view
    assert result.validation.status == "pass", result.validation.problems()


class ReassignedTable(torch.nn.Module):
    """CTRL's positional table: a non-persistent buffer re-assigned in forward (``.to``), then indexed."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.pos_encoding = torch.nn.Buffer(torch.randn(32, 8), persistent=False)

    def forward(self, input_ids):
        self.pos_encoding = self.pos_encoding.to(dtype=torch.float32)  # a mutation, to torch.export
        return self.emb(input_ids) + self.pos_encoding[torch.arange(input_ids.shape[1])]


def test_a_mutated_buffer_keeps_its_initial_value_in_the_pte():
    """ExecuTorch serializes a mutated buffer without its values unless told; this one's values are read, so
    without ``backend_config`` (exporters.executorch.program) every output element is off (max abs diff 1.95; CTRLModel in shard 3)."""
    torch.manual_seed(0)
    result = ExecutorchExporter(ExecutorchConfig()).export(
        ReassignedTable(), {"input_ids": torch.randint(0, 16, (2, 8))}, validate=True
    )
    assert result.validation.status == "pass", result.validation.problems()


class NonPersistentTable(torch.nn.Module):
    """A non-persistent buffer (a lifted constant) that an XNNPACK matmul consumes, as a speaker embedding is."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(4, 6), persistent=False)

    def forward(self, x):
        return x @ self.table


def test_lowering_leaves_the_exported_program_whole():
    """Delegation drops the constants it moved into the delegate from the program it lowers; lowered in place,
    torch.export's program then cannot make a module (KeyError 'table'), and the second validation shape, whose
    guards come from that module, fails (Nemotron3_5TranscribeAudioModel, OneFormer, dynamic)."""
    torch.manual_seed(0)
    result = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(
        NonPersistentTable(), {"x": torch.randn(2, 8, 4)}, validate=True
    )
    assert result.validation.status == "pass", result.validation.problems()
    assert [shape.label for shape in result.validation.shapes] == ["sample shape", "second shape"]
    x = torch.ones(3, 8, 4)
    assert torch.equal(result.program.module()(x=x), result.model(x))


class TanhGelu(torch.nn.Module):
    """Gemma's MLP activation (``gelu_pytorch_tanh``) behind a Linear, so XNNPACK takes the whole graph."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x), approximate="tanh")


def test_xnnpack_needs_tanh_gelu_spelled_out_and_only_xnnpack_gets_it():
    """pytorch/executorch#22851: XNNPACK runs gelu(approximate="tanh") as exact GELU, up to ~5e-4 off."""
    torch.manual_seed(0)
    model, inputs = TanhGelu(), {"x": torch.randn(4, 64) * 3}
    fixed = ExecutorchExporter(ExecutorchConfig()).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired == {"_fix_tanh_gelu_for_xnnpack": 1}
    assert max(fixed.validation.max_abs_diff.values()) < 1e-5
    without = ExecutorchConfig(without=frozenset({"_fix_tanh_gelu_for_xnnpack"}))
    report = ExecutorchExporter(without).export(model, inputs).validate(raise_on_failure=False)
    assert report.status == "mismatch" and max(report.max_abs_diff.values()) > 1e-4
    assert exporter_executorch._fix_tanh_gelu_for_xnnpack.__name__ in {
        w.name for w in all_workarounds() if w.backend == "executorch.xnnpack"
    }


class TrailingUnsqueeze(torch.nn.Module):
    """``unsqueeze(-1)`` of a (batch, sequence)-dynamic activation, as in Cohere's rotary embedding."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(x).unsqueeze(-1) * 2.0


class SeparableConv(torch.nn.Module):
    """A depthwise 1-d convolution over (batch, channels, sequence), as in ConvBERT's span-based conv."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        return self.conv(x) * 2.0


@pytest.mark.parametrize(
    ("model", "example", "dims"),
    [(TrailingUnsqueeze, (2, 6, 8), (0, 1)), (SeparableConv, (2, 8, 6), (0, 2))],
    ids=["unsqueeze", "conv1d"],
)
def test_xnnpack_keeps_reshaped_nodes_with_two_dynamic_dims_out_of_the_delegate(model, example, dims):
    model, inputs = model(), {"x": torch.randn(*example)}
    shapes = {"x": {dims[0]: Dim("batch", min=1, max=4), dims[1]: Dim("sequence", min=2, max=16)}}
    fixed = ExecutorchExporter(ExecutorchConfig(dynamic_shapes=shapes)).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_patch_xnnpack_reshape_one_dynamic_dim"] >= 1
    assert len(fixed.validation.shapes) == 2  # the sample shape and a second one
    without = ExecutorchConfig(dynamic_shapes=shapes, without=frozenset({"_patch_xnnpack_reshape_one_dynamic_dim"}))
    with pytest.raises(RuntimeError, match="XNNPACK reshape only supports 1 dynamic dimension"):
        ExecutorchExporter(without).export(model, inputs)


def test_dynamic_only_xnnpack_patch_costs_a_static_export_nothing():
    """Scoped to ``executorch.xnnpack.dynamic``: a static export neither installs nor runs it, and delegates
    the same nodes as an export without it."""
    model, inputs = TrailingUnsqueeze(), {"x": torch.randn(2, 6, 8)}
    static = ExecutorchExporter(ExecutorchConfig()).export(model, inputs, validate=True)
    assert "_patch_xnnpack_reshape_one_dynamic_dim" not in static.metadata.workarounds_fired
    assert static.validation.status == "pass"
    bare = ExecutorchConfig(without=frozenset({"_patch_xnnpack_reshape_one_dynamic_dim"}))
    assert static.artifact.buffer == ExecutorchExporter(bare).export(model, inputs).artifact.buffer


class FlatTokenSplit(torch.nn.Module):
    """Tokens flattened into rows, then a fused projection chunked in two: a MoE ``batched_mm`` expert's
    ``gate_up.chunk(2, dim=-1)`` on ``[tokens * top_k, 2 * intermediate]`` rows, whose dim 0 is dynamic."""

    def __init__(self):
        super().__init__()
        self.gate_up = torch.nn.Linear(8, 16)

    def forward(self, x):
        gate, up = self.gate_up(x.reshape(-1, 8)).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * up).reshape(x.shape[0], -1, 8)


def test_edge_verifier_keeps_a_dynamic_dim_split_by_a_list_returning_op():
    """``to_edge``'s dtype check specialised the sequence dim to the sample's 8 (in the traced program too);
    with the patch the export stays dynamic and validates at a second shape. Without it the export fails and
    names the dim, where it used to give a ``.pte`` that accepted the sample's shape only."""
    model, inputs = FlatTokenSplit(), {"x": torch.randn(2, 8, 8)}
    shapes = {"x": {1: Dim("sequence", min=2, max=16)}}
    fixed = ExecutorchExporter(ExecutorchConfig(dynamic_shapes=shapes)).export(model, inputs, validate=True)
    assert fixed.metadata.workarounds_fired["_patch_edge_dtype_check_specialising_list_returns"] >= 1
    assert fixed.metadata.dynamic_dims["x"]["1"]["max"] == 16
    assert [shape.status for shape in fixed.validation.shapes] == ["pass", "pass"]
    without = frozenset({"_patch_edge_dtype_check_specialising_list_returns"})
    with pytest.raises(LoweringSpecialisedError, match=r"specialised x dim 1, which torch.export kept dynamic"):
        ExecutorchExporter(ExecutorchConfig(dynamic_shapes=shapes, without=without)).export(model, inputs)



class SplitByRoutedCounts(torch.nn.Module):
    """Rows split by per-expert counts read from the data: JetMoE's ``inputs.split(expert_size, dim=0)``,
    whose piece sizes are unbacked symbols even in a static export."""

    def forward(self, x, route):
        counts = torch.stack([(route == expert).sum() for expert in range(2)]).tolist()
        first, second = x[route.argsort()].split(counts, dim=0)
        return first.sum(0) * 2 + second.sum(0)


def test_edge_verifier_accepts_a_static_split_by_data_dependent_sizes(executorch_needs):
    """In a static export the split's first piece has an unbacked dim 0, and the dtype check's ``len()`` on it
    fails the lowering (``Could not extract specialized integer``); with the patch the .pte matches eager."""
    inputs = {"x": torch.randn(6, 4), "route": torch.tensor([1, 0, 1, 1, 0, 1])}
    executorch_needs(
        SplitByRoutedCounts(), inputs, "_patch_edge_dtype_check_specialising_list_returns",
        r"Could not extract specialized integer from data-dependent expression",
    )  # fmt: skip

def test_cuda_without_a_gpu_fails_clearly_before_any_work(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = torch.nn.Linear(4, 4)  # left in training mode: any work on it would call eval() first
    with pytest.raises(BackendUnavailableError) as caught:
        ExecutorchExporter(ExecutorchConfig(backend="cuda")).export(model, {"input": torch.randn(2, 4)})
    assert isinstance(caught.value, ValueError)
    assert "cuda" in str(caught.value) and "\n" not in str(caught.value)
    assert model.training and next(model.parameters()).device.type == "cpu"


def test_unknown_backend_is_rejected_with_the_known_ones():
    with pytest.raises(ValueError, match="cuda, xnnpack"):
        ExecutorchConfig(backend="vulkan-typo")


def test_unbounded_user_dims_are_rejected_before_lowering():
    config = ExecutorchConfig(dynamic_shapes={"input": {0: Dim.AUTO}})
    with pytest.raises(UnboundedDimError, match="input dim 0"):
        ExecutorchExporter(config).export(torch.nn.Linear(4, 4), {"input": torch.randn(2, 4)})


def test_stage_banners_are_in_order_with_their_functions():
    source = Path(exporter_executorch.__file__).read_text()
    banners = [(int(m[1]), m.start()) for m in re.finditer(r"^# ── Stage (\d+):", source, flags=re.M)]
    assert [number for number, _ in banners] == [1, 2, 3, 4, 5, 6]
    starts = dict(banners)
    ends = {n: starts.get(n + 1, len(source)) for n in starts}
    for stage, name in [
        (1, "prepare_for_xnnpack"), (1, "prepare_for_cuda"), (1, "register_backend"),
        (2, "installed_executorch_patches"), (4, "apply_program_fixes"), (5, "apply_node_fixes"),
    ]:
        position = source.index(f"\ndef {name}(")
        assert starts[stage] < position < ends[stage], (stage, name)
    assert {
        "xnnpack": exporter_executorch.prepare_for_xnnpack, "cuda": exporter_executorch.prepare_for_cuda,
    } == exporter_executorch._BACKEND_PREPARE


SLOW = [
    ("ViTForImageClassification", False),
    ("T5ForConditionalGeneration", False),
    ("BertModel", True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "dynamic"), SLOW, ids=[f"{n}-{'dynamic' if d else 'static'}" for n, d in SLOW])
def test_more_models_validate_in_executorch_runtime(et_export, name, dynamic):
    report = et_export(name, dynamic).validate(raise_on_failure=False)
    assert report.status == "pass", report.problems()
    assert len(report.shapes) == (2 if dynamic else 1)


def test_a_dynamic_lowering_is_validated_at_a_second_shape_its_guards_allow():
    """Was: MusicgenMelodyForConditionalGeneration's second shape had 7 decoder rows (4 codebooks: eager failed),
    because torch builds no guards for ``program.module()`` called from a file named like exporter_executorch.py."""
    inputs = {"input_ids": torch.randint(0, 9, (8, 5))}
    result = ExecutorchExporter(ExecutorchConfig(dynamic=True)).export(CodebookRows(), inputs, validate=True)
    rows, length = result.second_inputs["input_ids"].shape
    assert rows % 4 == 0 and (rows, length) != (8, 5)
    assert result.validation.status == "pass"
