"""What the CLI says: progress on stderr in a log too, honest component times, one-line errors with exit 2 for
bad bundles and bad choices, hints that follow from the options given, Ctrl-C recorded even where Python
swallows it, third-party warnings kept out, and the class a task picks said aloud."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import exporters
from bot.cli.main import main
from bot.errors import hint_for, options_given

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path, script: str | None = None) -> subprocess.CompletedProcess:
    """``exportbot ARGS`` in a fresh process whose stderr is a pipe (not a terminal), as in a CI log."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "bot", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


def test_a_generation_export_reports_progress_lines_and_honest_component_times(tmp_path: Path):
    result = run("export", "LlamaModel", "--task", "text-generation", "--backend", "onnx", "--out", "gen",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert lines[0] == "LlamaModel: --task text-generation exports its generating head, LlamaForCausalLM"
    stages = [re.fullmatch(r"\[\s*\d+\.\d+s\] LlamaForCausalLM: (.+)", line) for line in lines[1:]]
    assert all(stages), lines  # one plain line per stage: no spinner frames in a log
    names = [match.group(1) for match in stages]
    assert names[0] == "building model" and names[-1] == "validating"
    assert names.index("exporting prefill") < names.index("exporting decode") and "torch.onnx.export" in names
    seconds = json.loads((tmp_path / "gen" / "export.json").read_text())["stage_seconds"]
    rows = dict(re.findall(r"(prefill|decode)\s*│\s*pass\s*│\s*([\d.]+)", result.stdout))
    assert rows == {name: f"{seconds[f'{name}: total']:.1f}" for name in ("prefill", "decode")}  # not a sum of sums
    total = float(re.search(r"time: ([\d.]+)s in all", result.stdout).group(1))
    assert sum(map(float, rows.values())) <= total


SWALLOWED_CTRL_C = r"""
import os, signal, sys, time, weakref
import exporters.dynamo.exporter as dynamo

fix_program = dynamo.apply_program_fixes


class Traced:
    pass


def interrupt(_reference):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # KeyboardInterrupt lands here, in a weakref callback: Python prints "Exception ignored" and goes on


def fix_and_be_interrupted(program):  # as torch.export's tracer runs weakref callbacks while Ctrl-C is pressed
    fix_program(program)
    traced = Traced()
    reference = weakref.ref(traced, interrupt)
    del traced


dynamo.apply_program_fixes = fix_and_be_interrupted
from bot.cli.main import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("task", [[], ["--task", "text-generation"]], ids=["single-graph", "generation"])
def test_a_ctrl_c_that_python_swallowed_still_interrupts_and_is_recorded(tmp_path: Path, task):
    result = run("export", "LlamaForCausalLM", *task, "--out", "llama", cwd=tmp_path, script=SWALLOWED_CTRL_C)
    assert "Exception ignored" in result.stderr  # the interrupt really was swallowed where it landed
    assert result.returncode == 130, result.stderr[-2000:]
    assert not (tmp_path / "llama").exists()
    record = json.loads((tmp_path / "llama.failed.json").read_text())
    assert record["status"] == "interrupted" and record["failed_stage"]


def test_a_bad_choice_is_one_line_with_exit_2():
    result = CliRunner().invoke(main, ["export", "BertModel", "--backend", "onxx"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: Invalid value for '--backend': 'onxx' is not one of 'dynamo', 'onnx', 'executorch' "
        "(did you mean 'onnx'?)"]


def test_a_corrupted_artifact_is_one_line_naming_the_file(onnx_export, tmp_path: Path):
    onnx_export("BertModel", False).save(tmp_path / "bert")
    path = tmp_path / "bert" / "model.onnx"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(exporters.BundleError, match=r"model\.onnx: onnxruntime cannot load it \(InvalidProtobuf"):
        exporters.load(tmp_path / "bert")


def test_generate_on_a_corrupted_bundle_exits_2_in_one_line(tmp_path: Path):
    from bot.run.generation import export_generation

    export_generation("LlamaForCausalLM", "onnx", tmp_path / "gen", task="text-generation")
    shutil.copytree(tmp_path / "gen", tmp_path / "broken")
    decode = tmp_path / "broken" / "decode.onnx"
    decode.write_bytes(decode.read_bytes()[:1000])
    result = CliRunner().invoke(main, ["generate", str(tmp_path / "broken")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "decode.onnx: onnxruntime cannot load it" in result.output


def test_hints_follow_from_the_options_given():
    failure = "ConversionError: Cannot view a tensor with shape"
    assert "--no-optimize" in hint_for(failure, "torch.onnx.export")
    given = options_given(dynamic=False, optimize=False)
    assert "--no-optimize" not in hint_for(failure, "torch.onnx.export", "onnx", given)
    assert hint_for("data-dependent", "torch.export", "onnx", given) == "data-dependent control flow: see EXPORT_SKIPS in registry/"
    probe = hint_for(failure, "torch.onnx.export", "onnx", given, without=("_fix_reshape_of_strided",))
    assert probe.startswith("--without _fix_reshape_of_strided left out that workaround")


def test_third_party_warnings_are_kept_out_and_exportbots_are_not():
    script = (
        "import warnings\n"
        "from bot.cli.main import quiet_library_logs\n"
        "quiet_library_logs()\n"
        "warnings.warn_explicit('overflow in reduce', RuntimeWarning, 'op_run.py', 1, module='onnx.reference.op_run')\n"
        "warnings.warn_explicit('ours', UserWarning, 'base.py', 1, module='exporters.base')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert "overflow in reduce" not in result.stderr and "UserWarning: ours" in result.stderr


def test_a_dynamic_dim_export_is_named_dynamic_and_a_task_says_which_class(tmp_path: Path):
    result = run("export", "LlamaModel", "--dynamic-dim", "input_ids:1:2:32", "--dynamic-dim",
                 "attention_mask:1:2:32", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "LlamaModel-dynamo-dynamic" / "export.json").is_file()
    result = run("export", "BertModel", "--task", "fill-mask", "--out", "mlm", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.splitlines()[0] == "BertModel: --task fill-mask exports BertForMaskedLM"
