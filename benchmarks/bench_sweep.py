"""How fast does ``exportbot sweep`` go, and what does the warm fork worker buy?

``--throughput``: exports per hour for ONNX and ExecuTorch (XNNPACK), static shapes, with ``--jobs 1`` and
``--jobs 2``, over fixed class lists, and the wall time a whole-catalogue sweep would take per backend and mode
at that rate (dynamic extrapolated with the dynamic/static time ratio of the committed sweep records). Writes
``benchmarks/results/sweep_throughput.json``; takes 20-40 minutes on two quiet cores.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_sweep.py --throughput

``--from-records``: the export hours the committed whole-catalogue shards took, per backend and mode, summed
from their own records (seconds; no export runs). Writes ``benchmarks/results/sweep_catalogue_time.json``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_sweep.py --from-records

Without either: runs the same fixed list of 20 classes (Dynamo, static shapes) four ways: warm fork worker and a fresh
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

import argparse
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

from bot.sweep.records import merge_records
from bot.sweep.results import read_results

CLASSES = (
    "AlbertModel", "BartModel", "BertModel", "BloomModel", "CLIPVisionModel", "ConvNextModel", "DeiTModel",
    "DistilBertModel", "ElectraModel", "GPT2Model", "GPTNeoModel", "LlamaModel", "MistralModel", "OPTModel",
    "PhiModel", "Qwen2Model", "ResNetModel", "RobertaModel", "ViTForImageClassification", "ViTModel",
)  # fmt: skip
CONFIGS = (("fork", 1), ("fork", 2), ("spawn", 1), ("spawn", 2))
OUT = Path(__file__).parent / "results" / "sweep.json"
# --throughput: ordinary classes of several families; ExecuTorch lowers 5-10x slower, so its list is shorter.
THROUGHPUT_CLASSES = {
    "onnx": ("AlbertModel", "BertModel", "GPT2Model", "LlamaModel", "MistralModel", "OPTModel", "Qwen2Model",
             "ResNetModel", "RobertaModel", "ViTModel"),
    "executorch": ("BertModel", "LlamaModel", "ViTModel"),
}  # fmt: skip
THROUGHPUT_OUT = Path(__file__).parent / "results" / "sweep_throughput.json"
SWEEPS = Path(__file__).parent.parent / "sweeps"
CATALOGUE_TIME_OUT = Path(__file__).parent / "results" / "sweep_catalogue_time.json"


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def run_config(
    runner: str, jobs: int, workdir: Path, classes_file: Path, backend: str = "dynamo"
) -> dict[str, Any]:
    """One sweep through the CLI; the figures come from its wall time and its records."""
    results = workdir / f"{backend}-{runner}-jobs{jobs}.jsonl"
    command = [
        sys.executable, "-c", "from bot.cli.sweep import sweep_group; sweep_group()", "run",
        "--classes", str(classes_file), "--backend", backend, "--static", "--jobs", str(jobs),
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
        "backend": backend,
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
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def _dynamic_over_static(backend: str) -> float | None:
    """Median ratio of dynamic to static export time per class, from the committed sweep records."""
    records = [r for path in sorted(SWEEPS.glob("**/*.jsonl")) if "census" not in str(path)
               for r in read_results(path) if r.get("backend") == backend and r.get("status") == "pass"]  # fmt: skip
    seconds: dict[str, dict[str, float]] = {}
    for record in merge_records(records):
        seconds.setdefault(record["model"], {})[record["mode"]] = record.get("wall_seconds") or record["seconds"]
    ratios = [s["dynamic"] / s["static"] for s in seconds.values() if s.get("static") and s.get("dynamic")]
    return round(statistics.median(ratios), 2) if ratios else None


def catalogue_time() -> None:
    """The export time the committed whole-catalogue shards took, per backend and mode, from their own records.

    Each record's ``wall_seconds`` is its export's wall time in its child (a timeout counts its limit); summed
    over a backend and mode's shard files, that is the sweep's time with ``--jobs 1``, load and all, as it was
    run (the shards ran with ``--jobs 1`` or ``2`` on two shared cores, so the sum is not their elapsed time).
    A mode whose shards are not all committed yet is also extrapolated from its mean to the whole catalogue.
    """
    from bot.sweep.catalogue import enumerate_model_classes

    catalogue = len(enumerate_model_classes())
    seconds: dict[str, list[float]] = {}
    for path in sorted((SWEEPS / "catalogue").glob("*-shard-*-of-8.jsonl")):
        for record in read_results(path):
            key = f"{record['backend']}-{record['mode']}"
            seconds.setdefault(key, []).append(record.get("wall_seconds") or record["seconds"])
    report = {
        "what": "export hours of the committed whole-catalogue shards (sweeps/catalogue/*-shard-*-of-8.jsonl), "
                "summed from each record's wall_seconds: the --jobs 1 time of each sweep as it was run",
        "catalogue_classes": catalogue,
        "modes": {
            key: {
                "records": len(values),
                "export_hours": round(sum(values) / 3600, 1),
                "median_export_seconds": _median(values),
                "export_hours_whole_catalogue": round(sum(values) / len(values) * catalogue / 3600, 1),
            }
            for key, values in sorted(seconds.items())
        },
    }  # fmt: skip
    CATALOGUE_TIME_OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["modes"], indent=2))
    print(f"wrote {CATALOGUE_TIME_OUT}")


def throughput() -> None:
    """Exports per hour for ONNX and ExecuTorch, --jobs 1 and 2, and the whole-catalogue wall time it implies."""
    from bot.sweep.catalogue import enumerate_model_classes

    catalogue = len(enumerate_model_classes())
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        workdir = Path(tmp)
        for backend, classes in THROUGHPUT_CLASSES.items():
            classes_file = workdir / f"{backend}.txt"
            classes_file.write_text("\n".join(classes) + "\n")
            for jobs in (1, 2):
                run = run_config("fork", jobs, workdir, classes_file, backend)
                run["exports_per_hour"] = round(3600 * run["exports"] / run["wall_seconds"])
                runs.append(run)
                print(f"{backend:10} jobs={jobs}: {run['exports_per_hour']:5d} exports/h, {run['wall_seconds']:7.1f} s "
                      f"wall, {run['cpu_seconds']:7.1f} s CPU, load {run['load_average_before']}"
                      f"->{run['load_average_after']}", flush=True)  # fmt: skip
    full_sweep_hours = {}
    for run in runs:
        ratio = _dynamic_over_static(run["backend"])
        static_hours = catalogue * run["wall_seconds"] / run["exports"] / 3600
        full_sweep_hours[f"{run['backend']}-jobs{run['jobs']}"] = {
            "static": round(static_hours, 1),
            "dynamic (estimated)": round(static_hours * ratio, 1) if ratio else None,
            "dynamic_over_static_ratio": ratio,
        }
    report = {
        "what": "exports per hour through `exportbot sweep run --static`, warm fork worker; the full-sweep hours "
                f"multiply the measured wall time per export by the {catalogue} auto-mapped classes",
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                    "note": "shared machine: load averages before/after each run are recorded; wall time moves "
                            "with other people's work, CPU seconds much less"},
        "versions": {package: version(package) for package in ("torch", "transformers", "onnxruntime", "executorch")},
        "classes": {backend: list(classes) for backend, classes in THROUGHPUT_CLASSES.items()},
        "runs": runs,
        "full_sweep_hours": full_sweep_hours,
    }  # fmt: skip
    THROUGHPUT_OUT.parent.mkdir(parents=True, exist_ok=True)
    THROUGHPUT_OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(full_sweep_hours, indent=2))
    print(f"wrote {THROUGHPUT_OUT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughput", action="store_true", help="ONNX and ExecuTorch exports per hour, jobs 1 and 2")
    parser.add_argument("--from-records", action="store_true",
                        help="export hours of the committed catalogue shards, per backend and mode (seconds)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    arguments = parser.parse_args()
    if arguments.from_records:
        catalogue_time()
        return
    if arguments.throughput:
        throughput()
        return
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
