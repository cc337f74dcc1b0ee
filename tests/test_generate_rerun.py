"""The audit's re-run of a ``generate``-scope entry is a generation export with the gate off, not a plain one.

Through the audit's own runner (bot.run.reruns.subprocess_runner: a real ``python -m bot export CLASS --dynamic
--repro ID`` child reading a temporary registry). BertModel tells the two apart: its plain dynamic export
passes, its generation export cannot exist (no generation head), so a child that fell back to a plain
export would report a pass. Llama's generation export passes, validated token for token.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.audit.plan import entry_subject, scope_modes
from bot.run.reruns import rerun_subject, subprocess_runner
from exporters.ledger import load_ledger

ENTRY = """\
[[entry]]
id = "{id}"
models = ["{model}"]
backend = "onnx"
scope = "generate"
dependency = "onnxruntime"
reason = "decode step fails in the runtime"
model_change = "none: a runtime bug"
failure = "{failure}"
added = 2026-12-01
"""


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    (tmp_path / "onnx_disable_optimize.toml").write_text("")
    (tmp_path / "export_skips.toml").write_text(
        ENTRY.format(id="llama-generate", model="LlamaForCausalLM", failure="decode")
        + "\n" + ENTRY.format(id="bert-generate", model="BertModel", failure="no generation head"))
    return tmp_path


def test_a_generate_entry_re_runs_once_in_dynamic_mode(registry):
    entry = load_ledger(registry).by_id("llama-generate")
    assert scope_modes("generate") == [True]
    assert [e.dynamic for e in entry_subject(entry).exports] == [True]


def test_the_re_run_is_a_generation_export_not_a_plain_one(registry):
    run = subprocess_runner(600, repro="bert-generate", registry=registry)
    outcome = run("BertModel", "onnx", True)
    assert outcome["status"] == "build-error", outcome  # a plain dynamic BertModel export passes
    assert "no generation head" in outcome["error"]
    assert outcome["repro"] == "bert-generate" and outcome["workaround_off"] == ["bert-generate"]


@pytest.mark.slow
def test_a_passing_generation_re_run_records_its_gate_off(registry):
    entry = load_ledger(registry).by_id("llama-generate")
    [outcome] = rerun_subject(entry_subject(entry), subprocess_runner(900, repro=entry.id, registry=registry), runs=1)
    assert outcome["status"] == "pass", outcome.get("error")
    assert outcome["workaround_off"] == ["llama-generate"] and outcome["options"]["task"] == "generation"
    assert {"prefill: torch.export", "decode: torch.export"} <= set(outcome["stage_seconds"])
