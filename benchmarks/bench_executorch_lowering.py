"""Lowering time of our ExecuTorch exporter with its lowering speed patches against ours without them.

Run: ``HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python benchmarks/bench_executorch_lowering.py`` (the default models,
~35 min on 2 shared cores), or narrow it: ``--models LlamaModel FunnelModel --repeat 2``; ``--dynamic`` exports
with dynamic dims. Writes benchmarks/results/executorch_lowering.json (``executorch_lowering_dynamic.json``).

Two paths per model, both ``ExecutorchExporter`` XNNPACK (static, or dynamic with ``--dynamic``): ``with`` (every workaround) and ``without``
(``without={--patches}``, by default every patch of exporters/executorch/lowering.py, as ``--without`` does on
the command line). Every sample runs in a fresh child process, which first lowers a one-Linear module (imports
and XNNPACK's once-per-process pattern graphs stay out of every timing), then builds the tiny model and times
one export. The two paths alternate, the order flipped each round; each cell is the best of ``--repeat``
samples. The figure is the CPU seconds of ``to_edge_transform_and_lower`` (``lowering_cpu``), the stage the
patches act in; ``export_cpu`` is the whole export call. On the shared machine CPU seconds of one path vary a
few per cent where wall seconds vary 2x, so ratios come from CPU seconds. Each sample also records the
SHA-256 of the serialized ``.pte``: the patches must not change it, and a row whose two paths differ says so
(``same_pte: false``), and the child's peak RSS (``peak_rss_mb``, what ``_patch_dependency_closures_as_bitsets``
acts on; the warm-up and the tiny model count in both paths alike).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULT_PREFIX = "BENCH_RESULT "
DEFAULT_MODELS = ["LlamaModel", "BertModel", "FunnelModel", "Kosmos2_5Model", "DeepseekV32ForCausalLM"]
DEFAULT_OUT = Path(__file__).parent / "results" / "executorch_lowering.json"


def _lowering_patches() -> list[str]:
    import exporters.executorch.lowering as lowering
    from exporters.utils import all_workarounds

    return sorted(w.name for w in all_workarounds() if w.func.__module__ == lowering.__name__)


def child(name: str, path: str, patches: list[str], dynamic: bool) -> dict[str, Any]:
    """One timed sample, in this (child) process."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import executorch.exir as exir
    import torch

    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
    from exporters.tiny import build_tiny

    lowering: list[float] = []
    real_lowering = exir.to_edge_transform_and_lower

    def timed_lowering(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return real_lowering(*args, **kwargs)
        finally:
            lowering.append(time.process_time() - start)

    exir.to_edge_transform_and_lower = timed_lowering  # the exporter imports it from executorch.exir per call
    without = frozenset(patches) if path == "without" else frozenset()
    exporter = ExecutorchExporter(ExecutorchConfig(dynamic=dynamic, without=without))
    warm_up = ExecutorchExporter(ExecutorchConfig(without=without))  # static: a lone Linear keeps no dynamic dim
    warm_up.export(torch.nn.Linear(8, 8), {"input": torch.randn(2, 8)})
    tiny = build_tiny(name)
    lowering.clear()
    load_before = os.getloadavg()[0]
    start, cpu_start = time.perf_counter(), time.process_time()
    result = exporter.export(tiny.model, dict(tiny.inputs))
    buffer = result.artifact.buffer
    return {
        "seconds": round(time.perf_counter() - start, 3),
        "export_cpu": round(time.process_time() - cpu_start, 3),
        "lowering_cpu": round(lowering[0], 3),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "pte_sha256": hashlib.sha256(buffer).hexdigest(),
        "pte_bytes": len(buffer),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "fired": {k: v for k, v in result.metadata.workarounds_fired.items() if k in patches},
        "stage_seconds": result.metadata.stage_seconds,
    }


def _sample(name: str, path: str, patches: list[str], dynamic: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, path, ",".join(patches)] + (["--dynamic"] if dynamic else [])
    completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:300]}


def _row(name: str, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name}
    for path, taken in samples.items():
        good = [s for s in taken if "error" not in s]
        row[path] = {
            "lowering_cpu": min((s["lowering_cpu"] for s in good), default=None),
            "export_cpu": min((s["export_cpu"] for s in good), default=None),
            "peak_rss_mb": min((s["peak_rss_mb"] for s in good), default=None),
            "samples": taken,
        }
    best = {path: row[path]["lowering_cpu"] for path in samples}
    if all(best.values()):
        row["with_vs_without_lowering_cpu"] = round(best["with"] / best["without"], 3)
        row["with_vs_without_export_cpu"] = round(row["with"]["export_cpu"] / row["without"]["export_cpu"], 3)
        row["with_vs_without_peak_rss"] = round(row["with"]["peak_rss_mb"] / row["without"]["peak_rss_mb"], 3)
    hashes = {s["pte_sha256"] for taken in samples.values() for s in taken if "error" not in s}
    row["same_pte"] = len(hashes) == 1
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "PATH", "PATCHES"), help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--repeat", type=int, default=2, help="samples per path and model (the best counts)")
    parser.add_argument("--patches", nargs="+", default=None,
                        help="workarounds the 'without' path runs without (default: every lowering speed patch)")
    parser.add_argument("--dynamic", action="store_true",
                        help="export with dynamic batch and sequence dims (what the guards patch acts on)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {DEFAULT_OUT.name}, or its _dynamic twin with --dynamic")
    args = parser.parse_args()
    if args.child:
        name, path, patches = args.child
        print(RESULT_PREFIX + json.dumps(child(name, path, patches.split(","), args.dynamic)), flush=True)
        return
    patches = args.patches or _lowering_patches()
    out = args.out or DEFAULT_OUT.with_stem(DEFAULT_OUT.stem + ("_dynamic" if args.dynamic else ""))
    rows = []
    for name in args.models:
        samples: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
        for round_ in range(args.repeat):
            for path in (("with", "without") if round_ % 2 == 0 else ("without", "with")):
                sample = _sample(name, path, patches, args.dynamic)
                samples[path].append(sample)
                print(name, path, {k: sample.get(k) for k in ("lowering_cpu", "export_cpu", "peak_rss_mb", "seconds", "error")},
                      flush=True)
        rows.append(_row(name, samples))
        print(name, {k: v for k, v in rows[-1].items() if k not in ("with", "without")}, flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "nproc": os.cpu_count(), "repeat": args.repeat, "dynamic": args.dynamic, "patches": patches, "rows": rows,
        }, indent=1) + "\n")  # after every model: a stopped run keeps what it measured


if __name__ == "__main__":
    main()
