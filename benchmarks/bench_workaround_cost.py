"""What our workarounds cost an ExecuTorch export: ours vs ours without named workarounds vs the bare path.

Run: ``HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python benchmarks/bench_workaround_cost.py BertModel --rounds 2
--variants bare ours ours-_fix_strided_reshape_input``. ``ours-A-B`` is ours with ``without={A, B}``.

Why a second script beside bench_vs_reference.py: that one gives the export-time ratios (fresh process per
sample), this one attributes a gap to workarounds. All variants run in one process, after a warm-up export
of the same model with the dynamic bare path (so first-export costs hit no variant), interleaved and rotated
per round; each sample is the export call's CPU seconds and, inside it, ``to_edge_transform_and_lower``'s. On
the shared 2-core machine one path's samples still vary ~8 %, so a difference below that needs more rounds.
Prints one line per sample and the best per variant; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import bench_vs_reference as reference_bench


def variant_export(name: str, variant: str) -> Any:
    """A zero-argument export of a freshly built tiny ``name`` by ``variant`` (bare, ours, ours-W1-W2)."""
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
    from exporters.tiny import build_tiny

    tiny = build_tiny(name)
    model, inputs = tiny.model, dict(tiny.inputs)
    if variant == "bare":
        register_cache_pytrees_for_model(model)
        return lambda: reference_bench.bare("executorch", True, model, inputs)
    without = frozenset(variant.split("-")[1:]) if variant.startswith("ours-") else frozenset()
    exporter = ExecutorchExporter(ExecutorchConfig(dynamic=True, without=without))
    return lambda: exporter.export(model, inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["bare", "ours"])
    args = parser.parse_args()
    reference_bench._quiet()
    import executorch.exir as exir

    lowering: list[float] = []
    real_lowering = exir.to_edge_transform_and_lower

    def timed_lowering(*a: Any, **k: Any) -> Any:
        start = time.process_time()
        lowered = real_lowering(*a, **k)
        lowering.append(time.process_time() - start)
        return lowered

    exir.to_edge_transform_and_lower = (
        timed_lowering  # both paths import it from executorch.exir at call time
    )
    reference_bench._warm_up("executorch")
    variant_export(args.model, "bare")()  # warm-up of the dynamic path
    variants = args.variants
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for variant in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
            run = variant_export(args.model, variant)
            lowering.clear()
            start = time.process_time()
            run()
            samples[variant].append((round(time.process_time() - start, 3), round(lowering[0], 3)))
            print(variant, samples[variant][-1], flush=True)
    print(json.dumps(samples))
    for variant in variants:
        best_total = min(total for total, _ in samples[variant])
        best_lowering = min(lowered for _, lowered in samples[variant])
        print(f"{variant}: best cpu {best_total} s, best lowering cpu {best_lowering} s")


if __name__ == "__main__":
    main()
