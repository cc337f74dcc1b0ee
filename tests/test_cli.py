"""`exportbot` as a user meets it: real exports, one-line errors with exit code 2, JSON summaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli.main import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, timeout=300)


def test_export_dynamo_writes_artifact_and_summary(tmp_path: Path):
    result = CliRunner().invoke(main, ["export", "BertModel", "--dynamic", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["validation"]["status"] == "pass"
    assert len(summary["validation"]["shapes"]) == 2
    assert summary["metadata"]["versions"]["torch"].split("+")[0] == "2.13.0"  # the CPU wheel says 2.13.0+cpu
    assert (tmp_path / "model.pt2").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "NoSuchModel"], "'NoSuchModel' is not a transformers model class"),
        (["export", "./missing-dir"], "./missing-dir: no such directory"),
        (["export", "BertModel", "--backend", "tflite"], "Invalid value for '--backend'"),
        (["export", "BertModel", "--without", "_patch_typo"], "no workaround named '_patch_typo'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    completed = run(*args)
    assert completed.returncode == 2
    assert message in completed.stderr
    assert "Traceback" not in completed.stderr


def test_directory_without_config_is_rejected(tmp_path: Path):
    completed = run("export", str(tmp_path))
    assert completed.returncode == 2 and "no readable config.json" in completed.stderr


def test_local_checkpoint_directory_exports_offline(tmp_path: Path):
    from exporters.tiny import build_tiny

    build_tiny("GPT2LMHeadModel").model.save_pretrained(tmp_path / "ckpt")
    result = CliRunner().invoke(main, ["export", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["metadata"]["model_class"] == "GPT2LMHeadModel"


def test_list_workarounds_json_names_upstream():
    result = CliRunner().invoke(main, ["list-workarounds", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["_fix_reshape_of_strided"]["upstream"] == "https://github.com/pytorch/pytorch/issues/141107"
    assert rows["_fix_reshape_of_strided"]["kind"] == "fx_node_fix"


def test_help_teaches_with_examples():
    result = CliRunner().invoke(main, ["--help"])
    assert "exportbot export LlamaForCausalLM --backend onnx --dynamic" in result.output
