"""How fast does ``exportbot sweep`` go, and what does the warm fork worker buy?

Runs the same fixed list of 20 classes (Dynamo, static shapes) four ways: warm fork worker and a fresh
interpreter per export (``--no-fork``), each with ``--jobs 1`` and ``--jobs 2``. Every run goes through the
real command line, so the figures include what a user pays: the command's own start-up, worker warm-up, and
writing the records. Reports throughput, per-export wall time, interpreter/import start-up per export, peak
RSS of workers and export children, and whether all four runs agree on every class's status (isolation
must not change outcomes). Writes ``benchmarks/results/sweep.json``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_sweep.py

Takes about five minutes on two cores. CPU seconds (the sweep, its workers and every export child) are
reported next to wall time, with the load average, because on a shared machine wall time moves with other
people's work and CPU time much less.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bot.sweep import read_results

CLASSES = (
    "AlbertModel", "BartModel", "BertModel", "BloomModel", "CLIPVisionModel", "ConvNextModel", "DeiTModel",
    "DistilBertModel", "ElectraModel", "GPT2Model", "GPTNeoModel", "LlamaModel", "MistralModel", "OPTModel",
    "PhiModel", "Qwen2Model", "ResNetModel", "RobertaModel", "ViTForImageClassification", "ViTModel",
)  # fmt: skip
CONFIGS = (("fork", 1), ("fork", 2), ("spawn", 1), ("spawn", 2))
OUT = Path(__file__).parent / "results" / "sweep.json"


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def run_config(runner: str, jobs: int, workdir: Path, classes_file: Path) -> dict[str, Any]:
    """One sweep through the CLI; the figures come from its wall time and its records."""
    results = workdir / f"{runner}-jobs{jobs}.jsonl"
    command = [
        sys.executable, "-c", "from bot.sweep import sweep_group; sweep_group()", "run",
        "--classes", str(classes_file), "--backend", "dynamo", "--static", "--jobs", str(jobs),
        "--results", str(results), "--overwrite", *(["--no-fork"] if runner == "spawn" else []),
    ]  # fmt: skip
    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the sweep, its workers and every export child
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    records = read_results(results)
    child_rss = [r["peak_rss_mb"] for r in records if r.get("peak_rss_mb")]
    return {
        "runner": runner,
        "jobs": jobs,
        "exports": len(records),
        "wall_seconds": round(wall, 2),
        "exports_per_minute": round(60 * len(records) / wall, 1),
        "seconds_per_export": round(wall / len(records), 2),
        "cpu_seconds": round(cpu, 1),
        "median_export_wall_seconds": _median([r["wall_seconds"] for r in records]),
        "median_export_seconds": _median([r["seconds"] for r in records]),
        "median_startup_seconds": _median([r["startup_seconds"] for r in records if r.get("startup_seconds")]),
        "child_peak_rss_mb": {"median": _median(child_rss), "max": max(child_rss, default=None)},
        "worker_rss_mb_max": max((r["worker_rss_mb"] for r in records if r.get("worker_rss_mb")), default=None),
        "statuses": {r["model"]: r["status"] for r in records},
        "load_average_before": round(load_before, 2),
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        workdir = Path(tmp)
        classes_file = workdir / "classes.txt"
        classes_file.write_text("\n".join(CLASSES) + "\n")
        runs = []
        for runner, jobs in CONFIGS:
            run = run_config(runner, jobs, workdir, classes_file)
            runs.append(run)
            print(f"{runner:5} jobs={jobs}: {run['wall_seconds']:6.1f} s wall, {run['cpu_seconds']:6.1f} s CPU, "
                  f"{run['exports_per_minute']:5.1f} exports/min, "
                  f"startup/export {run['median_startup_seconds']} s, child RSS {run['child_peak_rss_mb']}, "
                  f"worker RSS {run['worker_rss_mb_max']}", flush=True)  # fmt: skip
    statuses = [run.pop("statuses") for run in runs]
    by_config = {f"{run['runner']}-jobs{run['jobs']}": run for run in runs}
    spawn, fork = by_config["spawn-jobs1"], by_config["fork-jobs1"]
    report = {
        "what": "20 classes, backend dynamo, static shapes, through `exportbot sweep run`",
        "classes": list(CLASSES),
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "versions": {package: version(package) for package in ("torch", "transformers")},
        "runs": runs,
        "statuses_agree": all(s == statuses[0] for s in statuses),
        "status_counts": {s: list(statuses[0].values()).count(s) for s in sorted(set(statuses[0].values()))},
        "import_startup_seconds_per_export": {
            "spawn": spawn["median_startup_seconds"],
            "fork": fork["median_startup_seconds"],
        },
        "fork_speedup": {
            "jobs1": round(by_config["spawn-jobs1"]["wall_seconds"] / by_config["fork-jobs1"]["wall_seconds"], 2),
            "jobs2": round(by_config["spawn-jobs2"]["wall_seconds"] / by_config["fork-jobs2"]["wall_seconds"], 2),
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("statuses_agree", "status_counts", "import_startup_seconds_per_export",
                                             "fork_speedup")}, indent=2))  # fmt: skip
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
