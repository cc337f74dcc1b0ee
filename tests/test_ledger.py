"""The ledger loader, its gating semantics and the bot's byte-preserving edits."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from exporters import ledger
from exporters.ledger import (
    LedgerError,
    UpstreamRef,
    add_entry,
    check_ledger,
    default_registry_dir,
    load_ledger,
    remove_entry,
    remove_model,
    set_fixed_in,
)

ODO = "onnx_disable_optimize.toml"
SKIPS = "export_skips.toml"

# Comments, blank lines and odd spacing on purpose: edits must leave all of it alone.
FIXTURE = """\
# Header comment of the file.
#   indented note

[[entry]]   # first entry, header comment
id = "alpha"
models = [
    "T5ForConditionalGeneration",  # the original report
    "BartForConditionalGeneration",
    "MBartForConditionalGeneration",
]
backend   = "onnx"
scope = "all"
upstream = "https://github.com/microsoft/onnxscript/issues/2001"
dependency = "onnxscript"
reason = "constant folding drops a cast"
failure = 'ShapeInferenceError: \\[Cast\\]'
added = 2025-01-02


# About beta: directly above its header, so it belongs to beta.
[[entry]]
id = "beta"
models = ["GPT2Model",  "OPTModel"]   # inline array
backend = "onnx"
scope = "dynamic"
upstream = "https://github.com/pytorch/pytorch/pull/150000"
dependency = "torch"
reason = "symbolic shapes confuse the rewriter"
failure = "RewriteError"
added = 2025-02-03
fixed_in = "torch>=2.14"  # keep this comment

[[entry]]
id = "gamma"
models = ["BertModel"]
backend = "onnx"
scope = "static"
upstream = "https://github.com/microsoft/onnxscript/issues/2002"
dependency = "onnxscript"
reason = "fusion of attention breaks"
failure = "Fusion"
added = 2025-03-04
# trailing note of gamma
"""

SKIP = """\
[[entry]]
id = "{id}"
models = [{models}]
backend = "{backend}"
scope = "{scope}"
dependency = "transformers"
reason = "data-dependent control flow"
model_change = "replace the python loop with torch.cond"
failure = "GuardOnDataDependentSymNode"
added = 2025-04-05
"""


def skip_entry(id: str, models: str = '"T5Model"', backend: str = "dynamo", scope: str = "all") -> str:
    return SKIP.format(id=id, models=models, backend=backend, scope=scope)


def registry(tmp_path: Path, odo: str = "", skips: str = "") -> Path:
    (tmp_path / ODO).write_text(odo)
    (tmp_path / SKIPS).write_text(skips)
    return tmp_path


@pytest.fixture
def fixture_file(tmp_path: Path) -> Path:
    registry(tmp_path, odo=FIXTURE)
    return tmp_path / ODO


# ── Loading ──
def test_checked_in_registry_is_valid() -> None:
    assert check_ledger(default_registry_dir())[1] == []


def test_load_reads_fields_and_locations(tmp_path: Path) -> None:
    directory = registry(tmp_path, odo=FIXTURE, skips=skip_entry("delta"))
    loaded = load_ledger(directory)
    assert [e.id for e in loaded.entries] == ["alpha", "beta", "gamma", "delta"]
    alpha = loaded.by_id("alpha")
    assert alpha.list_name == "ONNX_DISABLE_OPTIMIZE"
    assert alpha.models == (
        "T5ForConditionalGeneration",
        "BartForConditionalGeneration",
        "MBartForConditionalGeneration",
    )
    assert (alpha.path, alpha.line) == (directory / ODO, 4)
    assert alpha.upstream_ref == UpstreamRef("microsoft", "onnxscript", 2001, "issue")
    assert alpha.failure == r"ShapeInferenceError: \[Cast\]"
    assert alpha.added == datetime.date(2025, 1, 2)
    assert alpha.model_line("BartForConditionalGeneration") == 8
    beta = loaded.by_id("beta")
    assert (beta.line, beta.fixed_in, beta.upstream_ref) == (
        21,
        "torch>=2.14",
        UpstreamRef("pytorch", "pytorch", 150000, "pull"),
    )
    delta = loaded.by_id("delta")
    assert (delta.list_name, delta.upstream, delta.upstream_ref, delta.model_change) == (
        "EXPORT_SKIPS",
        None,
        None,
        "replace the python loop with torch.cond",
    )
    with pytest.raises(KeyError):
        loaded.by_id("nope")


def test_invalid_toml_raises_ledger_error_with_line(tmp_path: Path) -> None:
    directory = registry(tmp_path, odo='[[entry]]\nid = "a"\nmodels = [\n')
    with pytest.raises(LedgerError) as caught:
        load_ledger(directory)
    assert str(caught.value) == f"{directory / ODO}:3: invalid TOML: Invalid value"  # at end of document

    (directory / ODO).write_text('[[entry]]\nid = "a"\nbackend = onnx\nscope = "all"\n')
    with pytest.raises(LedgerError) as caught:
        load_ledger(directory)
    assert str(caught.value) == f"{directory / ODO}:3: invalid TOML: Invalid value"


def test_load_reports_every_problem(tmp_path: Path) -> None:
    directory = registry(tmp_path, skips=skip_entry("x", backend="tflite") + "\n" + skip_entry("Bad_Id"))
    with pytest.raises(LedgerError) as caught:
        load_ledger(directory)
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (4, "entry 'x': 'backend' must be one of onnx, executorch, dynamo, got 'tflite'"),
        (
            13,
            "entry 'Bad_Id': 'id' must be a kebab-case string (lowercase letters, digits, single hyphens), got 'Bad_Id'",
        ),
    ]


def test_missing_directory_raises_ledger_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"onnx_disable_optimize\.toml:1: ledger file is missing"):
        load_ledger(tmp_path / "absent")


# ── Gating ──
@pytest.mark.parametrize(
    ("scope", "dynamic", "gated"),
    [
        ("all", True, True),
        ("all", False, True),
        ("dynamic", True, True),
        ("dynamic", False, False),
        ("static", True, False),
        ("static", False, True),
    ],
)
def test_gate_follows_scope(tmp_path: Path, scope: str, dynamic: bool, gated: bool) -> None:
    loaded = load_ledger(registry(tmp_path, skips=skip_entry("s", backend="onnx", scope=scope)))
    assert (loaded.skip("T5Model", "onnx", dynamic) is not None) is gated
    assert (loaded.gate("T5Model", "onnx", dynamic, "EXPORT_SKIPS") is not None) is gated


@pytest.mark.parametrize(
    ("entry_backend", "asked", "gated"),
    [
        ("onnx", "onnx", True),
        ("onnx", "executorch", False),
        ("executorch", "onnx", False),
        ("dynamo", "onnx", True),  # torch.export runs under every exporter
        ("dynamo", "executorch", True),
        ("dynamo", "dynamo", True),
        ("onnx", "dynamo", False),
    ],
)
def test_skip_follows_backend(tmp_path: Path, entry_backend: str, asked: str, gated: bool) -> None:
    loaded = load_ledger(registry(tmp_path, skips=skip_entry("s", backend=entry_backend)))
    assert (loaded.skip("T5Model", asked, dynamic=True) is not None) is gated


def test_disable_optimize_and_lists_stay_apart(tmp_path: Path) -> None:
    loaded = load_ledger(
        registry(tmp_path, odo=FIXTURE, skips=skip_entry("s", models='"BertModel"', backend="onnx"))
    )
    assert loaded.disable_optimize("GPT2Model", dynamic=True).id == "beta"
    assert loaded.disable_optimize("GPT2Model", dynamic=False) is None
    assert loaded.disable_optimize("BertModel", dynamic=False).id == "gamma"
    assert loaded.skip("BertModel", "onnx", dynamic=False).id == "s"
    assert loaded.skip("GPT2Model", "onnx", dynamic=True) is None
    assert loaded.disable_optimize("NotListedModel", dynamic=True) is None

    class BertModel:  # a class object gates like its name
        pass

    assert loaded.disable_optimize(BertModel, dynamic=False).id == "gamma"


@pytest.fixture
def fresh_default_ledger():
    ledger.default_ledger.cache_clear()
    yield
    ledger.default_ledger.cache_clear()


@pytest.mark.usefixtures("fresh_default_ledger")
def test_module_constants_follow_env_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = registry(tmp_path, odo=FIXTURE, skips=skip_entry("s", models='"BertModel", "T5Model"'))
    monkeypatch.setenv("EXPORTBOT_REGISTRY", str(directory))
    from exporters.ledger import EXPORT_SKIPS, ONNX_DISABLE_OPTIMIZE

    assert {name: entry.id for name, entry in ONNX_DISABLE_OPTIMIZE.items()} == {
        "T5ForConditionalGeneration": "alpha",
        "BartForConditionalGeneration": "alpha",
        "MBartForConditionalGeneration": "alpha",
        "GPT2Model": "beta",
        "OPTModel": "beta",
        "BertModel": "gamma",
    }
    assert {name: [e.id for e in entries] for name, entries in EXPORT_SKIPS.items()} == {
        "BertModel": ["s"],
        "T5Model": ["s"],
    }
    assert load_ledger().by_id("s").path == directory / SKIPS


# ── Editing ──
def test_remove_middle_entry_takes_its_attached_comment_only(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_entry(fixture_file, "beta")
    start, end = before.index("# About beta"), before.index('[[entry]]\nid = "gamma"')
    assert after == before[:start] + before[end:]
    assert fixture_file.read_text() == after
    assert [e.id for e in load_ledger(fixture_file.parent).entries] == ["alpha", "gamma"]


def test_remove_first_entry_keeps_file_header(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_entry(fixture_file, "alpha")
    start, end = before.index("[[entry]]   # first"), before.index("# About beta")
    assert after == before[:start] + before[end:]


def test_remove_last_entry_takes_separator_and_trailing_comment(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_entry(fixture_file, "gamma")
    assert after == before[: before.index('\n\n[[entry]]\nid = "gamma"')] + "\n"


def test_remove_model_from_multiline_array(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_model(fixture_file, "alpha", "BartForConditionalGeneration")
    assert after == before.replace('    "BartForConditionalGeneration",\n', "", 1)
    assert fixture_file.read_text() == after


def test_remove_model_from_inline_array(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_model(fixture_file, "beta", "OPTModel")
    assert after == before.replace('["GPT2Model",  "OPTModel"]', '["GPT2Model"]', 1)


def test_removing_the_last_model_removes_the_entry(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = remove_model(fixture_file, "gamma", "BertModel")
    fixture_file.write_text(before)
    assert after == remove_entry(fixture_file, "gamma")


def test_set_fixed_in_replaces_value_and_keeps_comment(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    after = set_fixed_in(fixture_file, "beta", "torch>=2.15")
    assert after == before.replace('fixed_in = "torch>=2.14"  # keep', 'fixed_in = "torch>=2.15"  # keep', 1)


def test_set_fixed_in_inserts_after_last_value(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    line = 'fixed_in = "onnxscript>=0.7.3"\n'
    middle = set_fixed_in(fixture_file, "gamma", "onnxscript>=0.7.3")  # before gamma's trailing comment
    assert middle == before.replace("added = 2025-03-04\n", "added = 2025-03-04\n" + line, 1)
    after = set_fixed_in(
        fixture_file, "alpha", "onnxscript>=0.7.3"
    )  # before the blank lines and beta's comment
    assert after == middle.replace("added = 2025-01-02\n", "added = 2025-01-02\n" + line, 1)
    assert load_ledger(fixture_file.parent).by_id("alpha").fixed_in == "onnxscript>=0.7.3"


def test_edit_rejects_invalid_result_and_leaves_file(fixture_file: Path) -> None:
    before = fixture_file.read_text()
    with pytest.raises(LedgerError, match=r":31: entry 'beta': 'fixed_in' is not a version specifier"):
        set_fixed_in(fixture_file, "beta", ">=2.15")
    with pytest.raises(LedgerError, match=r"no entry with id 'nope'"):
        remove_entry(fixture_file, "nope")
    with pytest.raises(LedgerError, match=r"entry 'beta' does not list 'BertModel'"):
        remove_model(fixture_file, "beta", "BertModel")
    assert fixture_file.read_text() == before


def test_add_entry_appends_block_after_blank_line(tmp_path: Path) -> None:
    directory = registry(tmp_path, skips="# header\n")
    path = directory / SKIPS
    fields = {
        "failure": r"Guard \d+ failed",
        "id": "new-skip",
        "models": ["T5Model"],
        "backend": "executorch",
        "scope": "static",
        "dependency": "transformers",
        "reason": "cache update is data dependent",
        "model_change": "use a static cache",
        "added": datetime.date(2025, 5, 6),
    }
    text = add_entry(path, fields)
    assert text == (
        "# header\n\n[[entry]]\n"
        'id = "new-skip"\nmodels = ["T5Model"]\nbackend = "executorch"\nscope = "static"\n'
        'dependency = "transformers"\nreason = "cache update is data dependent"\n'
        "model_change = \"use a static cache\"\nfailure = 'Guard \\d+ failed'\nadded = 2025-05-06\n"
    )
    assert load_ledger(directory).by_id("new-skip").failure == r"Guard \d+ failed"
    second = add_entry(path, {**fields, "id": "other", "scope": "dynamic"})
    assert second.startswith(text + '\n[[entry]]\nid = "other"\n')
    with pytest.raises(LedgerError, match=r"missing required key 'model_change'"):
        add_entry(path, {key: value for key, value in fields.items() if key != "model_change"} | {"id": "x"})
    assert path.read_text() == second


def test_crlf_file_keeps_its_line_endings(tmp_path: Path) -> None:
    directory = registry(tmp_path, skips="")
    path = directory / SKIPS
    text = ("# header\n\n" + skip_entry("one") + "\n" + skip_entry("two", models='"BertModel"')).replace(
        "\n", "\r\n"
    )
    path.write_bytes(text.encode())
    after = remove_entry(path, "two")
    assert path.read_bytes() == after.encode()
    assert after == ("# header\n\n" + skip_entry("one")).replace("\n", "\r\n")
