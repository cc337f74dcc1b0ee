"""Read the project's version pins (``constraints.txt``) and say which moved.

Why: an upstream fix matters to us only once the pinned version contains it, so the bot records
workaround evidence against the exact versions of each backend's stack and notices when a pin moves.
``constraints.txt`` is the single source of exact versions; this module reads it strictly (one
``name==version`` per line) so that a typo fails loudly with ``file:line`` instead of silently
dropping a pin.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

PIN_FILE_NAME = "constraints.txt"

# The packages whose versions decide whether an export through a backend works.
BACKEND_STACK: dict[str, list[str]] = {
    "dynamo": ["torch", "transformers"],
    "onnx": ["torch", "transformers", "onnx", "onnxscript", "onnxruntime"],
    "executorch": ["torch", "transformers", "executorch", "torchao"],
}


def stack_of(backend: str) -> list[str]:
    """The pinned packages a backend's exports run on; a backend-scoped workaround's ``executorch.xnnpack``
    runs on ExecuTorch's stack."""
    return BACKEND_STACK[backend.split(".")[0]]


_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


class PinFileError(ValueError):
    """The pin file is missing, malformed, or lacks a pin someone needs; the message says where."""


def normalize_name(name: str) -> str:
    """PEP 503 normalisation, so ``PyGithub``, ``pygithub`` and ``Py_Github`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_pin_file(start: str | Path | None = None) -> Path:
    """``constraints.txt`` in ``start`` (default: the working directory) or the nearest parent."""
    start = Path(start or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        candidate = directory / PIN_FILE_NAME
        if candidate.is_file():
            return candidate
    raise PinFileError(f"no {PIN_FILE_NAME} in {start} or any parent directory")


def read_pins(path: str | Path | None = None) -> dict[str, str]:
    """Pins from ``path`` (default: :func:`find_pin_file`), keyed by normalised name."""
    path = Path(path) if path is not None else find_pin_file()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise PinFileError(f"{path}: cannot read pin file ({error.strerror})") from None
    return parse_pins(text, source=str(path))


def parse_pins(text: str, source: str = PIN_FILE_NAME) -> dict[str, str]:
    """Parse pin-file text; ``source`` names the file in error messages."""
    pins: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, version = _parse_line(line, f"{source}:{number}")
        key = normalize_name(name)
        if key in pins:
            raise PinFileError(f"{source}:{number}: {name} is already pinned on line {first_line[key]}")
        pins[key], first_line[key] = version, number
    return pins


def _parse_line(line: str, where: str) -> tuple[str, str]:
    if line.startswith("-"):
        raise PinFileError(f"{where}: pip options ({line.split()[0]}) are not allowed in the pin file")
    name, sep, version = (part.strip() for part in line.partition("=="))
    if not sep:
        raise PinFileError(f"{where}: expected 'name==version', got {line!r}")
    if not _NAME.fullmatch(name):
        raise PinFileError(f"{where}: {name!r} is not a plain package name (no extras or markers)")
    if not _VERSION.fullmatch(version):
        raise PinFileError(f"{where}: {version!r} is not an exact version for {name}")
    return name, version


def diff_pins(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """Pins that changed, were added (old None) or were removed (new None), sorted by name."""
    names = sorted(set(old) | set(new))
    return {name: (old.get(name), new.get(name)) for name in names if old.get(name) != new.get(name)}


def stack_versions(pins: Mapping[str, str], backend: str) -> dict[str, str]:
    """The pinned versions of ``backend``'s stack, in stack order; every package must be pinned."""
    if backend not in BACKEND_STACK:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKEND_STACK)}")
    packages = BACKEND_STACK[backend]
    missing = [name for name in packages if normalize_name(name) not in pins]
    if missing:
        raise PinFileError(f"{PIN_FILE_NAME} pins no version for {', '.join(missing)} (needed by {backend})")
    return {name: pins[normalize_name(name)] for name in packages}


def same_release(installed: str, version: str) -> bool:
    """``2.14.0+cpu`` is release ``2.14.0``; ``not installed`` is no release."""
    try:
        return Version(installed).public == Version(version).public
    except InvalidVersion:
        return False


def constraints_with(text: str, package: str, version: str) -> str:
    """Pin-file text with ``package`` pinned to ``version``: only the version on its line changes (its name as
    written, a trailing comment and every other byte stay: the bump PR's minimal diff); appended when absent."""
    key = normalize_name(package)
    lines, replaced = [], False
    for line in text.splitlines(keepends=True):
        name = line.split("#", 1)[0].partition("==")[0].strip()
        if name and normalize_name(name) == key:
            line, replaced = re.sub(r"(==\s*)[^\s#]+", lambda m: m.group(1) + version, line, count=1), True
        lines.append(line)
    if not replaced:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"{package}=={version}\n")
    return "".join(lines)
