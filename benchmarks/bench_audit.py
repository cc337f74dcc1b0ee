"""Benchmark ``exportbot audit`` on 200 entries where nothing moved: cost must be the look-ups only.

Each synthetic entry cites its own upstream issue on the fake GitHub server (tests/fake_github.py) and
is recorded in ``verified.toml`` at the current pins, so every entry should come out ``not-due``. We
count HTTP requests from the server log (target: at most one per distinct issue), export calls (target:
zero) and wall time (target: under 5 s). Run: ``.venv/bin/python benchmarks/bench_audit.py``; the figures
are printed and saved to ``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import datetime
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_github import FakeGitHub  # noqa: E402
from github import Auth, Github  # noqa: E402

from bot.audit.pins import BACKEND_STACK, read_pins  # noqa: E402
from bot.audit.verification import Verification, exporter_version  # noqa: E402
from bot.github.tracker import Tracker  # noqa: E402
from bot.run.audit_run import run_audit  # noqa: E402
from exporters.ledger import load_ledger  # noqa: E402

ENTRIES = 200
REPO = "pytorch/pytorch"


def write_registry(directory: Path, numbers: list[int]) -> None:
    blocks = [
        f'[[entry]]\nid = "synthetic-{i}"\nmodels = ["Model{i}"]\nbackend = "dynamo"\nscope = "all"\n'
        f'upstream = "https://github.com/{REPO}/issues/{n}"\ndependency = "torch"\nreason = "synthetic"\n'
        f'model_change = "none"\nfailure = "boom"\nadded = 2026-01-01\n'
        for i, n in enumerate(numbers)
    ]
    (directory / "export_skips.toml").write_text("\n".join(blocks))
    (directory / "onnx_disable_optimize.toml").write_text("")


def main() -> dict[str, Any]:
    pins = read_pins(ROOT / "constraints.txt")
    stack = {name: pins[name] for name in BACKEND_STACK["dynamo"]}
    exports = 0

    def no_export(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
        nonlocal exports
        exports += 1
        return {"model": model, "status": "pass"}

    with FakeGitHub() as server, tempfile.TemporaryDirectory() as scratch:
        numbers = [server.add_issue(REPO, f"bug {i}") for i in range(ENTRIES)]
        registry = Path(scratch)
        write_registry(registry, numbers)
        ledger = load_ledger(registry)
        today = datetime.date.today()
        verification = {
            e.id: Verification(e.id, today, stack, exporter_version(), "still-needed", "open")
            for e in ledger.entries
        }
        client = Github(base_url=server.url, auth=Auth.Token("ghp_FAKEbench"), retry=None, timeout=5,
                        seconds_between_requests=0, seconds_between_writes=0)  # fmt: skip
        tracker = Tracker.from_env(github=client, web_host="github.com")
        before = len(server.requests)
        started = time.perf_counter()
        report = run_audit(ledger, tracker, pins, verification, no_export)
        seconds = time.perf_counter() - started
        requests = len(server.requests) - before
    results = {
        "entries": ENTRIES,
        "distinct_issues": len(set(numbers)),
        "http_requests": requests,
        "requests_per_issue": round(requests / len(set(numbers)), 3),
        "exports": exports,
        "wall_seconds": round(seconds, 3),
        "verdicts": {k: v for k, v in report.counts().items() if v},
        "targets_met": requests <= len(set(numbers)) and exports == 0 and seconds < 5,
    }
    out = ROOT / "benchmarks" / "results" / "audit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    sys.exit(0 if main()["targets_met"] else 1)
