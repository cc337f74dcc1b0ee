"""What does building XNNPACK's pattern graphs in the warm worker save each forked ExecuTorch export?

Two worker processes run the sweep's own fork path (``bot.run.worker._fork_export``: one supervised child per
export, the child's real export and validation). Both preload what the sweep's worker preloads; only the
``warm`` one also calls ``build_xnnpack_pattern_graphs()`` before forking, so its children inherit the graphs.
The classes run interleaved (cold, warm, cold, warm, ...), best of ``--rounds``, and the script reports per
class the child's CPU seconds and wall seconds both ways, their ratio warm/cold, the statuses (which must
agree) and the worker's one-time warm-up cost. CPU seconds are the figure to read on a shared machine.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_worker_warmup.py

Takes about 10 minutes on two cores; writes ``benchmarks/results/worker_warmup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

CLASSES = ("BertModel", "LlamaModel", "ViTModel")
OUT = Path(__file__).parent / "results" / "worker_warmup.json"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def serve(warm: bool) -> None:
    """A worker: preload (and with ``warm``, build the pattern graphs), then fork one export per stdin line."""
    from bot.run.worker import ChildTask, _fork_export, _warm_up, build_xnnpack_pattern_graphs, preload

    started = time.perf_counter()
    preload(["executorch"])
    _warm_up([])  # torch.export's own warm-up, as the sweep's worker does
    preloaded = time.perf_counter()
    if warm:
        build_xnnpack_pattern_graphs()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    protocol.write(json.dumps({"preload_s": preloaded - started, "patterns_s": time.perf_counter() - preloaded}) + "\n")
    for line in sys.stdin:
        task = ChildTask(**json.loads(line))
        before = _children_cpu()
        report = _fork_export(task, protocol.fileno())
        result = json.loads(Path(task.result_file).read_text()) if Path(task.result_file).exists() else {}
        outcome = result.get("outcome") or {}
        protocol.write(json.dumps({"cpu_s": _children_cpu() - before, "report": asdict(report),
                                   "status": outcome.get("status"), "stage_seconds": outcome.get("stage_seconds")})
                       + "\n")  # fmt: skip


def _task(model: str, scratch: Path, label: str, round_: int) -> dict:
    stem = scratch / f"{model}-{label}-{round_}"
    return {"model": model, "backend": "executorch", "dynamic": False, "ignore_ledger": [], "timeout": 900.0,
            "memory_gb": 8.0, "threads": 1, "log_file": f"{stem}.log", "result_file": f"{stem}.result.json"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="samples per class and way (best is kept)")
    parser.add_argument("--serve", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve == "warm")
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parent.parent)}
    workers = {label: subprocess.Popen([sys.executable, __file__, "--serve", label], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env) for label in ("cold", "warm")}  # fmt: skip
    start_up = {label: json.loads(worker.stdout.readline()) for label, worker in workers.items()}
    samples: dict[str, dict[str, list[dict]]] = {model: {"cold": [], "warm": []} for model in CLASSES}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for model in CLASSES:
                for label, worker in workers.items():
                    load = os.getloadavg()[0]
                    worker.stdin.write(json.dumps(_task(model, Path(scratch), label, round_)) + "\n")
                    worker.stdin.flush()
                    sample = json.loads(worker.stdout.readline())
                    sample["load_average"] = round(load, 2)
                    samples[model][label].append(sample)
                    print(f"{model:<12} {label}: cpu {sample['cpu_s']:.1f} s, wall {sample['report']['wall_seconds']:.1f} s,"
                          f" {sample['status']}, load {load:.1f}", flush=True)  # fmt: skip
    for worker in workers.values():
        worker.stdin.close()
        worker.wait()
    rows = []
    for model, ways in samples.items():
        best = {label: min(ways[label], key=lambda s: s["cpu_s"]) for label in ways}
        rows.append({
            "model": model,
            "cold_cpu_s": round(best["cold"]["cpu_s"], 2), "warm_cpu_s": round(best["warm"]["cpu_s"], 2),
            "cold_wall_s": best["cold"]["report"]["wall_seconds"], "warm_wall_s": best["warm"]["report"]["wall_seconds"],
            "cpu_ratio_warm_over_cold": round(best["warm"]["cpu_s"] / best["cold"]["cpu_s"], 3),
            "wall_ratio_warm_over_cold": round(best["warm"]["report"]["wall_seconds"]
                                               / best["cold"]["report"]["wall_seconds"], 3),
            "statuses": sorted({s["status"] for way in ways.values() for s in way}),
        })  # fmt: skip
    report = {
        "what": __doc__.splitlines()[0],
        "cpus": os.cpu_count(),
        "worker_start_up_s": {label: {k: round(v, 2) for k, v in times.items()} for label, times in start_up.items()},
        "rows": rows,
        "median_cpu_ratio": statistics.median(row["cpu_ratio_warm_over_cold"] for row in rows),
        "samples": samples,
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['model']:<12} cpu {row['cold_cpu_s']:>6} -> {row['warm_cpu_s']:>6} s ({row['cpu_ratio_warm_over_cold']}),"
              f" wall {row['cold_wall_s']:>6} -> {row['warm_wall_s']:>6} s, statuses {row['statuses']}")  # fmt: skip
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
