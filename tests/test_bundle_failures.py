"""A failed export into an existing ``--out`` leaves the previous bundle byte for byte as it was, still
loadable, and is recorded in one place: ``<out>.failed.json`` beside it (docs/export-format.md).

One real bundle (BertModel, Dynamo, static: a few seconds) is exported once; every failure mode then
exports into it for real, with one stage made to fail: torch.export raising, the ONNX lowering raising,
validation finding a mismatch (the loaded file's outputs scaled), and Ctrl-C (KeyboardInterrupt in
torch.export in this process; the SIGINT of a real ``exportbot export`` is in test_export_cli.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import exporters
from bot.cli.main import main
from bot.outcome import ExportRequest
from bot.run.runner import export_one
from exporters.bundle.format import BundleError, check_replaceable, failure_record_path


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path → bytes)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A validated BertModel bundle and its bytes, exported once for this module."""
    out = tmp_path_factory.mktemp("published") / "bert"
    outcome = export_one(ExportRequest("BertModel", "dynamo", out_dir=out))
    assert outcome.status == "pass", outcome.error
    return out, snapshot(out)


@pytest.fixture
def previous(published, tmp_path):
    """A copy of the published bundle in this test's own directory (the failure record goes beside it)."""
    out = tmp_path / "bert"
    shutil.copytree(published[0], out)
    assert snapshot(out) == published[1]
    return out


def assert_untouched_and_recorded(out: Path, before: dict[str, bytes], status: str, stage: str) -> dict:
    assert snapshot(out) == before  # byte-identical, nothing added or removed
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([out.name, f"{out.name}.failed.json"])
    loaded = exporters.load(out)  # the previous bundle still loads and runs
    inputs = {name: torch.ones(2, 8, dtype=torch.long) for name in loaded.input_names}
    assert loaded(**inputs).last_hidden_state.shape[:2] == (2, 8)
    record = json.loads(failure_record_path(out).read_text())
    assert record["status"] == status and record["failed_stage"] == stage
    return record


def _raising(message: str, error: type[BaseException] = RuntimeError):
    def fail(*_args, **_kwargs):
        raise error(message)
    return fail


def test_a_raise_in_torch_export_leaves_the_bundle_and_records_beside_it(previous, published, monkeypatch):
    monkeypatch.setattr(torch.export, "export", _raising("forced failure in torch.export"))
    outcome = export_one(ExportRequest("BertModel", "dynamo", seed=1, out_dir=previous))
    assert outcome.status == "failed" and outcome.files == {"failure": str(failure_record_path(previous))}
    record = assert_untouched_and_recorded(previous, published[1], "failed", "torch.export")
    assert "forced failure in torch.export" in record["error"]
    assert "Traceback (most recent call last)" in record["traceback"]


def test_a_raise_in_the_onnx_lowering_leaves_a_dynamo_bundle_alone(previous, published, monkeypatch):
    monkeypatch.setattr(torch.onnx, "export", _raising("forced failure in torch.onnx.export"))
    outcome = export_one(ExportRequest("BertModel", "onnx", out_dir=previous))
    assert outcome.status == "failed"
    record = assert_untouched_and_recorded(previous, published[1], "failed", "torch.onnx.export")
    assert "forced failure in torch.onnx.export" in record["error"]


def test_a_validation_mismatch_leaves_the_bundle_and_records_the_comparison(previous, published, monkeypatch):
    from exporters.bundle import runners

    def scaled(path, spec):
        run = runners.TorchExportRunner(path, spec)
        return lambda feed: [t * 1.01 for t in run(feed)]

    monkeypatch.setitem(runners.RUNNERS, "torch.export", scaled)
    outcome = export_one(ExportRequest("BertModel", "dynamo", seed=1, out_dir=previous))
    assert outcome.status == "mismatch"
    monkeypatch.undo()  # the previous bundle is loaded with the real runner
    record = assert_untouched_and_recorded(previous, published[1], "mismatch", "validating")
    shapes = record["validation"]["shapes"]
    assert shapes[0]["outputs"][0]["status"] == "mismatch"


def test_ctrl_c_leaves_the_bundle_and_records_the_interruption(previous, published, monkeypatch):
    monkeypatch.setattr(torch.export, "export", _raising("Ctrl-C", KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        export_one(ExportRequest("BertModel", "dynamo", seed=1, out_dir=previous))
    assert_untouched_and_recorded(previous, published[1], "interrupted", "torch.export")


def test_the_cli_reports_a_raise_beside_out_and_a_later_success_clears_the_record(previous, published, monkeypatch):
    monkeypatch.setattr(torch.export, "export", _raising("forced failure in torch.export"))
    result = CliRunner().invoke(main, ["export", "BertModel", "--seed", "1", "--out", str(previous)])
    assert result.exit_code == 1, result.output
    record_path = failure_record_path(previous)
    assert f"(full text: {record_path})" in result.stderr
    assert_untouched_and_recorded(previous, published[1], "failed", "torch.export")
    monkeypatch.undo()
    result = CliRunner().invoke(main, ["export", "BertModel", "--seed", "1", "--out", str(previous)])
    assert result.exit_code == 0, result.output
    assert not record_path.exists()  # the record described an export that is no longer the last one
    after = snapshot(previous)
    assert after["model.pt2"] != published[1]["model.pt2"]  # seed 1: other weights, published whole
    assert sorted(after) == sorted(published[1])


def test_an_out_that_holds_other_files_is_refused_before_any_work(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="not empty and not an export bundle"):
        check_replaceable(tmp_path)
    result = CliRunner().invoke(main, ["export", "BertModel", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "not empty and not an export bundle" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
