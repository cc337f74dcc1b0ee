"""torch.export patches (exporters/dynamo/patches.py): each export that needs one, with and without it."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from exporters.dynamo.exporter import DynamoConfig, DynamoExporter


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


def _rwkv_rescaling_every_block():
    """Tiny RWKV whose first inference call halves block 1's two rescaled weights (``rescale_every=1``; at the
    default of 6 the tiny model's two blocks divide by 1, and no comparison could see the update)."""
    from transformers import RwkvModel

    from exporters.tiny import build_tiny

    tiny = build_tiny("RwkvModel")
    tiny.model.config.rescale_every = 1
    torch.manual_seed(0)
    model = RwkvModel(tiny.model.config).eval()
    inputs = {"input_ids": tiny.inputs["input_ids"]}
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(copy.deepcopy(model)(**inputs))
    return model, inputs, expected


def _loaded_twice(program, inputs, tmp_path):
    """Two calls of the program saved to disk and loaded back, as a user runs the bundle's ``model.pt2``."""
    torch.export.save(program, tmp_path / "model.pt2")
    module = torch.export.load(tmp_path / "model.pt2").module()
    with torch.no_grad():
        return [torch.utils._pytree.tree_leaves(module(**inputs)) for _ in range(2)]


def _worst(outputs, expected):
    return max((got - want).abs().max().item() for got, want in zip(outputs, expected))


def _parameter_mutations(program):
    decomposed = program.run_decompositions()
    return [spec.target for spec in decomposed.graph_signature.output_specs if spec.kind.name == "PARAMETER_MUTATION"]


def test_a_parameter_updated_in_forward_is_computed_on_every_call_and_never_written_back(tmp_path):
    """Was: the ``.pt2`` divided RWKV's weights again on each call (call 2 was 1.38 off eager), and ExecuTorch
    returned the four updated weights as outputs (``model.pte returned 10 outputs; the manifest's output
    structure has 6``). Each call of the saved program now gives eager's answer and updates no parameter."""
    model, inputs, expected = _rwkv_rescaling_every_block()
    result = DynamoExporter(DynamoConfig()).export(model, inputs, validate=True)
    assert result.metadata.workarounds_fired["_fix_parameter_updated_in_forward"] == 1
    assert result.validation.status == "pass"
    first, second = _loaded_twice(result.program, inputs, tmp_path)
    assert _worst(first, expected) < 1e-5 and _worst(second, expected) < 1e-5
    assert _parameter_mutations(result.program) == []


def test_without_the_fix_a_parameter_update_is_repeated_on_every_call(tmp_path):
    model, inputs, expected = _rwkv_rescaling_every_block()
    without = frozenset({"_fix_parameter_updated_in_forward"})
    program = DynamoExporter(DynamoConfig(without=without)).export(model, inputs).program
    first, second = _loaded_twice(program, inputs, tmp_path)
    assert _worst(first, expected) < 1e-5 and _worst(second, expected) > 0.1
    assert _parameter_mutations(program) == [
        "blocks.0.attention.output.weight", "blocks.0.feed_forward.value.weight",
        "blocks.1.attention.output.weight", "blocks.1.feed_forward.value.weight"]


class CodebookRows(torch.nn.Module):
    """MusicgenMelody's decoder in miniature: ``input_ids.reshape(-1, 4, length)``, batch x 4 codebook rows in one
    dim, which torch.export keeps dynamic with a guard that the rows are a multiple of 4."""

    def forward(self, input_ids):
        return input_ids.reshape(-1, 4, input_ids.shape[-1]).float().mean(1)


def _run_as_if_from(path: str, source: str, scope: dict) -> dict:
    """Run ``source`` in a frame whose file is ``path``: torch's guard stopgap looks at callers' file paths."""
    exec(compile(source, path, "exec"), scope)
    return scope


def test_the_second_shape_keeps_the_guards_when_an_executorch_file_asks_for_it():
    """Was: the ExecuTorch exporter (exporters/executorch/exporter.py) got a guard-less ``program.module()`` from
    torch, so MusicgenMelodyForConditionalGeneration's second shape had 7 decoder rows and eager failed."""
    from exporters.dynamo.exporter import second_shape_inputs

    inputs = {"input_ids": torch.randint(0, 9, (8, 5))}
    program = DynamoExporter(DynamoConfig(dynamic=True)).export(CodebookRows(), inputs).program
    scope = _run_as_if_from("exporters/executorch/exporter.py", "module = program.module()\n"
                            "second = second_shape_inputs(program, inputs)",
                            {"program": program, "inputs": inputs, "second_shape_inputs": second_shape_inputs})
    assert not hasattr(scope["module"], "_guards_fn")  # torch's stopgap, which the patch is for
    rows, length = scope["second"]["input_ids"].shape
    assert rows % 4 == 0 and (rows, length) != (8, 5)
    program.module()(**scope["second"])  # passes the guards
