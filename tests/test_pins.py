"""bot.audit.pins: strict reading of constraints.txt, pin diffs, per-backend stacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.audit.pins import (
    BACKEND_STACK,
    PinFileError,
    diff_pins,
    find_pin_file,
    normalize_name,
    parse_pins,
    read_pins,
    stack_versions,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "constraints.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_project_pin_file_pins_every_backend_stack() -> None:
    pins = read_pins(REPO_ROOT / "constraints.txt")
    for backend in BACKEND_STACK:
        versions = stack_versions(pins, backend)
        assert list(versions) == BACKEND_STACK[backend]
        assert all(versions.values())


def test_names_are_pep503_normalised_and_comments_ignored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# header comment\n\nPyGithub==2.10.0\n"
        "Foo_Bar.baz == 1.0rc1  # inline comment\n   \ntorch==2.13.0+cpu\n",
    )
    assert read_pins(path) == {"pygithub": "2.10.0", "foo-bar-baz": "1.0rc1", "torch": "2.13.0+cpu"}
    assert normalize_name("Foo__Bar..-Baz") == "foo-bar-baz"


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("torch>=2.1", "expected 'name==version'"),
        ("torch", "expected 'name==version'"),
        ("torch==", "not an exact version"),
        ("torch==2.*", "not an exact version"),
        ("torch===2.1", "not an exact version"),
        ("torch[cpu]==2.1", "not a plain package name"),
        ('torch==2.1; python_version > "3.10"', "not an exact version"),
        ("-r other.txt", "pip options (-r)"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, complaint: str) -> None:
    path = write(tmp_path, f"# pins\nonnx==1.23.2\n{line}\n")
    with pytest.raises(PinFileError) as caught:
        read_pins(path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert complaint in str(caught.value)


def test_duplicate_pin_after_normalisation_is_an_error() -> None:
    with pytest.raises(PinFileError, match=r"pins.txt:3: typing.extensions is already pinned on line 1"):
        parse_pins("Typing_Extensions==4.0\nclick==8.5.1\ntyping.extensions==4.1\n", source="pins.txt")


def test_unreadable_pin_file(tmp_path: Path) -> None:
    with pytest.raises(PinFileError, match="cannot read pin file"):
        read_pins(tmp_path / "missing.txt")


def test_find_pin_file_walks_up_from_a_subdirectory(tmp_path: Path) -> None:
    (tmp_path / "project" / "a" / "b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    path = write(tmp_path / "project", "torch==2.13.0\n")
    assert find_pin_file(tmp_path / "project" / "a" / "b") == path.resolve()
    with pytest.raises(PinFileError, match=r"no constraints\.txt"):
        find_pin_file(tmp_path / "elsewhere")


def test_read_pins_defaults_to_the_file_found_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "onnxscript==0.7.2\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert read_pins() == {"onnxscript": "0.7.2"}


def test_diff_pins_reports_changed_added_and_removed_only() -> None:
    old = {"torch": "2.12.0", "onnx": "1.23.2", "torchao": "0.17.0"}
    new = {"torch": "2.13.0", "onnx": "1.23.2", "executorch": "1.5.1"}
    diff = diff_pins(old, new)
    assert diff == {"executorch": (None, "1.5.1"), "torch": ("2.12.0", "2.13.0"), "torchao": ("0.17.0", None)}
    assert list(diff) == sorted(diff)
    assert diff_pins(new, new) == {}


def test_stack_versions_follow_backend_order() -> None:
    pins = parse_pins(
        "onnxruntime==1.32.0\nonnxscript==0.7.2\nonnx==1.23.2\ntransformers==5.23.0\ntorch==2.13.0\n"
    )
    assert list(stack_versions(pins, "onnx").items()) == [
        ("torch", "2.13.0"),
        ("transformers", "5.23.0"),
        ("onnx", "1.23.2"),
        ("onnxscript", "0.7.2"),
        ("onnxruntime", "1.32.0"),
    ]
    assert stack_versions(pins, "dynamo") == {"torch": "2.13.0", "transformers": "5.23.0"}


def test_stack_versions_missing_pin_and_unknown_backend() -> None:
    pins = parse_pins("torch==2.13.0\ntransformers==5.23.0\n")
    with pytest.raises(PinFileError, match=r"no version for executorch, torchao \(needed by executorch\)"):
        stack_versions(pins, "executorch")
    with pytest.raises(ValueError, match="unknown backend 'tflite'; known: dynamo, onnx, executorch"):
        stack_versions(pins, "tflite")
