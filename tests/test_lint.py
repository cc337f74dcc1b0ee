"""Every lint rule, on a bad file written to tmp_path, and the ``lint`` command's output and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers
from click.testing import CliRunner

import exporters
from bot.cli.lint import LintMessage, lint, lint_command
from exporters import utils
from exporters.ledger import default_registry_dir

ODO = "onnx_disable_optimize.toml"
SKIPS = "export_skips.toml"

# Key → TOML literal, one line each: in a block, the header is line 1 and the keys follow in this order.
ODO_KEYS = {
    "id": '"odo-a"',
    "models": '["T5ForConditionalGeneration"]',
    "backend": '"onnx"',
    "scope": '"all"',
    "upstream": '"https://github.com/microsoft/onnxscript/issues/1"',
    "dependency": '"onnxscript"',
    "reason": '"constant folding drops a cast"',
    "failure": '"boom"',
    "added": "2025-01-01",
}
SKIP_KEYS = {
    "id": '"skip-a"',
    "models": '["T5ForConditionalGeneration"]',
    "backend": '"onnx"',
    "scope": '"all"',
    "dependency": '"transformers"',
    "reason": '"python loop over a tensor"',
    "model_change": '"use torch.cond"',
    "failure": '"GuardOnDataDependentSymNode"',
    "added": "2025-01-01",
}


def block(base: dict[str, str], **changes: str | None) -> str:
    """One ``[[entry]]`` block; a change to None drops that key, a new key is appended last."""
    keys = {**base, **changes}
    return "[[entry]]\n" + "".join(f"{key} = {value}\n" for key, value in keys.items() if value is not None)


def registry(tmp_path: Path, odo: str = "", skips: str = "") -> Path:
    (tmp_path / ODO).write_text(odo)
    (tmp_path / SKIPS).write_text(skips)
    return tmp_path


def rendered(messages: list[LintMessage]) -> list[str]:
    return [str(message) for message in messages]


SPECIFIC = (
    "must be one specific GitHub issue or pull request (https://github.com/OWNER/REPO/issues/N or /pull/N)"
)


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        pytest.param(
            ODO,
            '[[entry]]\nid = "x"\nmodels = [1,,]\n',
            [(3, "invalid TOML: Invalid value")],
            id="invalid-toml",
        ),
        pytest.param(
            ODO,
            'title = "ledger"\n' + block(ODO_KEYS),
            [(1, "unknown top-level key 'title' (only [[entry]] tables belong here)")],
            id="unknown-top-level-key",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, colour='"red"'),
            [(11, "entry 'odo-a': unknown key 'colour'")],
            id="unknown-key",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, model_change='"x"'),
            [(11, "entry 'odo-a': unknown key 'model_change'")],
            id="model-change-only-in-skips",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, models='"T5ForConditionalGeneration"'),
            [(3, "entry 'odo-a': 'models' must be a non-empty array of transformers class names")],
            id="models-wrong-type",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, models="[]"),
            [(3, "entry 'odo-a': 'models' must be a non-empty array of transformers class names")],
            id="models-empty",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, models='["BertModel", "BertModel"]'),
            [(3, "entry 'odo-a': 'models' lists 'BertModel' more than once")],
            id="models-duplicate",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, added='"2025-01-01"'),
            [(10, "entry 'odo-a': 'added' must be a TOML date such as 2025-01-31, got '2025-01-01'")],
            id="added-wrong-type",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, id='"Odo_A"'),
            [
                (
                    2,
                    "entry 'Odo_A': 'id' must be a kebab-case string (lowercase letters, digits, single hyphens), got 'Odo_A'",
                )
            ],
            id="id-not-kebab",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, backend='"executorch"'),
            [(4, "entry 'odo-a': 'backend' must be 'onnx' in onnx_disable_optimize.toml, got 'executorch'")],
            id="odo-backend-not-onnx",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS, scope='"sometimes"'),
            [(5, "entry 'skip-a': 'scope' must be one of all, dynamic, static, generate, quantize, got 'sometimes'")],
            id="scope-unknown",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, upstream=None),
            [(1, "entry 'odo-a': missing required key 'upstream'")],
            id="odo-upstream-missing",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, upstream='"https://github.com/microsoft/onnxscript"'),
            [(6, f"entry 'odo-a': 'upstream' {SPECIFIC}, got 'https://github.com/microsoft/onnxscript'")],
            id="odo-upstream-repo-page",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, upstream='"https://github.com/microsoft/onnxscript/issues?q=cast"'),
            [
                (
                    6,
                    f"entry 'odo-a': 'upstream' {SPECIFIC}, got 'https://github.com/microsoft/onnxscript/issues?q=cast'",
                )
            ],
            id="odo-upstream-search",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, upstream='"https://github.com/microsoft"'),
            [(6, f"entry 'odo-a': 'upstream' {SPECIFIC}, got 'https://github.com/microsoft'")],
            id="odo-upstream-org",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, upstream='"https://bugs.example.org/show_bug.cgi?id=1"'),
            [(6, f"entry 'odo-a': 'upstream' {SPECIFIC}, got 'https://bugs.example.org/show_bug.cgi?id=1'")],
            id="odo-upstream-not-github",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS, upstream='"https://github.com/huggingface/transformers"'),
            [
                (
                    11,
                    f"entry 'skip-a': 'upstream' {SPECIFIC}, got 'https://github.com/huggingface/transformers'",
                )
            ],
            id="skip-upstream-repo-page",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS, model_change=None),
            [(1, "entry 'skip-a': missing required key 'model_change'")],
            id="skip-model-change-missing",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS, model_change='"  "'),
            [(8, "entry 'skip-a': 'model_change' must be a non-empty string")],
            id="skip-model-change-empty",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, failure='"("'),
            [
                (
                    9,
                    "entry 'odo-a': 'failure' is not a valid regular expression: missing ), unterminated subpattern at position 0",
                )
            ],
            id="failure-regex",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, fixed_in='"onnxscript"'),
            [
                (
                    11,
                    "entry 'odo-a': 'fixed_in' must be a package and a version specifier only, such as 'onnxscript>=0.7.3', got 'onnxscript'",
                )
            ],
            id="fixed-in-without-version",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, fixed_in='"==="'),
            [
                (
                    11,
                    "entry 'odo-a': 'fixed_in' is not a version specifier such as 'onnxscript>=0.7.3': Expected package name at the start of dependency specifier",
                )
            ],
            id="fixed-in-unparsable",
        ),
        pytest.param(
            ODO,
            block(ODO_KEYS, dependency='"not a package"'),
            [
                (
                    7,
                    "entry 'odo-a': 'dependency' must be the pip package expected to carry the fix (e.g. 'onnxscript'), got 'not a package'",
                )
            ],
            id="dependency-not-a-package",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS) + "\n" + block(SKIP_KEYS, id='"skip-b"', scope='"dynamic"'),
            [
                (
                    14,
                    "entry 'skip-b': 'T5ForConditionalGeneration' is already gated by entry 'skip-a' at {dir}/export_skips.toml:1 (backend 'onnx', scopes 'all' and 'dynamic' overlap)",
                )
            ],
            id="overlap-all-dynamic",
        ),
        pytest.param(
            SKIPS,
            block(SKIP_KEYS, scope='"static"')
            + "\n"
            + block(
                SKIP_KEYS,
                id='"skip-b"',
                scope='"static"',
                models='["BertModel", "T5ForConditionalGeneration"]',
            ),
            [
                (
                    14,
                    "entry 'skip-b': 'T5ForConditionalGeneration' is already gated by entry 'skip-a' at {dir}/export_skips.toml:1 (backend 'onnx', scopes 'static' and 'static' overlap)",
                )
            ],
            id="duplicate-entry",
        ),
    ],
)
def test_rule(tmp_path: Path, file: str, text: str, expected: list[tuple[int, str]]) -> None:
    directory = registry(tmp_path, **{"odo" if file == ODO else "skips": text})
    messages = lint(directory, check_classes=False, check_workarounds=False)
    assert rendered(messages) == [
        f"{directory / file}:{line}: {message.format(dir=directory)}" for line, message in expected
    ]
    assert {m.severity for m in messages} == {"error"}


@pytest.mark.parametrize(
    ("odo", "skips"),
    [
        pytest.param(block(ODO_KEYS), block(SKIP_KEYS), id="same-class-in-both-lists"),
        pytest.param(
            "",
            block(SKIP_KEYS, scope='"dynamic"') + "\n" + block(SKIP_KEYS, id='"skip-b"', scope='"static"'),
            id="dynamic-and-static-do-not-overlap",
        ),
        pytest.param(
            "",
            block(SKIP_KEYS) + "\n" + block(SKIP_KEYS, id='"skip-b"', backend='"executorch"'),
            id="other-backend",
        ),
        pytest.param(
            block(
                ODO_KEYS,
                upstream='"https://github.com/pytorch/pytorch/pull/12#issuecomment-3"',
                fixed_in='"torch>=2.14"',
            ),
            block(SKIP_KEYS, upstream='"https://bugs.example.org/show_bug.cgi?id=1"'),
            id="pull-request-comment-and-other-tracker",
        ),
    ],
)
def test_valid_registry_has_no_messages(tmp_path: Path, odo: str, skips: str) -> None:
    assert lint(registry(tmp_path, odo, skips), check_classes=False, check_workarounds=False) == []


def test_duplicate_id_across_files(tmp_path: Path) -> None:
    directory = registry(tmp_path, block(ODO_KEYS, id='"same"'), block(SKIP_KEYS, id='"same"'))
    assert rendered(lint(directory, check_classes=False, check_workarounds=False)) == [
        f"{directory / SKIPS}:2: duplicate id 'same' (first defined at {directory / ODO}:1)"
    ]


def test_missing_ledger_file(tmp_path: Path) -> None:
    (tmp_path / ODO).write_text("")
    assert rendered(lint(tmp_path, check_classes=False, check_workarounds=False)) == [
        f"{tmp_path / SKIPS}:1: ledger file is missing"
    ]


def test_unknown_model_class(tmp_path: Path) -> None:
    models = '[\n  "T5ForConditionalGeneration",\n  "NoSuchModelForLintTest",\n]'
    directory = registry(tmp_path, odo=block(ODO_KEYS, models=models))
    assert rendered(lint(directory, check_workarounds=False)) == [
        f"{directory / ODO}:5: entry 'odo-a': 'NoSuchModelForLintTest' is not a class of the installed "
        f"transformers {transformers.__version__}"
    ]


def test_reproducer_that_fails_in_eager_is_an_error(tmp_path: Path) -> None:
    """ViT at another image size needs interpolate_pos_encoding: in eager already, so no export can pass."""
    runs = block(SKIP_KEYS, id='"vit-runs"', models='["ViTModel"]')
    fails = block(SKIP_KEYS, id='"vit-fails"', models='["ViTModel"]', scope='"static"', backend='"dynamo"')
    fails += "\n[entry.repro.inputs]\nimage_size = 48\n"
    directory = registry(tmp_path, skips=runs + "\n" + fails)
    messages = rendered(lint(directory, check_workarounds=False))
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        f"{directory / SKIPS}:23: entry 'vit-fails': the reproducer of 'ViTModel' ([entry.repro]) does not run "
        "in eager: ValueError: Input image size (48*48) doesn't match model (32*32)."
    )


def test_checked_in_registry_is_clean() -> None:
    assert lint(default_registry_dir(), check_workarounds=False, check_tracking=False) == []
    tracking = lint(default_registry_dir(), check_classes=False, check_workarounds=False)
    assert [m for m in tracking if m.severity == "error"] == []  # every entry is linked, drafted or known


# ── Workarounds ──
def broken_factory(original):
    """Patches a target that does not exist."""
    return original


def untracked_factory(original):
    """Patches an existing target but names no upstream issue."""
    return original


def tracked_factory(original):
    """Patches an existing target and names its upstream issue."""
    return original


def def_line(name: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if line.startswith(f"def {name}("))


@pytest.fixture
def fresh_workarounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty workaround registry, restored afterwards; exporter modules are not imported."""
    for table in ("_PATCHES", "_FX_NODE_FIXES", "_FX_PROGRAM_FIXES"):
        monkeypatch.setattr(utils, table, {})
    monkeypatch.setattr(utils, "_OTHER_WORKAROUNDS", [])
    monkeypatch.setattr(exporters, "load_all_workarounds", lambda: None)
    monkeypatch.chdir(Path(__file__).parents[1])  # so the source file shows as tests/test_lint.py


@pytest.mark.usefixtures("fresh_workarounds")
def test_workaround_rules(tmp_path: Path) -> None:
    upstream = "https://github.com/pytorch/pytorch/issues/1"
    utils.register_patch("onnx", "json.no_such_function_for_lint", upstream=upstream)(broken_factory)
    utils.register_patch("dynamo", "json.dumps")(untracked_factory)
    utils.register_patch("dynamo", "json.loads", upstream=upstream)(tracked_factory)
    messages = lint(registry(tmp_path), check_classes=False)
    assert rendered(messages) == [
        f"tests/test_lint.py:{def_line('broken_factory')}: workaround 'broken_factory' (onnx): patch target "
        "'json.no_such_function_for_lint' does not resolve: module 'json' has no attribute 'no_such_function_for_lint'",
    ]  # a scratch registry has no upstream drafts beside it: where items stand upstream is not judged
    assert [m.severity for m in messages] == ["error"]


def checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A registry with one linked entry (odo-a) and one without upstream (skip-a), and the drafts beside it,
    where the workaround ``untracked_factory`` is listed as known to have nothing."""
    directory = tmp_path / "registry"
    directory.mkdir()
    registry(directory, block(ODO_KEYS), block(SKIP_KEYS))
    drafts = tmp_path / "docs" / "upstream-drafts"
    (drafts / "scripts").mkdir(parents=True)
    (drafts / "known-untracked.txt").write_text("# had nothing when the rule came in\nuntracked_factory\n")
    return directory, drafts


@pytest.mark.usefixtures("fresh_workarounds")
def test_an_item_with_nothing_upstream_fails_only_when_it_is_new(tmp_path: Path) -> None:
    utils.register_patch("dynamo", "json.dumps")(untracked_factory)
    utils.register_patch("dynamo", "json.loads", upstream="https://github.com/pytorch/pytorch/issues/1")(
        tracked_factory
    )
    directory, drafts = checkout(tmp_path)
    messages = lint(directory, check_classes=False)
    assert [(m.severity, m.message.split(" has ")[0]) for m in messages] == [
        ("error", "entry 'skip-a' (EXPORT_SKIPS entry (onnx, scope all))"),  # new, neither link nor draft
        ("warning", "workaround 'untracked_factory' (patch (dynamo))"),  # listed in known-untracked.txt
    ], [(m.severity, m.message) for m in messages]
    assert "run `exportbot upstream draft skip-a` or `exportbot upstream link skip-a URL`" in messages[0].message

    (drafts / "scripts" / "skip-a.py").write_text("import torch\nraise RuntimeError('boom')\n")
    after = lint(directory, check_classes=False)
    assert [(m.severity, m.message.split(" has ")[0].split(": ")[0]) for m in after] == [
        ("warning", "entry 'skip-a' (EXPORT_SKIPS entry (onnx, scope all))"),  # drafted: no longer an error
        ("warning", "workaround 'untracked_factory' (patch (dynamo))"),
    ], [(m.severity, m.message) for m in after]
    assert "unverified upstream draft: its script was never run" in after[0].message

    code, lines = invoke("--registry", str(directory), "--no-classes")
    assert code == 0 and lines[-1] == ("lint: 0 errors, 2 warnings; upstream: linked 2, verified 0, internal 0, "
                                       "unverified 1, stale 0, nothing 1")  # fmt: skip


def test_exporter_import_failure_points_at_failing_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package_part = tmp_path / "package"
    package_part.mkdir()
    (package_part / "exporter_lint_broken.py").write_text(
        "VALUE = 1\nimport no_such_dependency_for_lint_test\n"
    )
    monkeypatch.setattr(exporters, "__path__", [*exporters.__path__, str(package_part)])
    monkeypatch.setattr(exporters, "EXPORTER_MODULES", ("exporters.exporter_lint_broken",))
    # Only errors: warnings for workarounds other tests already imported depend on test order.
    messages = [m for m in lint(registry(tmp_path), check_classes=False) if m.severity == "error"]
    assert rendered(messages) == [
        f"{package_part / 'exporter_lint_broken.py'}:2: cannot import every exporter module, so not every "
        "workaround is checked: ModuleNotFoundError: No module named 'no_such_dependency_for_lint_test'"
    ]


# ── The command ──
def invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(lint_command, list(args))
    return result.exit_code, result.output.splitlines()


def test_command_clean_registry_exits_0(tmp_path: Path) -> None:
    directory = registry(tmp_path, block(ODO_KEYS), block(SKIP_KEYS))
    assert invoke("--registry", str(directory), "--no-classes", "--no-workarounds") == (
        0,
        ["lint: 0 errors, 0 warnings"],
    )


def test_command_errors_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = registry(tmp_path, block(ODO_KEYS, colour='"red"'))
    monkeypatch.setenv("EXPORTBOT_REGISTRY", str(directory))  # the default directory follows the variable
    assert invoke("--no-classes", "--no-workarounds") == (
        1,
        [f"{directory / ODO}:11: entry 'odo-a': unknown key 'colour'", "lint: 1 error, 0 warnings"],
    )


def test_command_missing_directory_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert invoke("--registry", str(missing)) == (2, [f"Error: registry directory {missing} does not exist"])


@pytest.mark.usefixtures("fresh_workarounds")
def test_command_warnings_do_not_fail(tmp_path: Path) -> None:
    directory, _ = checkout(tmp_path)
    utils.register_patch("dynamo", "json.dumps")(untracked_factory)
    code, lines = invoke("--registry", str(directory), "--no-classes")
    assert code == 1  # skip-a: a new item with nothing upstream
    (tmp_path / "docs" / "upstream-drafts" / "known-untracked.txt").write_text("untracked_factory\nskip-a\n")
    code, lines = invoke("--registry", str(directory), "--no-classes")
    assert code == 0 and lines[-1].startswith("lint: 0 errors, 2 warnings; upstream: linked 1, ")
    assert len(lines) == 3 and all(": warning: " in line for line in lines[:2])


def test_a_timeout_failure_needs_its_own_budget(tmp_path: Path) -> None:
    """A slowness entry without budget_s would be judged by the audit's --timeout: a long one lets the slow
    export pass and reads as a fix (the onnx Resize-folding false removal)."""
    slow = block(SKIP_KEYS, failure="'timed out after \\d+ s|timeout'")
    found = lint(registry(tmp_path, skips=slow), check_classes=False, check_workarounds=False)
    assert rendered(found) == [
        f"{tmp_path / SKIPS}:9: entry 'skip-a': its failure /timed out after \\d+ s|timeout/ is a timeout, so it "
        "needs [entry.repro] budget_s (the seconds past which its export counts as too slow, whatever --timeout says)"
    ]
    budgeted = slow + "\n[entry.repro]\nbudget_s = 90\n"
    assert lint(registry(tmp_path, skips=budgeted), check_classes=False, check_workarounds=False) == []
    not_slow = block(SKIP_KEYS)  # GuardOnDataDependentSymNode: no budget needed
    assert lint(registry(tmp_path, skips=not_slow), check_classes=False, check_workarounds=False) == []


@pytest.mark.usefixtures("fresh_workarounds")
def test_an_internal_workaround_is_neither_nothing_nor_linked_too(tmp_path: Path) -> None:
    utils.register_patch("dynamo", "json.dumps", internal="it fixes exportbot's own walk")(untracked_factory)
    directory, _ = checkout(tmp_path)
    messages = lint(directory, check_classes=False)
    assert [m.message.split(" has ")[0] for m in messages] == ["entry 'skip-a' (EXPORT_SKIPS entry (onnx, scope all))"]
    code, lines = invoke("--registry", str(directory), "--no-classes")
    assert code == 1 and lines[-1].endswith("upstream: linked 1, verified 0, internal 1, unverified 0, stale 0, nothing 1")

    utils.register_patch("dynamo", "json.loads", upstream="https://github.com/pytorch/pytorch/issues/1",
                         internal="it fixes exportbot's own walk")(tracked_factory)  # fmt: skip
    both = [m for m in lint(directory, check_classes=False) if "tracked_factory" in m.message]
    assert [(m.severity, "both an upstream issue and an internal reason" in m.message) for m in both] == [("error", True)]
