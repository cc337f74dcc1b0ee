"""Wall-time ratios of our exporters against the bare torch paths and transformers' own exporter.

One script, one process, same model and inputs per row; the paths compared run interleaved (each round
runs every path once, the order rotated per round), so machine noise hits every column alike; each
timing is the best of ``--repeat`` rounds. Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_onnx_dynamo.py``.
Writes benchmarks/results/onnx_dynamo.json.

Columns:
- dynamo: DynamoExporter.export vs bare ``torch.export.export`` (target ratio ≤ 1.05).
- onnx: OnnxExporter.export vs bare ``torch.onnx.export(dynamo=True)`` (target ≤ 1.1) and vs
  ``transformers.exporters`` ONNX export (target: faster on every model). No validation is timed.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from exporters.exporter_dynamo import DynamoConfig, DynamoExporter
from exporters.exporter_onnx import OnnxConfig, OnnxExporter
from exporters.tiny import build_tiny

MODELS = ["LlamaForCausalLM", "BertModel", "ViTForImageClassification", "T5ForConditionalGeneration"]


def best_interleaved(repeat: int, paths: dict[str, Callable[[], object]]) -> dict[str, float | str]:
    """Best wall time of each path over ``repeat`` rounds; every round runs every path once, in an order
    rotated per round, so a burst of machine load lands on all paths alike rather than on one column."""
    best: dict[str, float | str] = {}
    names = list(paths)
    for round_ in range(repeat):
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            if isinstance(best.get(name), str):
                continue
            start = time.perf_counter()
            try:
                paths[name]()
            except Exception as error:  # a path that does not work is reported, not timed
                best[name] = f"fails: {type(error).__name__}"
                continue
            elapsed = time.perf_counter() - start
            previous = best.get(name)
            best[name] = elapsed if previous is None else min(elapsed, previous)  # type: ignore[type-var]
    return best


def bare_export(model, inputs):
    with torch.no_grad():
        return torch.export.export(model, args=(), kwargs=dict(inputs))


def bare_onnx(model, inputs):
    with torch.no_grad():
        return torch.onnx.export(model, args=(), kwargs=dict(inputs), dynamo=True, verbose=False)


def transformers_onnx(model, inputs):
    from transformers.exporters import AutoHfExporter
    from transformers.exporters import OnnxConfig as HfOnnxConfig

    config = HfOnnxConfig()
    return AutoHfExporter.from_config(config).export(model, copy.deepcopy(dict(inputs)), config)


def ratio(ours, other):
    return round(ours / other, 3) if isinstance(ours, float) and isinstance(other, float) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "onnx_dynamo.json")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows = [measure(name, args.repeat) for name in MODELS]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2) + "\n")


def measure(name: str, repeat: int) -> dict:
    tiny = build_tiny(name)
    model, inputs = tiny.model, tiny.inputs
    # Warm-up so first-call caching does not land on one column. Ours goes first: it registers the
    # Cache pytree types, without which the bare path cannot export models that return a DynamicCache.
    DynamoExporter().export(model, inputs)
    bare_export(model, inputs)
    row: dict[str, object] = {"model": name}
    row |= best_interleaved(repeat, {
        "bare_torch_export": lambda: bare_export(model, inputs),
        "dynamo_exporter": lambda: DynamoExporter(DynamoConfig()).export(model, inputs),
    })  # fmt: skip
    row |= best_interleaved(repeat, {
        "bare_torch_onnx": lambda: bare_onnx(model, inputs),
        "onnx_exporter": lambda: OnnxExporter(OnnxConfig()).export(model, inputs),
        "transformers_onnx": lambda: transformers_onnx(model, inputs),
    })  # fmt: skip
    row["dynamo_vs_bare"] = ratio(row["dynamo_exporter"], row["bare_torch_export"])
    row["onnx_vs_bare"] = ratio(row["onnx_exporter"], row["bare_torch_onnx"])
    row["onnx_vs_transformers"] = ratio(row["onnx_exporter"], row["transformers_onnx"])
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
