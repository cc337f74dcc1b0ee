"""Is the interpreter that runs the re-runs the one the report will name? Checked before any re-run.

Why: a verdict says "still fails at torch 2.13.0" or "passes at onnx 1.24.0". If the exports ran in an
interpreter holding other versions, that sentence is false and a removal could rest on it. The versions
are asked of the interpreter that runs the exports (a subprocess, once per audit), not of the pin file.
``mismatches`` is the pure comparison; ``EnvironmentCheck`` does the asking and caching.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from bot.audit.pins import BACKEND_STACK, normalize_name
from bot.audit.plan import Subject, same_version
from bot.errors import UsageProblem

NOT_INSTALLED = "not installed"
_ASK = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "found = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found[name] = metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n"
    f"        found[name] = {NOT_INSTALLED!r}\n"
    "print(json.dumps(found))\n"
)


class EnvironmentMismatch(UsageProblem):
    """The interpreter running the exports does not hold the pinned stack: exit 2, one line."""


def mismatches(stack: Iterable[str], pins: Mapping[str, str], installed: Mapping[str, str]) -> list[str]:
    """``"torch 2.12.0 (pinned 2.13.0)"`` for every stack package whose installed release is not its pin."""
    found = []
    for name in stack:
        pinned = pins.get(normalize_name(name))
        have = installed.get(name, NOT_INSTALLED)
        if pinned is None:
            found.append(f"{name} (not pinned in constraints.txt)")
        elif have == NOT_INSTALLED or not same_version(have, pinned):
            found.append(f"{name} {have} (pinned {pinned})")
    return found


def interpreter_versions(python: str | Path, packages: Iterable[str]) -> dict[str, str]:
    """The installed version of each package, as ``python`` itself reports it (``not installed`` if absent)."""
    names = list(packages)
    done = subprocess.run(
        [str(python), "-c", _ASK, *names], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentMismatch(f"cannot ask {python} for its package versions: {tail[0]}")
    return json.loads(done.stdout)


class EnvironmentCheck:
    """``check(subject)`` before a subject's re-runs: its stack's versions, or :class:`EnvironmentMismatch`.

    The interpreter is asked once (every backend's stack together) and the answer reused.
    """

    def __init__(self, python: str | Path, pins: Mapping[str, str]) -> None:
        self.python, self.pins = python, pins
        self._installed: dict[str, str] | None = None

    def __call__(self, subject: Subject) -> dict[str, str]:
        if self._installed is None:
            everything = dict.fromkeys(name for stack in BACKEND_STACK.values() for name in stack)
            self._installed = interpreter_versions(self.python, [*everything, *subject.stack])
        elif any(name not in self._installed for name in subject.stack):
            self._installed |= interpreter_versions(self.python, subject.stack)
        wrong = mismatches(subject.stack, self.pins, self._installed)
        if wrong:
            raise EnvironmentMismatch(
                f"the interpreter running the re-runs ({self.python}) does not hold the pinned stack of "
                f"{subject.id}: {', '.join(wrong)}; install the pins (pip install -c constraints.txt ...) "
                "or audit with --candidate, which builds an isolated environment from them"
            )
        return {name: self._installed[name] for name in subject.stack}
