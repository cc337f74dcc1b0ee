"""Wall time of ExecutorchExporter against the bare ExecuTorch path and transformers' own exporter.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_executorch.py``; writes
benchmarks/results/executorch.json. Static shapes, XNNPACK, no validation timed. Columns, per tiny model:

- bare: ``torch.export.export`` + ``to_edge_transform_and_lower(partitioner=[XnnpackPartitioner()])`` +
  ``to_executorch()``. Models returning a Cache need it registered as a pytree node before torch.export accepts
  them; the bare path uses transformers' registration, outside the timed region.
- ours: ``ExecutorchExporter(ExecutorchConfig()).export(model, inputs)``.
- transformers: ``AutoHfExporter.from_config(ExecutorchConfig(backend="xnnpack")).export(model, inputs, config)``.

Each (model, path) runs in its own child process, one at a time, unlike bench_onnx_dynamo.py: ours and
transformers register different pytree flatteners for the same Cache classes and the first registration in
a process wins, so sharing a process would change what the later path runs. Every child imports everything
and lowers a one-Linear module first (ExecuTorch builds its XNNPACK pattern graphs once per process, ~3 s),
then builds the model and times only the path. Each cell is the best of ``--repeat`` children, the paths
interleaved; every sample is kept, with the 1-minute load average around it: the machine is shared, and one
sample varies by about 10-20 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODELS = ["LlamaForCausalLM", "BertModel", "ViTForImageClassification", "T5ForConditionalGeneration"]
PATHS = ["bare", "ours", "transformers"]
RESULT_PREFIX = "BENCH-RESULT "


def run_bare(model: Any, inputs: dict[str, Any]) -> bytes:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        program = torch.export.export(model, args=(), kwargs=inputs)
    return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def run_ours(model: Any, inputs: dict[str, Any]) -> bytes:
    from exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    return ExecutorchExporter(ExecutorchConfig()).export(model, inputs).artifact.buffer


def run_transformers(model: Any, inputs: dict[str, Any]) -> bytes:
    from transformers.exporters import AutoHfExporter
    from transformers.exporters import ExecutorchConfig as HfExecutorchConfig

    config = HfExecutorchConfig(backend="xnnpack")
    return AutoHfExporter.from_config(config).export(model, inputs, config).program.buffer


RUNNERS = {"bare": run_bare, "ours": run_ours, "transformers": run_transformers}


def _warm_up() -> None:
    """Pay ExecuTorch's once-per-process costs (imports, XNNPACK pattern graphs) outside every timing."""
    import torch
    import transformers.exporters.exporter_executorch  # noqa: F401
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import exporters.exporter_executorch  # noqa: F401

    program = torch.export.export(torch.nn.Linear(8, 8), (torch.randn(2, 8),))
    to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()


def child(name: str, path: str) -> dict[str, Any]:
    """One timed cell, in this (child) process."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    _warm_up()
    from exporters.tiny import build_tiny

    tiny = build_tiny(name)
    if path == "bare":
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

        register_cache_pytrees_for_model(tiny.model)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    try:
        size = len(RUNNERS[path](tiny.model, dict(tiny.inputs)))
    except Exception as error:  # a path that fails is reported with its error, never timed
        lines = str(error).strip().splitlines()
        return {"seconds": None, "error": f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]}
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "pte_bytes": size,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def sample(name: str, path: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, path]
    completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
    return {"seconds": None, "error": f"child exited {completed.returncode}: {tail}"[:300]}


def measure(name: str, repeat: int) -> dict[str, dict[str, Any]]:
    """Best of ``repeat`` samples per path, the paths interleaved so that load drift spreads over all of them.

    A path that fails is reported with its error and not sampled again.
    """
    samples: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    for _ in range(repeat):
        for path in PATHS:
            if not samples[path] or samples[path][-1]["seconds"] is not None:
                samples[path].append(sample(name, path))
                print(f"{name} {path}: {samples[path][-1]}", flush=True)
    cells = {}
    for path, taken in samples.items():
        if taken[-1]["seconds"] is None:
            cells[path] = taken[-1]
        else:
            cells[path] = {**min(taken, key=lambda s: s["seconds"]), "samples": [s["seconds"] for s in taken]}
    return cells


def ratio(ours: float | None, other: float | None) -> float | None:
    return round(ours / other, 3) if ours and other else None


def table(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return "fails" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = [f"{'model':<28} {'bare s':>8} {'ours s':>8} {'hf s':>8} {'ours/bare':>10} {'ours/hf':>8}"]
    for row in rows:
        lines.append(
            f"{row['model']:<28} {cell(row['bare']['seconds']):>8} {cell(row['ours']['seconds']):>8} "
            f"{cell(row['transformers']['seconds']):>8} {cell(row['ours_vs_bare']):>10} "
            f"{cell(row['ours_vs_transformers']):>8}"
        )
    for row in rows:
        for path in PATHS:
            if row[path].get("error"):
                lines.append(f"  {row['model']} {path}: {row[path]['error']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "executorch.json")
    args = parser.parse_args()
    if args.child:
        print(RESULT_PREFIX + json.dumps(child(*args.child)), flush=True)
        return
    rows = []
    for name in args.models:
        row: dict[str, Any] = {"model": name, **measure(name, args.repeat)}
        row["ours_vs_bare"] = ratio(row["ours"]["seconds"], row["bare"]["seconds"])
        row["ours_vs_transformers"] = ratio(row["ours"]["seconds"], row["transformers"]["seconds"])
        rows.append(row)
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"shapes": "static", "backend": "xnnpack", "repeat": args.repeat, "rows": rows}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
