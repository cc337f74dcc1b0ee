"""Real dependency moves, audited in real candidate environments (slow: each installs a release).

Each move is a ledger entry of ``tests/real_releases/registry`` (not the project's ledger) for a bug that a
real release fixed, found from upstream release notes and threads and verified by real runs:

* at the old release, ``exportbot audit --update-verification`` re-runs the entry's reproducer, sees it
  fail with the recorded text, and verifies the entry (``still-needed``);
* with the pin moved to the new release, the audit re-runs it in an environment holding that release and
  says ``removable``;
* an entry whose bug is still present at the new release stays ``still-needed``;
* the false-removal guard: the Dinov2 entry's bug shows only with its reproducer (pixel_values smaller
  than the configured image size); the default tiny model of its class passes at the old release, and
  the entry is still not removable there.

Every audit runs as the bot runs it: ``python -m bot audit`` in the environment of the release, whose
interpreter the audit checks against the pin file next to the registry. The measured results (first
error line at the old release, verdicts, seconds) are committed in ``tests/real_releases/measured.json``;
``EXPORTBOT_RECORD_MEASURED=1`` rewrites it. About 3 to 8 minutes per move on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_github import fake_github_fixture  # noqa: F401 (provides the fake_github fixture)

from bot.audit.pins import constraints_with, normalize_name, read_pins
from bot.run.venvs import DEFAULT_CACHE, ensure_venv, project_dependencies, site_packages

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "tests" / "real_releases" / "registry"
MEASURED = REPO / "tests" / "real_releases" / "measured.json"
SNAPSHOT = REPO / "registry" / "upstream-snapshot.json"
PINS_TEXT = (REPO / "constraints.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Move:
    entry: str
    package: str
    old: str
    new: str
    verdict_at_new: str  # "removable", or "still-needed" where the new release still has the bug


MOVES = [
    Move("dinov2-registers-antialias-resize-onnx", "onnxscript", "0.7.0", "0.7.1", "removable"),
    Move("afmoe-experts-tolist-loop", "transformers", "5.3.0", "5.4.0", "removable"),  # bisect-afmoe.json
    Move("dinov2-registers-antialias-resize-onnx", "onnxscript", "0.6.0", "0.7.0", "still-needed"),
    Move("xnnpack-prelu-rank3-channels-last-pass", "executorch", "1.4.0", "1.5.1", "still-needed"),
    Move("xnnpack-prelu-slope-freed-after-load", "executorch", "1.4.0", "1.5.1", "removable"),  # executorch#21480
]


def python_with(package: str, version: str) -> Path:
    """The interpreter of a candidate environment holding ``package==version`` (the pinned one if pinned)."""
    if read_pins(REPO / "constraints.txt")[normalize_name(package)] == version:
        return Path(sys.executable)
    name = normalize_name(package)
    # scripts/version_window.py's environments, else exportbot bisect's: both layered on the pinned one
    made = [DEFAULT_CACHE / f"window-{name}-{version}", DEFAULT_CACHE / f"{name}-{version}-layered"]
    directory = next((d for d in made if (d / "bin" / "python").is_file()), made[0])
    return ensure_venv(directory, constraints_with(PINS_TEXT, package, version), project_dependencies(),
                       base=site_packages())  # fmt: skip


def audit(workdir: Path, python: Path, entry: str, *extra: str) -> tuple[dict[str, Any], float]:
    """``python -m bot audit`` on the registry copy in ``workdir`` (its constraints.txt beside it)."""
    out = workdir / f"audit-{time.monotonic_ns()}.json"
    started = time.perf_counter()
    done = subprocess.run(
        [str(python), "-m", "bot", "audit", "--registry", str(workdir / "registry"), "--tracker", str(SNAPSHOT),
         "--entry", entry, "--runs", "1", "--timeout", "900", "--json", str(out), *extra],
        cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    assert out.is_file(), f"audit wrote no report (exit {done.returncode}): {done.stderr[-2000:]}"
    [row] = [e for e in json.loads(out.read_text())["entries"] if e["id"] == entry]
    return row, seconds


def first_error_line(row: dict[str, Any]) -> str:
    for outcome in row.get("outcomes") or row.get("evidence") or []:
        error = (outcome.get("error") or "").strip()
        if error:
            return error.splitlines()[0][:160]
    return ""


def record(key: str, data: dict[str, Any]) -> None:
    if not os.environ.get("EXPORTBOT_RECORD_MEASURED"):
        return
    measured = json.loads(MEASURED.read_text()) if MEASURED.is_file() else {}
    measured[key] = data
    MEASURED.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("move", MOVES, ids=lambda m: f"{m.entry}-{m.old}-{m.new}")
def test_a_real_move_verifies_at_the_old_release_and_is_judged_at_the_new(tmp_path, move):
    shutil.copytree(REGISTRY, tmp_path / "registry")
    pins = tmp_path / "constraints.txt"
    pins.write_text(constraints_with(PINS_TEXT, move.package, move.old), encoding="utf-8")
    old_row, old_seconds = audit(tmp_path, python_with(move.package, move.old), move.entry, "--update-verification")
    assert old_row["verdict"] == "still-needed", old_row
    verified = (tmp_path / "registry" / "verified.toml").read_text()
    assert move.entry in verified and f'{move.package} = "{move.old}"' in verified

    pins.write_text(constraints_with(PINS_TEXT, move.package, move.new), encoding="utf-8")
    new_row, new_seconds = audit(tmp_path, python_with(move.package, move.new), move.entry)
    record(f"{move.entry} {move.package} {move.old}->{move.new}", {
        "entry": move.entry, "package": move.package, "old": move.old, "new": move.new,
        "at_old": old_row["verdict"], "first_error_line_at_old": first_error_line(old_row),
        "verdict_at_new": new_row["verdict"], "reasons_at_new": new_row.get("reasons"),
        "seconds": round(old_seconds + new_seconds, 1),
    })  # fmt: skip
    assert new_row["verdict"] == move.verdict_at_new, new_row


@pytest.mark.slow
def test_false_removal_guard_the_default_tiny_model_passing_does_not_remove_the_entry(tmp_path):
    """At onnxscript 0.7.0 the default Dinov2WithRegistersModel passes (no interpolation at the configured
    image size) while the entry's reproducer fails: the audit re-runs the reproducer and keeps the entry."""
    python = python_with("onnxscript", "0.7.0")
    out = tmp_path / "default.json"
    subprocess.run(
        [str(python), "-m", "bot", "export", "Dinov2WithRegistersModel", "--backend", "onnx", "--static",
         "--ignore-ledger", "--out", str(tmp_path / "out"), "--outcome-json", str(out)],
        cwd=tmp_path, env=os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                                        "EXPORTBOT_REGISTRY": str(REGISTRY)},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    default = json.loads(out.read_text())
    assert default["status"] == "pass" and default["versions"]["onnxscript"] == "0.7.0", default
    shutil.copytree(REGISTRY, tmp_path / "registry")
    (tmp_path / "constraints.txt").write_text(constraints_with(PINS_TEXT, "onnxscript", "0.7.0"))
    row, seconds = audit(tmp_path, python, "dinov2-registers-antialias-resize-onnx", "--update-verification")
    record("false-removal guard dinov2 onnxscript 0.7.0", {
        "default_tiny_model": default["status"], "verdict": row["verdict"], "seconds": round(seconds, 1),
    })  # fmt: skip
    assert row["verdict"] == "still-needed", row


# The Dinov2 reproducer's real failure at onnxscript 0.7.0 (tests/real_releases/measured.json).
DINOV2_FAILURE = ("sample shape: last_hidden_state: mismatch: 469 of 576 elements off (max abs diff 0.0153, atol "
                  "0.0001, rtol 0.001); sample shape: pooler_output: mismatch: 51 of 64 elements off")  # fmt: skip


def test_false_removal_guard_fast(tmp_path, fake_github):
    """The audit judges an entry on its reproducer, never on the class's default tiny model: the default
    passing (as Dinov2WithRegistersModel's does at every onnxscript release) removes nothing."""
    from test_audit import FakeRunner, tracker

    from bot.audit.verification import Verification
    from bot.run.audit_run import run_audit
    from exporters.ledger import load_ledger

    registry = tmp_path / "registry"
    shutil.copytree(REGISTRY, registry)
    ledger = load_ledger(registry)
    entry = ledger.by_id("dinov2-registers-antialias-resize-onnx")
    assert entry.repro is not None and entry.repro.inputs == {"image_size": 16}
    pins = read_pins(REPO / "constraints.txt")
    stack = {"torch": pins["torch"], "transformers": pins["transformers"], "onnx": pins["onnx"],
             "onnxscript": "0.7.0", "onnxruntime": pins["onnxruntime"]}  # fmt: skip
    seen = {entry.id: Verification(entry.id, entry.added, stack, DINOV2_FAILURE, "still-needed", "open")}
    default_calls = []

    def default_tiny_model(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
        default_calls.append(model)
        return {"model": model, "backend": backend, "dynamic": dynamic, "status": "pass", "error": None,
                "max_abs_diff": {"last_hidden_state": 1.7e-6}, "versions": dict(pins)}  # fmt: skip

    reproducer = FakeRunner("mismatch", DINOV2_FAILURE)
    report = run_audit(ledger, tracker(fake_github), pins, seen, default_tiny_model, entry_ids=[entry.id], runs=1,
                       entry_runner=reproducer)  # fmt: skip
    [row] = [r for r in report.entries if r.entry.id == entry.id]
    assert row.verdict.verdict == "still-needed", row.verdict.reasons
    assert reproducer.calls == 1 and default_calls == []
