"""Reviewed causes of sweep failures (``sweeps/causes.toml``): loading, matching, and the coverage section."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bot.cli.sweep import sweep_group
from bot.sweep.causes import DEFAULT_CAUSES, Cause, CausesError, explain, load_causes, parse_causes
from bot.sweep.reports import causes_markdown
from bot.sweep.triage import failure_signature

ROOT = Path(__file__).resolve().parents[1]

GUARD = "Could not guard on data-dependent expression Eq(u12, 0)"


def record(model: str, status: str = "failed", backend: str = "onnx", mode: str = "static", **extra: Any) -> dict:
    return {"schema": 1, "model": model, "backend": backend, "dynamic": mode == "dynamic", "mode": mode,
            "status": status, "seconds": 1.0, "error": None, "error_type": None, "versions": {}, **extra}  # fmt: skip


def cause(**fields: Any) -> dict[str, Any]:
    values = {"id": "qwen-vision-split", "signature": "Could not guard on data-dependent expression Eq(u?, N)",
              "level": "model", "reason": "split by lengths.tolist()", "action": "ledger entry qwen-vision"}
    return {**values, **fields}  # fmt: skip


def guard_failure(model: str, **extra: Any) -> dict:
    return record(model, error=GUARD, error_type="GuardOnDataDependentSymNode", **extra)


# ── Loading ──
def test_a_valid_file_loads_every_field() -> None:
    [loaded] = parse_causes({"cause": [cause(models=["Qwen3VL*"], backends=["onnx"])]}, "causes.toml")
    assert loaded == Cause("qwen-vision-split", "Could not guard on data-dependent expression Eq(u?, N)", "model",
                           "split by lengths.tolist()", "ledger entry qwen-vision", ("Qwen3VL*",), ("onnx",))


@pytest.mark.parametrize(("bad", "message"), [
    ({"cause": [cause(level="models")]}, "cause qwen-vision-split: level 'models' is not one of exporter, model"),
    ({"cause": [cause(reason=" ")]}, "cause qwen-vision-split: missing or empty reason"),
    ({"cause": [{k: v for k, v in cause().items() if k != "signature"}]}, "missing or empty signature"),
    ({"cause": [cause(model=["X"])]}, "unknown key(s) model"),
    ({"cause": [cause(), cause()]}, "cause qwen-vision-split: duplicate id"),
    ({"cause": [cause(id="Qwen_Vision")]}, "id must be kebab-case"),
    ({"cause": [cause(models="Qwen3VL*")]}, "models must be an array of non-empty strings"),
    ({"cause": [cause(backends=[""])]}, "backends must be an array of non-empty strings"),
    ({"causes": []}, "unknown top-level key(s) causes"),
    ({"cause": {"id": "x"}}, "must be an array of tables"),
])  # fmt: skip
def test_every_malformed_cause_is_refused_naming_it(bad: dict, message: str) -> None:
    with pytest.raises(CausesError, match=r"^causes\.toml: ") as raised:
        parse_causes(bad, "causes.toml")
    assert message in str(raised.value)


def test_a_missing_file_has_no_causes_and_bad_toml_is_refused(tmp_path: Path) -> None:
    assert load_causes(tmp_path / "absent.toml") == []
    broken = tmp_path / "causes.toml"
    broken.write_text("[[cause]\n")
    with pytest.raises(CausesError, match="not TOML"):
        load_causes(broken)


def test_the_committed_causes_file_loads() -> None:
    path = ROOT / DEFAULT_CAUSES
    if not path.is_file():
        pytest.fail(f"{DEFAULT_CAUSES} is missing: docs/coverage.md would list every failure as untriaged")
    assert load_causes(path) == parse_causes(tomllib.loads(path.read_text()), str(path))


# ── Matching and buckets ──
def test_a_cause_matches_by_signature_then_narrows_by_model_and_backend() -> None:
    [narrow] = parse_causes({"cause": [cause(models=["Qwen3*VisionModel"], backends=["onnx"])]}, "c")
    hit = guard_failure("Qwen3VLVisionModel")
    assert narrow.matches(hit, failure_signature(hit))
    other_model = guard_failure("LongcatFlashModel")
    assert not narrow.matches(other_model, failure_signature(other_model))
    other_backend = guard_failure("Qwen3VLVisionModel", backend="executorch")
    assert not narrow.matches(other_backend, failure_signature(other_backend))
    other_error = record("Qwen3VLVisionModel", error="shape mismatch", error_type="RuntimeError")
    assert not narrow.matches(other_error, failure_signature(other_error))


def test_each_non_pass_lands_in_exactly_one_bucket_in_precedence_order() -> None:
    causes = parse_causes({"cause": [cause(), cause(id="second-match-never-used")]}, "c")
    records = [
        record("BertModel", "pass"),
        record("ViTModel", "skipped", ledger_entry="vit-skip"),
        guard_failure("TimmModel"),  # matches the cause, but its class does not build: a builder gap first
        guard_failure("Qwen3VLVisionModel"),
        guard_failure("Qwen3_5MoeVisionModel"),
        record("GPT2Model", error="something new", error_type="RuntimeError"),
        record("MobileViTModel", "skipped"),  # skipped without a ledger entry is not explained by the ledger
    ]
    census_ok = {"TimmModel": False, "Qwen3VLVisionModel": True, "Qwen3_5MoeVisionModel": True}
    explained = explain(records, causes, census_ok)
    assert [r["model"] for r in explained.ledger] == ["ViTModel"]
    assert [r["model"] for r in explained.builder_gap] == ["TimmModel"]
    assert [r["model"] for r in explained.by_cause["qwen-vision-split"]] == ["Qwen3VLVisionModel",
                                                                            "Qwen3_5MoeVisionModel"]
    assert explained.by_cause["second-match-never-used"] == []
    assert explained.triaged == 2
    assert [r["model"] for r in explained.untriaged] == ["GPT2Model", "MobileViTModel"]
    without_census = explain(records, causes, None)
    assert without_census.by_cause["qwen-vision-split"][0]["model"] == "TimmModel"


def test_the_coverage_section_counts_buckets_per_mode_and_lists_the_untriaged() -> None:
    causes = parse_causes({"cause": [cause()]}, "c")
    records = [guard_failure("Qwen3VLVisionModel"), guard_failure("Qwen3VLVisionModel", mode="dynamic"),
               record("GPT2Model", error="something new", error_type="RuntimeError"),
               record("ViTModel", "skipped", ledger_entry="vit-skip")]  # fmt: skip
    text = "\n".join(causes_markdown(records, causes, [{"model": "Qwen3VLVisionModel", "status": "ok"}]))
    assert ("4 exports did not pass: 1 are gated by a ledger entry (registry/), 0 are builder gaps (the class does "
            "not build or run eagerly, see below), 2 have a reviewed cause (`sweeps/causes.toml`), 1 are untriaged.")\
        in text
    assert "| onnx | dynamic | 1 | 0 | 0 | 1 | 0 |" in text
    assert "| onnx | static | 3 | 1 | 0 | 1 | 1 |" in text
    assert ("| qwen-vision-split | model | 2 | Qwen3VLVisionModel | split by lengths.tolist() | ledger entry "
            "qwen-vision |") in text
    assert "### Untriaged (1)" in text
    assert "| GPT2Model | onnx | static | failed: RuntimeError: something new |" in text


# ── The coverage command ──
def test_coverage_reads_causes_and_names_the_file_in_its_header(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(guard_failure("Qwen3VLVisionModel")) + "\n")
    causes_file = tmp_path / "causes.toml"
    causes_file.write_text('[[cause]]\nid = "qwen-vision-split"\nsignature = "data-dependent expression Eq(u?, N)"\n'
                           'level = "model"\nreason = "split by lengths"\naction = "ledger entry"\n')
    out = tmp_path / "coverage.md"
    result = CliRunner().invoke(sweep_group, ["coverage", str(results), "--causes", str(causes_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert f"--causes {causes_file} --out {out}`" in text.splitlines()[0]
    assert "1 have a reviewed cause" in text and "0 are untriaged" in text
    causes_file.write_text(causes_file.read_text().replace('"model"', '"modle"'))
    refused = CliRunner().invoke(sweep_group, ["coverage", str(results), "--causes", str(causes_file), "--out", str(out)])
    assert refused.exit_code == 2
    assert "cause qwen-vision-split: level 'modle' is not one of" in refused.output
    assert "Traceback" not in refused.output
