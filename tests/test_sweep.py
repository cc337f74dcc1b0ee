"""``exportbot sweep``: sharding, selection, error signatures, ledger classification, result files, and real
isolated runs (warm fork worker and fresh processes) including a segfault and a hang."""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import json
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import transformers
from click.testing import CliRunner

from bot.cli.sweep import sweep_group
from bot.run.worker import TEST_CRASH_ENV, TEST_HANG_ENV
from bot.sweep.catalogue import enumerate_model_classes
from bot.sweep.records import SCHEMA, classify_against_entry, ignored_entry, merge_records
from bot.sweep.results import ResultsError, read_results, repair_tail
from bot.sweep.tasks import (
    Task,
    collect_class_names,
    parse_class_list,
    parse_shard,
    plan_tasks,
    select_classes,
    shard_index,
)
from bot.sweep.triage import failure_signature, normalize_error, triage
from exporters.ledger import Ledger, LedgerEntry


def record(model: str, status: str = "pass", backend: str = "dynamo", mode: str = "static", **extra: Any) -> dict:
    """A schema-1 record with the fields the pure functions read."""
    return {"schema": SCHEMA, "model": model, "backend": backend, "dynamic": mode == "dynamic", "mode": mode,
            "status": status, "seconds": 1.0, "error": None, "error_type": None, "versions": {}, **extra}


def entry(failure: str = r"ShapeInferenceError: \[Cast\]", **fields: Any) -> LedgerEntry:
    values: dict[str, Any] = {
        "id": "vit-skip", "list_name": "EXPORT_SKIPS", "models": ("ViTModel",), "backend": "dynamo",
        "scope": "static", "dependency": "torch", "reason": "why", "failure": failure,
        "added": datetime.date(2025, 1, 1), "path": Path("export_skips.toml"), "line": 1,
    }  # fmt: skip
    return LedgerEntry(**{**values, **fields})


def write_jsonl(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def class_names(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    names = {"".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(3, 30))) for _ in range(count)}
    return sorted(names)


# ── Sharding and selection ──
def test_shards_partition_every_selection_and_never_move() -> None:
    names = class_names(3000)
    for count in (1, 2, 3, 7, 16):
        shards = [select_classes(names, shard=(index, count)) for index in range(1, count + 1)]
        assert sorted(name for shard in shards for name in shard) == names  # every name once, none twice
        for index, shard in enumerate(shards, 1):
            # Filters and order do not move a name to another shard: assignment depends on the name alone.
            assert select_classes(names, ["A*", "*x*"], (index, count)) == [
                n for n in shard if fnmatch.fnmatchcase(n, "A*") or fnmatch.fnmatchcase(n, "*x*")
            ]
            assert set(select_classes(names[::-1], shard=(index, count))) == set(shard)
    # Pinned: changing the hash would silently reshuffle every CI shard.
    assert [shard_index(n, 8) for n in ("BertModel", "GPT2Model", "ViTForImageClassification")] == [5, 1, 7]


def test_parse_shard() -> None:
    assert parse_shard("2/8") == (2, 8)
    assert parse_shard(" 1 / 1 ") == (1, 1)
    for bad in ("0/4", "5/4", "a/b", "3", "1/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_select_classes_dedupes_and_limits_last() -> None:
    names = ["BertModel", "GPT2Model", "BertModel", "BertForMaskedLM", "ViTModel"]
    assert select_classes(names, ["Bert*"]) == ["BertModel", "BertForMaskedLM"]
    assert select_classes(names, limit=2) == ["BertModel", "GPT2Model"]
    assert select_classes(names, ["Bert*", "ViT*"], limit=2) == ["BertModel", "BertForMaskedLM"]


def test_parse_class_list_and_plan_tasks() -> None:
    assert parse_class_list("# header\nBertModel\n\n  GPT2Model  # decoder\n#ViTModel\n") == ["BertModel", "GPT2Model"]
    done = {("BertModel", "dynamo", "static")}
    tasks = plan_tasks(["BertModel", "GPT2Model"], ["dynamo", "onnx"], ["static"], done)
    assert [t.key for t in tasks] == [
        ("BertModel", "onnx", "static"), ("GPT2Model", "dynamo", "static"), ("GPT2Model", "onnx", "static"),
    ]  # fmt: skip
    assert Task("A", "onnx", "dynamic").dynamic and not Task("A", "onnx", "static").dynamic


def test_enumeration_covers_every_auto_mapping() -> None:
    assert collect_class_names([{"a": "X"}, {"b": ("Y", "Z"), "c": "X"}]) == {"X", "Y", "Z"}
    classes = enumerate_model_classes()
    assert len(classes) > 1000
    assert len(set(classes)) == len(classes) and classes == sorted(classes)
    assert set(classes) <= set(dir(transformers))
    # One from each kind of mapping value, including tuple values, resolves to a model class.
    for name in ("BertModel", "FunnelBaseModel", "DeiTForImageClassificationWithTeacher", "WhisperForConditionalGeneration"):
        assert name in classes
        assert hasattr(getattr(transformers, name), "config_class")


# ── Error signatures and triage ──
@pytest.mark.parametrize(
    ("text", "model", "expected"),
    [
        (
            "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u12, 1)).  (Size-like symbols: u0)",
            None,
            "Could not guard on data-dependent expression Eq(u?, N) (unhinted: Eq(u?, N)). (Size-like symbols: u?)",
        ),
        ("shape '[2, 8, 64]' is invalid for input of size 1024", None, "shape '[N, N, N]' is invalid for input of size N"),
        ("Expected size s43 but got s0 for dim -1", None, "Expected size s? but got s? for dim -N"),
        (
            'File "/work/.venv/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py", line 123, in f',
            None,
            'File "<path>", line N, in f',
        ),
        ("<function forward at 0x7f3a2b1c4d30> failed", None, "<function forward at 0x?> failed"),
        ("'BertSelfAttention' object has no attribute 'foo'", "BertModel", "'<Model>' object has no attribute 'foo'"),
        ("node add_3 in L__self___encoder_layer_0 uses float16 Conv2d", None,
         "node add_N in L__self___encoder_layer_N uses float16 Conv2d"),
        ("\n  first   line\nsecond line 42", None, "first line"),
    ],
)
def test_normalize_error(text: str, model: str | None, expected: str) -> None:
    assert normalize_error(text, model) == expected


def test_same_bug_in_two_models_has_one_signature() -> None:
    bert = "RuntimeError in modeling_bert: 'BertSelfAttention' got shape [2, 8, 64]"
    roberta = "RuntimeError in modeling_roberta: 'RobertaSelfAttention' got shape [2, 4, 32]"
    assert normalize_error(bert, "BertForMaskedLM") == normalize_error(roberta, "RobertaModel")


def test_triage_groups_failures_not_passes_or_skips() -> None:
    records = [
        record("BertModel", "failed", error="shape [2, 8] bad", error_type="RuntimeError"),
        record("GPT2Model", "failed", error="shape [4, 16] bad", error_type="RuntimeError"),
        record("ViTModel", "crashed", error="killed by signal 11 (SIGSEGV)", signal=11),
        record("OPTModel", "timeout", error="no outcome within 600 s; killed"),
        record("T5Model", "pass"),
        record("BartModel", "skipped"),
    ]
    groups = triage(records)
    assert [(g.signature, g.count) for g in groups] == [
        ("failed: RuntimeError: shape [N, N] bad", 2),
        ("crashed: SIGSEGV", 1),
        ("timeout: no outcome within N s; killed", 1),
    ]
    assert groups[0].examples() == ["BertModel (dynamo/static)", "GPT2Model (dynamo/static)"]
    assert failure_signature(record("X", "mismatch", error="logits: max abs diff 0.3 > 1e-4")) == (
        "mismatch: logits: max abs diff N > N"
    )


# ── The ledger ──
def test_classify_against_entry() -> None:
    gate = entry()
    assert classify_against_entry(record("ViTModel", "pass"), gate) == "passes"
    failed = record("ViTModel", "failed", error="ShapeInferenceError: [Cast] bad input", error_type="Fail")
    assert classify_against_entry(failed, gate) == "same-failure"
    typed = record("ViTModel", "failed", error="[Cast] bad input", error_type="ShapeInferenceError")
    assert classify_against_entry(typed, gate) == "same-failure"  # the regex may name the exception type
    assert classify_against_entry(record("ViTModel", "failed", error="other"), gate) == "different-failure"
    assert classify_against_entry(record("ViTModel", "mismatch", error="diff 3"), gate) == "different-failure"
    crashed = record("ViTModel", "crashed", error="killed by signal 11", stderr_tail="ShapeInferenceError: [Cast]")
    assert classify_against_entry(crashed, gate) == "same-failure"
    with pytest.raises(ValueError):
        classify_against_entry(record("ViTModel", "skipped"), gate)


def test_ignored_entry_only_when_named() -> None:
    skip = entry()
    optimizer = entry(id="vit-opt", list_name="ONNX_DISABLE_OPTIMIZE", backend="onnx", scope="all")
    ledger = Ledger((skip, optimizer))
    static, dynamic = Task("ViTModel", "dynamo", "static"), Task("ViTModel", "dynamo", "dynamic")
    assert ignored_entry(ledger, static, ()) is None
    assert ignored_entry(ledger, static, ("vit-skip",)) is skip
    assert ignored_entry(ledger, static, ("all",)) is skip
    assert ignored_entry(ledger, dynamic, ("all",)) is None  # the entry's scope is static
    assert ignored_entry(ledger, static, ("vit-opt",)) is None  # still skipped: that gate is honoured
    assert ignored_entry(ledger, Task("ViTModel", "onnx", "dynamic"), ("vit-opt",)) is optimizer


# ── Result files ──
def test_merge_records_last_wins_sorted() -> None:
    old, new = record("GPT2Model", "failed"), record("GPT2Model", "pass")
    merged = merge_records([old, record("BertModel"), new])
    assert [(r["model"], r["status"]) for r in merged] == [("BertModel", "pass"), ("GPT2Model", "pass")]


def test_merge_records_newest_started_at_wins_whatever_the_order() -> None:
    old = record("GPT2Model", "failed", started_at="2026-12-01T10:00:00+00:00")
    new = record("GPT2Model", "pass", started_at="2026-12-02T09:00:00+00:00")
    for records in ([old, new], [new, old]):
        assert [r["status"] for r in merge_records(records)] == ["pass"]
    # Instants, not strings: 10:00 at +02:00 is 08:00 UTC, before 09:00 UTC; a value without an offset is UTC.
    east = record("GPT2Model", "failed", started_at="2026-12-01T10:00:00+02:00")
    utc = record("GPT2Model", "pass", started_at="2026-12-01T09:00:00Z")
    naive = record("GPT2Model", "mismatch", started_at="2026-12-01T08:30:00")
    assert [r["status"] for r in merge_records([utc, east, naive])] == ["pass"]
    assert [r["status"] for r in merge_records([naive, east])] == ["mismatch"]


def test_merge_records_without_started_at_lose_and_ties_go_to_the_last_seen() -> None:
    dated = record("GPT2Model", "failed", started_at="2026-11-29T12:28:22+00:00")
    undated, undated_later = record("GPT2Model", "pass"), record("GPT2Model", "mismatch", started_at=None)
    assert [r["status"] for r in merge_records([dated, undated, undated_later])] == ["failed"]
    assert [r["status"] for r in merge_records([undated, undated_later])] == ["mismatch"]  # file order, as before
    same = record("GPT2Model", "pass", started_at="2026-11-29T12:28:22+00:00")
    assert [r["status"] for r in merge_records([dated, same])] == ["pass"]
    assert [r["status"] for r in merge_records([same, dated])] == ["failed"]


def test_a_started_at_that_is_not_iso_8601_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [record("BertModel"), record("GPT2Model", started_at="yesterday")])
    with pytest.raises(ResultsError, match=r"r\.jsonl:2: started_at 'yesterday' is not an ISO 8601 time"):
        read_results(path)


def test_merge_command(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [record("GPT2Model", "failed"), record("BertModel")])
    second = write_jsonl(tmp_path / "b.jsonl", [record("GPT2Model", "pass"), record("BertModel", mode="dynamic")])
    result = CliRunner().invoke(sweep_group, ["merge", str(tmp_path / "all.jsonl"), str(first), str(second)])
    assert result.exit_code == 0, result.output
    merged = read_results(tmp_path / "all.jsonl")
    assert [(r["model"], r["mode"], r["status"]) for r in merged] == [
        ("BertModel", "dynamic", "pass"), ("BertModel", "static", "pass"), ("GPT2Model", "static", "pass"),
    ]  # fmt: skip
    other = write_jsonl(tmp_path / "c.jsonl", [record("BertModel"), {**record("ViTModel"), "schema": 2}])
    result = CliRunner().invoke(sweep_group, ["merge", str(tmp_path / "x.jsonl"), str(first), str(other)])
    assert result.exit_code == 2
    assert f"{other}:2: schema 2" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_repair_tail(tmp_path: Path) -> None:
    cut = write_jsonl(tmp_path / "cut.jsonl", [record("BertModel")], tail='{"schema": 1, "mod')
    assert repair_tail(cut) is True
    assert [r["model"] for r in read_results(cut)] == ["BertModel"]
    unterminated = tmp_path / "unterminated.jsonl"
    unterminated.write_text(json.dumps(record("BertModel")))
    assert repair_tail(unterminated) is False
    assert unterminated.read_text().endswith("\n")


def test_resume_skips_recorded_keys(tmp_path: Path) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text("BertModel\nGPT2Model\n")
    done = [record("BertModel", "failed", error="from before"), record("GPT2Model", "skipped")]
    results = write_jsonl(tmp_path / "results.jsonl", done, tail='{"schema": 1, "mo')
    args = ["run", "--classes", str(classes), "--backend", "dynamo", "--static", "--results", str(results)]
    refused = CliRunner().invoke(sweep_group, args)
    assert refused.exit_code == 2 and "--resume" in refused.output
    resumed = CliRunner().invoke(sweep_group, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "0 exports to run (2 already recorded)" in resumed.output
    assert read_results(results) == done  # nothing rerun; the cut-off line is gone


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "0/3"], "--shard 0/3: i must be between 1 and n"),
        (["--ignore-ledger", "no-such-entry"], "--ignore-ledger no-such-entry: no ledger entry has that id"),
        (["--resume", "--overwrite"], "--resume and --overwrite contradict each other"),
        (["--without", "_no_such_fix"], "no workaround named '_no_such_fix'"),
        (["--backend", "dynamo", "--without", "_fix_rsub_scalar"], "a workaround of onnx, not of --backend dynamo"),
    ],
)
def test_run_refuses_bad_input_with_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text("BertModel\nNotAModelAtAll\n")
    result = CliRunner().invoke(sweep_group, ["run", "--classes", str(classes), "--results", str(tmp_path / "r"), *args])
    assert result.exit_code == 2 and message in result.output
    unknown = CliRunner().invoke(sweep_group, ["run", "--classes", str(classes), "--results", str(tmp_path / "r")])
    assert unknown.exit_code == 2 and "not transformers classes: NotAModelAtAll" in unknown.output


def test_coverage_command(tmp_path: Path) -> None:
    versions = {"torch": "2.13.0", "transformers": "5.23.0"}
    results = write_jsonl(tmp_path / "r.jsonl", [
        record("BertModel", versions=versions, workarounds_fired={"sdpa": 2}, seconds=1.25),
        record("GPT2Model", "failed", error="bad | thing\nsecond line", error_type="RuntimeError", versions=versions),
        record("ViTModel", "skipped", ledger_entry="vit-skip"),
    ])  # fmt: skip
    out = tmp_path / "docs" / "coverage.md"
    result = CliRunner().invoke(sweep_group, ["coverage", str(results), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith(f"<!-- Generated by `exportbot sweep coverage {results} --causes sweeps/causes.toml --out {out}`")
    assert "Versions: torch 2.13.0 · transformers 5.23.0." in text
    assert "| BertModel | dynamo | static | pass | 1.2 | sdpa×2 |  |  |" in text
    assert "| GPT2Model | dynamo | static | failed | 1.0 |  |  | bad \\| thing |" in text
    assert "| ViTModel | dynamo | static | skipped | 1.0 |  | vit-skip |  |" in text



def test_coverage_without_files_reads_the_committed_record_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    refused = CliRunner().invoke(sweep_group, ["coverage", "--out", "coverage.md"])
    assert refused.exit_code == 2 and "name FILES or run from the repository root" in refused.output
    (tmp_path / "sweeps" / "catalogue").mkdir(parents=True)
    (tmp_path / "sweeps" / "tiny-census").mkdir()
    write_jsonl(tmp_path / "sweeps" / "catalogue" / "onnx-static-shard-1-of-2.jsonl", [record("BertModel", backend="onnx")])
    write_jsonl(tmp_path / "sweeps" / "catalogue" / "onnx-static-shard-2-of-2.jsonl", [record("GPT2Model", backend="onnx")])
    write_jsonl(tmp_path / "sweeps" / "catalogue" / "onnx-static-shard-2-of-2.rerun.jsonl", [record("T5Model")])  # not read
    write_jsonl(tmp_path / "sweeps" / "tiny-census" / "shard-1-of-2.jsonl", [{"model": "BertModel", "status": "ok"}])
    result = CliRunner().invoke(sweep_group, ["coverage", "--out", "coverage.md"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "coverage.md").read_text()
    assert text.startswith("<!-- Generated by `exportbot sweep coverage --causes sweeps/causes.toml --out coverage.md`")
    assert "from 2 records." in text and "T5Model" not in text
    assert "1 of 1 classes build and run one eager forward" in text  # the committed census, read too


def test_coverage_lists_builder_gaps_by_cause_and_rates_over_built_classes(tmp_path: Path) -> None:
    results = write_jsonl(tmp_path / "r.jsonl", [
        record("BertModel"), record("GPT2Model", "failed", error="x"), record("TimmModel", "build-error", error="y"),
    ])  # fmt: skip
    census = tmp_path / "census.jsonl"
    census.write_text("".join(json.dumps(r) + "\n" for r in [
        {"model": "BertModel", "status": "ok"},
        {"model": "TimmModel", "status": "build-error", "error_type": "ImportError", "error": "needs timm 1"},
        {"model": "TimmBackbone", "status": "build-error", "error_type": "ImportError", "error": "needs timm 2"},
        {"model": "SamModel", "status": "forward-error", "error_type": "RuntimeError", "error": "size"},
        {"model": "SamModel", "status": "ok"},  # a rerun after a builder fix supersedes
    ]))  # fmt: skip
    out = tmp_path / "coverage.md"
    result = CliRunner().invoke(sweep_group, ["coverage", str(results), "--census", str(census), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert f"--census {census} --causes sweeps/causes.toml --out {out}" in text.splitlines()[0]
    assert "| dynamo | static | 3 | 1 | 1 | 1 | 33% | 50% |" in text  # pass rate over all, and over built classes
    assert "2 of 4 classes build and run one eager forward" in text
    assert "| dynamo | static | 1 | 1 | 0 | 100% |" in text  # only BertModel both was swept and runs eagerly
    assert "| 2 | build-error: ImportError: needs <model> N | TimmBackbone, TimmModel |" in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"status": "ok"}\n')
    refused = CliRunner().invoke(sweep_group, ["coverage", str(results), "--census", str(bad), "--out", str(out)])
    assert refused.exit_code == 2 and "not a census file" in refused.output

# ── Real isolated runs ──
SKIPS_TOML = """\
[[entry]]
id = "vit-ignored"
models = ["ViTForImageClassification"]
backend = "dynamo"
scope = "static"
dependency = "torch"
reason = "test entry, run anyway with --ignore-ledger"
model_change = "none"
failure = 'never seen'
added = 2025-01-01

[[entry]]
id = "albert-gated"
models = ["AlbertModel"]
backend = "dynamo"
scope = "all"
dependency = "torch"
reason = "test entry, honoured"
model_change = "none"
failure = 'boom'
added = 2025-01-01
"""


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "registry"
    directory.mkdir()
    (directory / "export_skips.toml").write_text(SKIPS_TOML)
    (directory / "onnx_disable_optimize.toml").write_text("")
    monkeypatch.setenv("EXPORTBOT_REGISTRY", str(directory))
    return directory


def by_model(path: Path) -> dict[str, dict]:
    return {r["model"]: r for r in read_results(path)}


def test_coverage_says_which_exporter_code_the_records_ran_on_from_the_records_alone() -> None:
    from bot.sweep.reports import coverage_markdown

    records = [{"model": m, "backend": "onnx", "mode": "static", "status": "pass", "exporter_version": v,
                "started_at": t} for m, v, t in [("A", "abc", "2026-12-01T10:00:00+00:00"),
                                                 ("B", "def", "2026-12-03T08:30:00+00:00"),
                                                 ("C", "abc", "2026-12-02T00:00:00+00:00"),
                                                 ("D", "ghi", "2026-12-02T12:00:00+00:00"), ("E", None, None)]]  # fmt: skip
    line = ("Exporter code: the records were made from 2026-12-01 to 2026-12-03 08:30 UTC (`started_at`); the "
            "newest ran on exporter code `def` (`exporter_version`, the hash of the exporters' source), as do 1 of "
            "the 5; 3 ran on 2 other hashes (earlier code, or a branch's); 1 carry none (made before the field "
            "existed). `scripts/check_generated.py` says how many differ from the code now.")
    assert line in coverage_markdown(records, "exportbot sweep coverage x --out y").splitlines()


def test_coverage_says_which_dynamic_passes_kept_no_dynamic_dim() -> None:
    from bot.sweep.reports import coverage_markdown

    records = [
        {"model": "Moves", "backend": "onnx", "mode": "dynamic", "status": "pass", "dynamic_dims": {"x": [0, 1]}},
        {"model": "Specialised", "backend": "onnx", "mode": "dynamic", "status": "pass", "dynamic_dims": {}},
        {"model": "Guarded", "backend": "onnx", "mode": "dynamic", "status": "pass", "dynamic_dims": {"x": [0, 2]},
         "unmoved_dims": {"x": [2]}},
        {"model": "Older", "backend": "onnx", "mode": "dynamic", "status": "pass"},
        {"model": "Failed", "backend": "onnx", "mode": "dynamic", "status": "failed", "dynamic_dims": {}},
        {"model": "Static", "backend": "onnx", "mode": "static", "status": "pass", "dynamic_dims": {}},
    ]
    assert ("Dynamic passes whose record names the dims kept dynamic: 3 of 4 (records made before 2026-12-02 do "
            "not); 1 of them kept none, every dim specialised by torch.export, and were validated at the sample "
            "shape only: Specialised; 1 kept a dim that the second shape left at the sample's size, because the "
            "program's guards admit no other size within reach: Guarded.") in coverage_markdown(
        records, "exportbot sweep coverage x --out y")


def test_unmoved_dims_are_the_dynamic_axes_the_second_shape_left_at_the_samples_size() -> None:
    from types import SimpleNamespace

    from bot.run.runner import unmoved_dims

    def shape(**sizes):
        return SimpleNamespace(input_shapes=sizes)

    dims = {"input_values": [0, 2], "mask": [0]}
    report = SimpleNamespace(shapes=[shape(input_values=[2, 1, 1600], mask=[2]), shape(input_values=[3, 1, 1600],
                                                                                       mask=[3])])
    assert unmoved_dims(dims, report) == {"input_values": [2]}
    assert unmoved_dims(dims, SimpleNamespace(shapes=report.shapes[:1])) == {}  # no second shape: nothing told


def test_warm_fork_sweep_records_passes_skips_and_a_segfault(
    tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_CRASH_ENV, "GPT2Model")
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    classes = tmp_path / "classes.txt"
    classes.write_text("BertModel\nGPT2Model  # segfaults\nViTForImageClassification\nAlbertModel\n")
    results = tmp_path / "results.jsonl"
    result = CliRunner().invoke(sweep_group, [
        "run", "--classes", str(classes), "--backend", "dynamo", "--static", "--jobs", "1", "--timeout", "120",
        "--results", str(results), "--ignore-ledger", "vit-ignored", "--summary-md", str(tmp_path / "s.md"),
        "--without", "_empty_caches_as_subtrees",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    records = by_model(results)
    assert {m: r["status"] for m, r in records.items()} == {
        "BertModel": "pass", "GPT2Model": "crashed", "ViTForImageClassification": "pass", "AlbertModel": "skipped",
    }  # fmt: skip
    bert = records["BertModel"]
    assert bert["schema"] == SCHEMA and bert["runner"] == "fork" and bert["mode"] == "static"
    assert bert["worker_pid"] != bert["child_pid"] and bert["peak_rss_mb"] > 0 and bert["startup_seconds"] < 1
    assert bert["versions"]["torch"] and bert["log_file"] is None
    assert bert["workarounds_disabled"] == ["_empty_caches_as_subtrees"]  # --without reached the child's export
    from bot.audit.verification import exporter_version

    assert {r["exporter_version"] for r in records.values()} == {exporter_version()}  # crashed and skipped too
    crash = records["GPT2Model"]
    assert crash["signal"] == 11 and crash["exit_code"] is None
    assert "Segmentation fault" in crash["stderr_tail"] and Path(crash["log_file"]).is_file()
    assert crash["worker_pid"] == bert["worker_pid"]  # the worker survived its child's segfault
    vit = records["ViTForImageClassification"]
    assert (vit["ledger_entry"], vit["ledger_match"]) == ("vit-ignored", "passes")
    assert (records["AlbertModel"]["ledger_entry"], records["AlbertModel"]["ledger_match"]) == ("albert-gated", None)
    assert "crashed: SIGSEGV" in result.output  # triage printed at the end
    assert "## Sweep summary (4 exports)" in (tmp_path / "s.md").read_text()
    assert step_summary.read_text() == (tmp_path / "s.md").read_text()


def test_fresh_process_sweep_kills_a_hang_and_survives_a_crash(
    tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "BertModel")
    monkeypatch.setenv(TEST_CRASH_ENV, "GPT2Model")
    results = tmp_path / "results.jsonl"
    result = CliRunner().invoke(sweep_group, [
        "run", "--match", "BertModel", "--match", "GPT2Model", "--backend", "dynamo", "--static", "--no-fork",
        "--jobs", "2", "--timeout", "3", "--results", str(results),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    records = by_model(results)
    hang, crash = records["BertModel"], records["GPT2Model"]
    assert (hang["status"], hang["signal"], hang["runner"]) == ("timeout", 9, "spawn")
    assert 3 <= hang["wall_seconds"] < 10
    assert "in _apply_test_hooks" in hang["stderr_tail"]  # the hung child's stack, dumped before the kill
    assert (crash["status"], crash["signal"]) == ("crashed", 11)
    for child in (hang["child_pid"], crash["child_pid"]):
        with pytest.raises(ProcessLookupError):
            os.killpg(child, 0)  # nothing of either export is left running


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now, read from /proc (children of each of its threads)."""
    found, todo = set(), [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in map(int, children.read_text().split()):
                    found.add(child)
                    todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_sweep_leaves_no_worker_or_export_running(tmp_path: Path, registry: Path, stop: int) -> None:
    """Was: SIGTERM (a CI cancel, ``kill``) ended the sweep but not its warm workers, whose exports ran on for
    up to the timeout, orphaned. SIGTERM now stops as Ctrl-C does; even SIGKILL takes the workers down."""
    results = tmp_path / "results.jsonl"
    env = {**os.environ, TEST_HANG_ENV: "BertModel", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "bot", "sweep", "run", "--match", "BertModel", "--backend", "dynamo", "--static",
         "--timeout", "300", "--results", str(results)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    log = tmp_path / "results.logs" / "BertModel-dynamo-static.log"
    deadline = time.time() + 120
    while not log.exists() and time.time() < deadline:  # the export's child has started (it opened its log)
        time.sleep(0.2)
    assert log.exists(), "the export never started"
    below = _descendants(sweep.pid)
    assert len(below) >= 2  # the warm worker and its export child
    sweep.send_signal(stop)
    output, _ = sweep.communicate(timeout=60)
    if stop == signal.SIGTERM:
        assert sweep.returncode == 130 and "interrupted; continue with --resume" in output, output
    deadline = time.time() + 20
    while any(map(_alive, below)) and time.time() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in below if _alive(pid)]


def test_the_stack_dump_before_the_deadline_survives_a_deep_recursion(tmp_path: Path) -> None:
    """The dump is the main thread's own (SIGALRM), taken mid-recursion, and the process goes on. The watchdog
    thread of ``faulthandler.dump_traceback_later`` segfaulted the same loop here (dumping every second: exit
    139 after 4 dumps)."""
    code = (
        "import sys, time; sys.setrecursionlimit(100000)\n"
        "from bot.run.worker import _dump_stack_before_the_deadline\n"
        "def deep(n): return 0 if n == 0 else deep(n - 1) + 1\n"
        "_dump_stack_before_the_deadline(0.5)\n"
        "end = time.time() + 3\n"
        "while time.time() < end: deep(20000)\n"
        "print('survived')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "survived"), done.stderr[-2000:]
    # "Stack": the interrupted thread dumped its own frames ("Thread 0x...": another thread read them)
    assert "Stack (most recent call first):" in done.stderr and "line 3 in deep" in done.stderr


def test_the_warm_worker_builds_xnnpack_pattern_graphs_for_its_children() -> None:
    """Forked children inherit the pattern graphs only if the worker built them (bot/run/worker.py says why)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    from bot.run.worker import build_xnnpack_pattern_graphs

    sdpa.get_graphs.cache_clear()
    bilinear_2d._get_bilinear_2d_graphs.cache_clear()
    build_xnnpack_pattern_graphs()
    assert sdpa.get_graphs.cache_info().currsize == 1
    assert bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize == 1
    assert len(sdpa.get_graphs()) == 2 and len(bilinear_2d.get_graphs_dict()) == 4
