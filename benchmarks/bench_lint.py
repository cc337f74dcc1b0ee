"""Benchmark ``exportbot lint``: the whole command, as a user runs it, against torch's default thread count.

Most of lint is building and running every ledger entry's reproducer (tiny models) once in eager. It runs them
on one intra-op thread (``bot.cli.lint.one_thread``); the baseline is the same command with that context made a
no-op, i.e. torch's default of one thread per core, which is what lint did before. Each round runs both, in
turn, each in a fresh process (imports and model builds included), so both see the same machine load; the
ratio is taken round by round and its median reported. Also checked: lint writes nothing to stderr (no
transformers model-init notes, no progress bars). Run: ``.venv/bin/python benchmarks/bench_lint.py [rounds]``;
results go to ``benchmarks/results/lint.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import contextlib, sys
import bot.cli.lint
if sys.argv[1] == "baseline":
    bot.cli.lint.one_thread = contextlib.nullcontext  # torch's default threads: lint before the change
from bot.cli.main import main
main(["lint"])
"""


def run(side: str) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, side], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=1800)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "exit": done.returncode, "stderr_lines": len(done.stderr.splitlines()),
            "summary": (done.stdout.strip().splitlines() or [""])[-1]}


def main(rounds: int = 3) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"one_thread": [], "baseline": []}
    loads = []
    for _ in range(rounds):
        loads.append(os.getloadavg()[0])
        for side in runs:
            runs[side].append(run(side))
    ratios = [a["seconds"] / b["seconds"] for a, b in zip(runs["one_thread"], runs["baseline"])]
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "exportbot lint (whole process, fresh interpreter per run)",
        "cores": os.cpu_count(), "load_average_at_round_start": [round(v, 2) for v in loads],
        "median_seconds": {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()},
        "median_ratio_one_thread_vs_baseline": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "runs": runs,
    }
    out = ROOT / "benchmarks" / "results" / "lint.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_seconds", "median_ratio_one_thread_vs_baseline", "ratios",
                                             "load_average_at_round_start")}))
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
