"""``sweep run --task text-generation``: a generation export per class, recorded like any sweep record, and
the generation column of the coverage report.

One real export (the tiny Llama, ONNX, through the sweep's warm worker and forked child) and one class a
``generate``-scope ledger entry gates (recorded ``skipped``, never run), then ``sweep coverage`` on the
records that run wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bot.sweep.catalogue import generation_classes
from bot.sweep.records import ignored_entry
from bot.sweep.tasks import GENERATE, Task
from exporters.ledger import load_ledger

ROOT = Path(__file__).resolve().parent.parent
GATE = """\
[[entry]]
id = "gpt2-generate-onnx"
models = ["GPT2LMHeadModel"]
backend = "onnx"
scope = "generate"
dependency = "onnxruntime"
reason = "decode step fails in the runtime"
model_change = "none: a runtime bug"
failure = "Fail"
added = 2026-12-01
"""


def test_generation_classes_are_the_tasks_generation_heads():
    causal = generation_classes("text-generation")
    assert {"LlamaForCausalLM", "GPT2LMHeadModel", "MixtralForCausalLM"} <= set(causal)
    assert "LlamaModel" not in causal and "BertModel" not in causal
    assert {"T5ForConditionalGeneration", "BartForConditionalGeneration"} <= set(generation_classes("text2text-generation"))


def test_a_generate_task_is_dynamic_and_gated_by_generate_entries_only(tmp_path):
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(GATE)
    ledger = load_ledger(tmp_path)
    task = Task("GPT2LMHeadModel", "onnx", GENERATE)
    assert task.dynamic and task.generate
    assert ignored_entry(ledger, task, ["all"]).id == "gpt2-generate-onnx"
    assert ignored_entry(ledger, Task("GPT2LMHeadModel", "onnx", "dynamic"), ["all"]) is None


def test_sweep_run_task_text_generation_records_and_reports(tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "onnx_disable_optimize.toml").write_text("")
    (registry / "export_skips.toml").write_text(GATE)
    classes = tmp_path / "classes.txt"
    classes.write_text("LlamaForCausalLM\nGPT2LMHeadModel\n")
    results = tmp_path / "generation.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "EXPORTBOT_REGISTRY": str(registry)}
    run = subprocess.run(
        [sys.executable, "-m", "bot", "sweep", "run", "--task", "text-generation", "--backend", "onnx",
         "--classes", str(classes), "--results", str(results), "--timeout", "900"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    records = {r["model"]: r for r in map(json.loads, results.read_text().splitlines())}
    llama, gpt2 = records["LlamaForCausalLM"], records["GPT2LMHeadModel"]
    assert llama["mode"] == "generate" and llama["status"] == "pass", llama.get("error")
    assert llama["options"]["task"] == "generation" and llama["dynamic"] is True
    assert {"prefill: validation", "decode: validation"} <= set(llama["stage_seconds"])
    assert llama["max_abs_diff"]["logits"] < 1e-3
    assert gpt2["status"] == "skipped" and gpt2["ledger_entry"] == "gpt2-generate-onnx"

    coverage = tmp_path / "coverage.md"
    report = subprocess.run([sys.executable, "-m", "bot", "sweep", "coverage", str(results), "--out", str(coverage)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    text = coverage.read_text()
    assert "## Generation" in text and "1 of 2 generation exports pass" in text
    assert "| LlamaForCausalLM | onnx | — | pass |" in text
    assert "| GPT2LMHeadModel | onnx | — | skipped | gpt2-generate-onnx |" in text
