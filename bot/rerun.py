"""Re-run a ledger entry's exports with the workaround removed, each in its own process.

Why a subprocess per export: a re-run must not share state with the audit (patched modules, torch
caches, a half-initialised exporter) and must be killable: a hang becomes status ``timeout`` instead of
a stuck job. Each run is ``python -m bot export CLASS --backend B --static|--dynamic --ignore-ledger``:
``--ignore-ledger`` makes an ``EXPORT_SKIPS`` class export at all and an ``ONNX_DISABLE_OPTIMIZE`` class
export with the optimizer on, i.e. exactly "without the workaround".

The runner is a plain callable ``run_export(model_class, backend, dynamic) -> dict`` (an outcome record
as :class:`bot.runner.ExportOutcome.as_dict` gives), so verdict logic can be tested without exports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporters.ledger import LedgerEntry

TIMEOUT = "timeout"
DEFAULT_RUNS = 2
DEFAULT_TIMEOUT = 600.0

RunExport = Callable[[str, str, bool], dict[str, Any]]


def scope_modes(scope: str) -> list[bool]:
    """The ``dynamic`` flags an entry's scope covers: ``all`` → static and dynamic."""
    return {"all": [False, True], "static": [False], "dynamic": [True]}[scope]


def subprocess_runner(timeout: float = DEFAULT_TIMEOUT) -> RunExport:
    """A runner exporting in a fresh ``sys.executable -m bot export`` process, killed after ``timeout`` s."""

    def run_export(model_class: str, backend: str, dynamic: bool) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="exportbot-rerun-") as scratch:
            record = Path(scratch) / "outcome.json"
            command = [
                sys.executable, "-m", "bot", "export", model_class, "--backend", backend,
                "--dynamic" if dynamic else "--static", "--ignore-ledger",
                "--outcome-json", str(record), "--out", str(Path(scratch) / "out"),
            ]  # fmt: skip
            base = {"model": model_class, "backend": backend, "dynamic": dynamic}
            env = os.environ | {"HF_HUB_OFFLINE": "1"}
            try:
                done = subprocess.run(
                    command, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout
                )
            except subprocess.TimeoutExpired:  # subprocess.run kills the child before raising
                return base | {"status": TIMEOUT, "error": f"timed out after {timeout:g} s"}
            if record.is_file():
                return json.loads(record.read_text(encoding="utf-8"))
            tail = (done.stderr or done.stdout or "").strip()[-2000:]
            return base | {"status": "failed", "error": f"exit {done.returncode} without an outcome: {tail}"}

    return run_export


def rerun_entry(entry: LedgerEntry, run_export: RunExport, runs: int = DEFAULT_RUNS) -> list[dict[str, Any]]:
    """Every model class × shape mode of ``entry``, ``runs`` times each (to catch flaky passes)."""
    outcomes = []
    for model_class in entry.models:
        for dynamic in scope_modes(entry.scope):
            for attempt in range(1, runs + 1):
                outcome = run_export(model_class, entry.backend, dynamic)
                outcomes.append(outcome | {"run": attempt})
    return outcomes
