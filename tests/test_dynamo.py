"""DynamoExporter: each stage has a test that fails when the stage is removed; validation can fail."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from exporters import cache_pytree
from exporters.base import StageClock
from exporters.dynamo import exporter as exporter_dynamo
from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
from exporters.tiny import build_tiny
from exporters.validation import ValidationError


class KwargsOnly(torch.nn.Module):
    """A forward that takes only ``**kwargs``, like transformers' ``Unpack[TransformersKwargs]`` tails."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, **kwargs):
        return self.linear(kwargs["x"]) * kwargs["y"]


def test_stage1_flat_signature_exports_kwargs_only_forward_with_named_dynamic_shapes():
    model = KwargsOnly()
    inputs = {"x": torch.randn(3, 4), "y": torch.randn(3, 4)}
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(model, inputs, validate=True)
    assert result.metadata.input_names == ["x", "y"]
    assert result.validation.passed
    assert [s.label for s in result.validation.shapes] == ["sample shape", "second shape"]
    assert "forward" not in vars(model)  # the signature patch was taken away again


def test_stage1_is_needed(monkeypatch):
    import contextlib

    monkeypatch.setattr(exporter_dynamo, "flat_forward_signature", lambda *a: contextlib.nullcontext())
    with pytest.raises(Exception, match="dynamic_shapes"):
        DynamoExporter(DynamoConfig(dynamic=True)).export(KwargsOnly(), {"x": torch.randn(3, 4), "y": torch.randn(3, 4)})


@pytest.fixture(scope="module")
def tiny_llama():
    return build_tiny("LlamaForCausalLM")


def test_stage3_cache_and_model_output_round_trip(tiny_llama):
    result = DynamoExporter().export(tiny_llama.model, tiny_llama.inputs, validate=True)
    assert result.metadata.output_names[0] == "logits"
    assert "past_key_values.layers.0.keys" in result.metadata.output_names
    out = result.artifact.module()(**tiny_llama.inputs)
    assert type(out).__name__ == "CausalLMOutputWithPast"
    assert type(out.past_key_values).__name__ == "DynamicCache"


def test_stage3_is_needed(monkeypatch, tiny_llama):
    import torch.utils._pytree as pytree
    from transformers.cache_utils import DynamicCache, DynamicLayer

    monkeypatch.setattr(exporter_dynamo, "register_pytree_types", lambda model: None)
    for cls in (DynamicCache, DynamicLayer):  # forget the registration an earlier test made
        monkeypatch.delitem(pytree.SUPPORTED_NODES, cls, raising=False)
    with pytest.raises(Exception, match="DynamicCache"):
        DynamoExporter().export(tiny_llama.model, tiny_llama.inputs)


class SetsAttribute(torch.nn.Module):
    """Caches a tensor on itself inside forward (as some audio models do)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        self.last_output = y * 2
        return y


def test_stage5_no_fake_tensor_left_on_the_model():
    model = SetsAttribute()
    DynamoExporter().export(model, {"x": torch.randn(2, 4)})
    assert not isinstance(getattr(model, "last_output", None), FakeTensor)
    copy.deepcopy(model)(torch.randn(2, 4))


def test_stage5_is_needed(monkeypatch):
    import contextlib

    monkeypatch.setattr(exporter_dynamo, "cleaned_model_state", lambda model: contextlib.nullcontext())
    model = SetsAttribute()
    DynamoExporter().export(model, {"x": torch.randn(2, 4)})
    assert isinstance(model.last_output, FakeTensor)


def test_stage5_stateful_cache_attribute_emptied_for_trace_and_restored():
    class Cached(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cached_sequence_length = torch.tensor(99)

        def forward(self, x):
            return x + (0 if self.cached_sequence_length is None else self.cached_sequence_length)

    model = Cached()
    result = DynamoExporter().export(model, {"x": torch.zeros(2)})
    assert result.artifact.module()(x=torch.zeros(2)).tolist() == [0.0, 0.0]  # stale 99 not baked in
    assert model.cached_sequence_length.item() == 99


def test_stage4_dynamic_shapes_validated_at_a_second_shape(tiny_llama):
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(tiny_llama.model, tiny_llama.inputs, validate=True)
    first, second = result.validation.shapes
    assert first.input_shapes["input_ids"] != second.input_shapes["input_ids"]
    assert result.metadata.dynamic_dims["input_ids"]["1"]["min"] == 2
    assert second.status == "pass"


def test_stage4_is_needed(monkeypatch, tiny_llama):
    monkeypatch.setattr(exporter_dynamo, "dynamic_shapes_for", lambda inputs, config: None)
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(tiny_llama.model, tiny_llama.inputs)
    assert result.second_inputs is None  # a static program: nothing can move
    assert result.metadata.dynamic_dims == {}


def test_second_shape_inputs_are_made_only_when_read(monkeypatch):
    """An export that is not validated does not pay for the second-shape inputs; the first read makes them
    once, books their time in ``stage_seconds`` (and in ``total``), and validation uses them."""
    made = []
    real = exporter_dynamo.second_shape_inputs
    monkeypatch.setattr(exporter_dynamo, "second_shape_inputs", lambda *a: made.append(1) or real(*a))
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(KwargsOnly(), {"x": torch.randn(3, 4), "y": torch.randn(3, 4)})
    seconds = result.metadata.stage_seconds
    assert made == [] and "second-shape inputs" not in seconds
    total = seconds["total"]
    assert result.second_inputs["x"].shape[0] != 3
    assert made == [1] and seconds["total"] == pytest.approx(total + seconds["second-shape inputs"], abs=2e-4)
    report = result.validate()
    assert made == [1] and [s.label for s in report.shapes] == ["sample shape", "second shape"]


def test_validation_catches_a_wrong_artifact(monkeypatch, tiny_llama):
    """Validation runs the file loaded back from disk: a runner whose first output is off must fail it."""
    from exporters.bundle import runners

    real = runners.RUNNERS["torch.export"]

    def off_by_a_little(path, spec):
        run = real(path, spec)
        return lambda feed: [t + 1e-3 if i == 0 else t for i, t in enumerate(run(feed))]

    monkeypatch.setitem(runners.RUNNERS, "torch.export", off_by_a_little)
    result = DynamoExporter().export(tiny_llama.model, tiny_llama.inputs)
    with pytest.raises(ValidationError, match=r"logits: mismatch"):
        result.validate()


def test_degenerate_outputs_are_inconclusive_not_pass():
    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x * 1e-9

    report = DynamoExporter().export(Tiny(), {"x": torch.randn(2, 3)}).validate(raise_on_failure=False)
    assert report.status == "inconclusive"
    assert "near zero" in report.problems()[0]


def test_nondeterministic_eager_is_reported():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    report = DynamoExporter().export(Noisy(), {"x": torch.randn(2, 3)}).validate(raise_on_failure=False)
    assert report.status == "nondeterministic"


def _loaded_runner(path: Path):
    """The saved program, loaded back from disk, as a runner of flat output tensors."""
    import torch.utils._pytree as pytree

    module = torch.export.load(str(path)).module()
    return lambda kw: [t for t in pytree.tree_leaves(module(**kw)) if isinstance(t, torch.Tensor)]


def test_save_writes_pt2_and_summary(tmp_path: Path, tiny_llama, matches_eager):
    result = DynamoExporter().export(tiny_llama.model, tiny_llama.inputs, validate=True)
    files = result.save(tmp_path)
    loaded = torch.export.load(str(files["artifact"]))
    assert loaded.graph_signature.user_inputs == result.artifact.graph_signature.user_inputs
    assert len(matches_eager(result, _loaded_runner(files["artifact"])).outputs) > 1  # logits and the cache
    summary = files["summary"].read_text()
    assert '"status": "pass"' in summary and '"torch.export"' in summary


def test_stage_banners_are_in_order():
    source = Path(exporter_dynamo.__file__).read_text()
    numbers = [int(n) for n in re.findall(r"^# ── Stage (\d+):", source, flags=re.M)]
    assert numbers == [1, 2, 3, 4, 5, 6]


def test_stage3_specs_survive_deepcopy_and_int_leaves(tiny_llama):
    """ExecuTorch deep-copies output specs and re-flattens outputs whose tensors became ints."""
    import torch.utils._pytree as pytree

    DynamoExporter().export(tiny_llama.model, tiny_llama.inputs)
    with torch.no_grad():
        cache = tiny_llama.model(**tiny_llama.inputs).past_key_values
    leaves, spec = pytree.tree_flatten(cache)
    rebuilt = pytree.tree_unflatten(leaves, copy.deepcopy(spec))
    assert torch.equal(rebuilt.layers[1].values, cache.layers[1].values)
    as_ints = pytree.tree_unflatten(list(range(len(leaves))), spec)
    assert pytree.tree_flatten(as_ints)[1] == spec


def test_stage3_encoder_decoder_cache_context_saves_and_loads(tmp_path: Path, matches_eager):
    """EncoderDecoderCache keeps a dict with int keys in its context; a saved .pt2 must round-trip it."""
    tiny = build_tiny("T5ForConditionalGeneration")
    result = DynamoExporter().export(tiny.model, tiny.inputs)
    files = result.save(tmp_path)
    loaded = torch.export.load(str(files["artifact"]))
    out = loaded.module()(**tiny.inputs)
    assert out.past_key_values.is_updated == result.artifact.module()(**tiny.inputs).past_key_values.is_updated
    matches_eager(result, _loaded_runner(files["artifact"]))


def _symbolic_contexts(program: torch.export.ExportedProgram) -> list[str]:
    """Every SymInt/SymFloat/SymBool in the contexts of the program's output specs, as 'Class.attr'."""
    import torch.utils._pytree as pytree

    found, todo = [], [entry.signature.out_spec for entry in program.module_call_graph if entry.signature]
    while todo:
        spec = todo.pop()
        if isinstance(spec.context, list):
            found += [
                f"{spec.type.__name__}.{pair[0]}"
                for pair in spec.context
                if isinstance(pair, tuple) and isinstance(pair[-1], (torch.SymInt, torch.SymFloat, torch.SymBool))
            ]
        todo += [child for child in spec.children() if isinstance(child, pytree.TreeSpec)]
    return found


def test_stage3_dynamic_contexts_hold_no_symint_so_programs_copy_and_save(tmp_path: Path):
    """A sliding-window cache layer's cumulative_length is a SymInt while tracing dynamic shapes. In the
    output spec it broke every deepcopy of the module call graph (torch.onnx's and ExecuTorch's
    run_decompositions: 'Cannot access data pointer of Tensor') and saving the program."""
    tiny = build_tiny("Gemma2ForCausalLM")
    result = DynamoExporter(DynamoConfig(dynamic=True)).export(tiny.model, tiny.inputs)
    assert _symbolic_contexts(result.artifact) == []
    copy.deepcopy(result.artifact.module_call_graph)
    result.save(tmp_path, validate=False)
    # The context keeps the sample value (8) as a TracedInt with its expression, which the bundle's loader
    # recomputes: the rebuilt cache equals eager's at the second length too (tests/test_bundle.py).
    report = result.validate(raise_on_failure=False)
    assert [shape.status for shape in report.shapes] == ["pass", "pass"], report.problems()


def test_stage3_concrete_contexts_are_needed(monkeypatch):
    monkeypatch.setattr(cache_pytree, "_concrete", lambda value: value)
    tiny = build_tiny("Gemma2ForCausalLM")
    program = DynamoExporter(DynamoConfig(dynamic=True)).export_program(tiny.model, tiny.inputs, StageClock({}))
    assert "DynamicSlidingWindowLayer.cumulative_length" in _symbolic_contexts(program)
    with pytest.raises(RuntimeError, match="Cannot access data pointer"):
        copy.deepcopy(program.module_call_graph)


class FixedWidth(torch.nn.Module):
    """Its reshape pins dim 1 to 8: Dim.AUTO specialises it, only the batch stays symbolic."""

    def forward(self, x):
        return x.reshape(x.shape[0], 2, 4) * 2


def test_dims_specialised_by_dim_auto_are_not_reported_as_symbolic():
    """CanineModel's sequence dim came back as a SymInt with the constant expression 8; reported as a symbolic
    dim without bounds, ExecuTorch's bound check refused a program that had no unbounded dim."""
    shapes = {"x": {0: torch.export.Dim.AUTO(min=1, max=8), 1: torch.export.Dim.AUTO(min=1, max=64)}}
    result = DynamoExporter(DynamoConfig(dynamic_shapes=shapes)).export(FixedWidth(), {"x": torch.randn(3, 8)})
    ranges = exporter_dynamo.dynamic_dim_ranges(result.artifact)
    assert list(ranges["x"]) == ["0"] and ranges["x"]["0"]["max"] == 8


def test_second_shape_integer_inputs_keep_each_rows_structure():
    """LayoutLM's bbox rows are boxes (x0 <= x1, y0 <= y1) that index embeddings by their height and width;
    independent random draws made negative sizes and 'index out of range' at the second shape."""
    boxes = torch.tensor([[[1, 2, 5, 9], [0, 0, 3, 4], [2, 1, 2, 8]]])
    grown = exporter_dynamo._resample(boxes, [2, 4, 4], torch.Generator().manual_seed(0))
    assert grown.shape == (2, 4, 4)
    assert (grown[..., 2] >= grown[..., 0]).all() and (grown[..., 3] >= grown[..., 1]).all()
    assert {tuple(row) for row in grown.reshape(-1, 4).tolist()} == {tuple(row) for row in boxes[0].tolist()}


class PadToFour(torch.nn.Module):
    """A branch on ``width % 4`` (as Swin's maybe_pad): torch.export keeps it as a guard on the input."""

    def forward(self, x):
        if x.shape[1] % 4 != 0:
            x = torch.nn.functional.pad(x, (0, 4 - x.shape[1] % 4))
        return x.reshape(x.shape[0], -1, 4).sum(-1)


def test_second_shape_respects_the_programs_guards():
    """MaskFormer's dynamic ONNX 'mismatch' came from a second shape (33 × 33) that the exported program's
    own guards reject; the artifact was compared outside the shapes it was exported for."""
    shapes = {"x": {0: torch.export.Dim.AUTO(min=1, max=8), 1: torch.export.Dim.AUTO(min=2, max=64)}}
    result = DynamoExporter(DynamoConfig(dynamic_shapes=shapes)).export(PadToFour(), {"x": torch.randn(2, 8)})
    second = exporter_dynamo.second_shape_inputs(result.artifact, {"x": torch.randn(2, 8)})
    assert second["x"].shape == (3, 12)  # batch + 1; width to the next multiple of 4, not 9
    result.artifact.module()(**second)  # passes the guards


def test_a_guard_that_divides_by_zero_rejects_the_candidate():
    """Gemma4VisionModel's guards raised ZeroDivisionError for a candidate second shape, which ended the export
    instead of moving on to the next candidate (sweeps/causes.toml second-shape-guard-zero-division)."""

    def guards(x):
        return 8 // (x.shape[1] - 12)  # the guard's arithmetic, not an assertion, rejects width 12

    assert exporter_dynamo._passes(guards, {"x": torch.zeros(2, 8)})
    assert not exporter_dynamo._passes(guards, {"x": torch.zeros(2, 12)})


class KeepByNoise(torch.nn.Module):
    """ViTMAE's random_masking: ``noise`` (one value per patch) is sorted into the indices of the patches
    kept, so its length is tied to the patches only through values, which torch.export cannot see."""

    def forward(self, patches, noise):
        keep = torch.argsort(noise, dim=1)[:, :2]
        return torch.gather(patches, 1, keep.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))


def test_static_dims_keep_a_tied_axis_static_under_dim_auto():
    """Was: ViTMAEModel's ONNX dynamic export kept noise's length as a symbol of its own, so the second
    shape moved it alone and eager itself failed: ``index 16 is out of bounds for dimension 1 with size 16``."""
    inputs = {"patches": torch.randn(2, 4, 3), "noise": torch.rand(2, 4)}
    loose = DynamoExporter(DynamoConfig(dynamic=True)).export(KeepByNoise(), inputs)
    assert "1" in loose.metadata.dynamic_dims["noise"]  # what the builder's static_dims prevent
    tied = DynamoExporter(DynamoConfig(dynamic=True, static_dims={"noise": (1,)})).export(
        KeepByNoise(), inputs, validate=True)
    assert list(tied.metadata.dynamic_dims["noise"]) == ["0"]
    assert tied.validation.status == "pass" and len(tied.validation.shapes) == 2


def test_static_dims_must_name_an_axis_of_a_tensor_input():
    spec = {"noise": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}}
    inputs = {"noise": torch.rand(2, 4)}
    assert exporter_dynamo.without_static_dims(spec, inputs, {"noise": (1,)}) == {"noise": {0: torch.export.Dim.AUTO}}
    with pytest.raises(ValueError, match=r"'noise' axes \[2\]; the inputs have it as \[2, 4\]"):
        exporter_dynamo.without_static_dims(spec, inputs, {"noise": (2,)})
    with pytest.raises(ValueError, match="'nosie' axes"):
        exporter_dynamo.without_static_dims(spec, inputs, {"nosie": (1,)})
