"""The pure parts behind `exportbot export`'s options and messages: no export runs here."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from bot.cli.terminal import short_link, short_target
from bot.errors import caused_by, first_line, hint_for, innermost_line
from exporters.export_options import DynamicDim, ExportOptions, OptionError, class_for_task, task_of
from exporters.stages import quiet_native_noise, stage_events


def test_dynamic_dim_parses_both_forms_and_prints_back():
    assert DynamicDim.parse("input_ids:1") == DynamicDim("input_ids", 1)
    assert DynamicDim.parse("pixel_values:2:32:256") == DynamicDim("pixel_values", 2, 32, 256)
    assert str(DynamicDim.parse("x:0::16")) == "x:0::16"
    with pytest.raises(OptionError, match="expected NAME:AXIS"):
        DynamicDim.parse("x:one")


def test_tolerances_follow_the_dtype_unless_given():
    inputs = {"input_ids": torch.zeros(2, 8, dtype=torch.long)}
    assert ExportOptions().exporter_settings("onnx", False, inputs) == {}  # the backend's own
    assert ExportOptions(dtype="bfloat16").exporter_settings("onnx", False, inputs) == {"atol": 5e-2, "rtol": 5e-2}
    assert ExportOptions(dtype="float16", rtol=0.1).exporter_settings("dynamo", False, inputs) == {
        "atol": 1e-2, "rtol": 0.1}


def test_bounds_shape_the_spec_only_where_asked():
    from torch.export import Dim

    inputs = {"input_ids": torch.zeros(2, 8, dtype=torch.long), "pixel_values": torch.zeros(2, 3, 4, 4)}
    spec = ExportOptions(max_sequence=64).dynamic_shapes("onnx", True, inputs)
    assert spec["input_ids"][1].max == 64 and spec["input_ids"][0] is Dim.AUTO
    assert 1 not in spec["pixel_values"] or spec["pixel_values"][1] is Dim.AUTO  # not a token sequence
    custom = ExportOptions(dynamic_dims=(DynamicDim("pixel_values", 2, 2, 8),)).dynamic_shapes("dynamo", False, inputs)
    assert custom["input_ids"] is None and list(custom["pixel_values"]) == [2]
    assert ExportOptions(max_batch=4).dynamic_shapes("executorch", True, inputs) is None  # ExecutorchConfig bounds it


def test_tasks_map_config_classes_to_heads_and_back():
    import transformers

    assert class_for_task(transformers.BertConfig, "token-classification") == "BertForTokenClassification"
    assert class_for_task(transformers.WhisperConfig, "automatic-speech-recognition") == "WhisperForConditionalGeneration"
    assert class_for_task(transformers.Wav2Vec2Config, "automatic-speech-recognition") == "Wav2Vec2ForCTC"
    with pytest.raises(OptionError, match="ViTConfig has no text-generation model; its tasks: feature-extraction"):
        class_for_task(transformers.ViTConfig, "text-generation")
    assert task_of("T5ForConditionalGeneration") == "text2text-generation" and task_of("NotAClass") is None


def test_innermost_cause_is_one_informative_line():
    try:
        try:
            raise ValueError("Constraints violated (x)! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
                             "  - You marked x as dynamic but your code specialized it to be a constant (8).\n" + "g" * 9000)
        except ValueError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as error:
        line = innermost_line(error)
    assert line == "ValueError: Constraints violated (x)! You marked x as dynamic but your code specialized it to be a constant (8)."
    assert caused_by("RuntimeError", line) == f"RuntimeError ← {line}"
    assert len(first_line("x" * 5000)) == 240
    assert hint_for(line, "torch.export") .startswith("the model fixes a dim you made dynamic")
    assert hint_for("anything", "partition/preprocess").startswith("an ExecuTorch lowering bug")


def test_short_links_and_targets():
    assert short_link("https://github.com/pytorch/executorch/pull/22851") == "pytorch/executorch#22851"
    assert short_link("https://example.com/x") == "https://example.com/x" and short_link(None) == "—"
    path = "executorch.backends.xnnpack.partition.config.gemm_configs.ConvolutionConfig.check_constraints"
    assert short_target(path) == "ConvolutionConfig.check_constraints"


def test_stage_events_name_the_innermost_stage_that_failed():
    seen = []

    class Model(torch.nn.Module):
        def forward(self, x):
            return x.nonzero().sum() if x.sum() > 0 else x  # data-dependent: torch.export refuses it

    failure = None
    with stage_events(seen.append) as stages:
        try:
            with stages.stage("exporting"):
                torch.export.export(Model(), (torch.ones(2),))
        except Exception as error:  # whichever torch raises for data-dependent control flow
            failure = error
    assert failure is not None
    assert seen == ["exporting", "torch.export"] and stages.failed == "torch.export"
    assert not hasattr(torch.export.export, "__wrapped__")  # unwrapped again


def test_native_noise_is_dropped_at_the_file_descriptor(capfd):
    with quiet_native_noise():
        os.write(2, b"[cpuinfo_utils.cpp:87] Failed to open midr file /sys/x\nkept line\n")
        os.write(2, b"partial frame\r")
        print("from python", file=sys.stderr, flush=True)
    err = capfd.readouterr().err
    assert "midr" not in err and "kept line\n" in err and "partial frame\r" in err and "from python" in err
