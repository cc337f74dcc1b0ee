"""What shipping a validated bundle costs: loading + one run of the saved artifact, and validation from files.

For Llama, BERT, ViT and T5 on each backend (dynamic shapes unless ``--static``), one export each, then interleaved rounds
(every path once per round, order rotated; best of ``--repeat``) of:

- ``in-memory run``: a fresh runtime object on the in-memory artifact and one run (what validation used
  to do): an ``InferenceSession`` from the serialized proto, an ExecuTorch program from the buffer,
  ``ExportedProgram.module()``;
- ``load + run``: ``exporters.load(bundle)`` (fresh runtime objects from the files) and one call that
  returns eager's structure;
- ``old save+validate``: the artifact file written, then in-memory validation at both shapes;
- ``save+validate``: ``ExportResult.save`` as it is now: staging directory, artifact + manifest + configs,
  loaded back from the files, compared at both shapes, renamed into place.

For ``.pt2`` rows two more paths, the same with plain ``torch.export.load`` instead of
``exporters.bundle.pt2_loading.load_program`` (torch's deserialiser with its repeated type-hint lookups and
expression parses memoised): ``load + run (plain load)`` and ``save+validate (plain load)``.
``memoised_load_ratio`` is ``save+validate / save+validate (plain load)``, both timed in the same rounds.

``added validation cost`` is ``save+validate - old save+validate``, reported against the export's own time
(goal: under 10 %; ``..._plain_load`` the same with the plain load). The export is timed once per row (the
first row of a process also pays torch's warm-up), and for ``.pt2`` rows also in every round (the best). The 1-minute load average is recorded before and after
each row (a shared machine). Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_bundle.py``; writes
benchmarks/results/bundle.json (``--update`` replaces only the rows it ran, e.g. ``--backends dynamo``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import exporters
from bot.outcome import ExportRequest
from bot.run.runner import make_exporter
from exporters.tiny import build_tiny
from exporters.validation import ValidationReport, check_shape

MODELS = ["LlamaForCausalLM", "BertModel", "ViTForImageClassification", "T5ForConditionalGeneration"]
BACKENDS = ["onnx", "executorch", "dynamo"]


def best_interleaved(repeat: int, paths: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best wall time of each path over ``repeat`` rounds, each round running every path once in an order
    rotated per round, so a burst of load on the shared machine hits every column alike."""
    best: dict[str, float] = {}
    names = list(paths)
    for round_ in range(repeat):
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            start = time.perf_counter()
            paths[name]()
            elapsed = time.perf_counter() - start
            best[name] = min(elapsed, best.get(name, elapsed))
    return best


def in_memory_runner(backend: str, result: Any) -> Callable[[dict[str, Any]], Any]:
    """A fresh runtime object on the in-memory artifact (the path validation took before bundles)."""
    if backend == "onnx":
        from exporters.onnx.exporter import _run, _session

        session = _session(result.artifact)
        return lambda inputs: _run(session, inputs)
    if backend == "executorch":
        from exporters.executorch.program import PteRunner

        return PteRunner(result.artifact.buffer)
    module = result.artifact.module()
    return lambda inputs: module(**inputs)


def old_save_and_validate(backend: str, result: Any, directory: Path) -> None:
    """Write the artifact, validate the in-memory artifact at every shape (the pre-bundle ``save``)."""
    directory.mkdir(parents=True, exist_ok=True)
    result.save_artifact(directory / result.component.file)
    run = in_memory_runner(backend, result)
    report = ValidationReport(result.atol, result.rtol)
    cases = [("sample", result.inputs)] + ([("second", result.second_inputs)] if result.second_inputs else [])
    for label, inputs in cases:
        report.shapes.append(check_shape(label, inputs, lambda kw: result.model(**kw), run_flat(backend, run),
                                         result.atol, result.rtol))
    shutil.rmtree(directory)


def run_flat(backend: str, run: Callable) -> Callable:
    from exporters.validation import named_tensors

    if backend == "dynamo":
        return lambda kw: [t for _, t in named_tensors(run(kw))]
    return run


@contextlib.contextmanager
def plain_pt2_load() -> Iterator[None]:
    """Within the block ``exporters.load`` reads a ``.pt2`` with plain ``torch.export.load`` (the baseline)."""
    from exporters.bundle import pt2_loading

    memoised = pt2_loading.load_program
    pt2_loading.load_program = lambda path, **_: memoised(path, memoised=False)
    try:
        yield
    finally:
        pt2_loading.load_program = memoised


def plain(path: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with plain_pt2_load():
            return path()
    return run


def bench_case(name: str, backend: str, dynamic: bool, repeat: int, scratch: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    tiny = build_tiny(name)
    exporter = make_exporter(ExportRequest(name, backend, dynamic=dynamic), optimize=True)
    start = time.perf_counter()
    result = exporter.export(tiny.model, tiny.inputs)
    export_seconds = time.perf_counter() - start
    bundle = scratch / f"{name}-{backend}"
    result.save(bundle)
    inputs = result.inputs

    def in_memory() -> None:
        with torch.no_grad():
            in_memory_runner(backend, result)(inputs)

    def from_files() -> None:
        with torch.no_grad():
            exporters.load(bundle)(**inputs)

    paths = {
        "in-memory run": in_memory,
        "load + run": from_files,
        "old save+validate": lambda: old_save_and_validate(backend, result, scratch / "old"),
        "save+validate": lambda: result.save(scratch / "new"),
    }
    if backend == "dynamo":  # a few seconds: the export itself is timed in the rounds too (best of them)
        paths["load + run (plain load)"] = plain(from_files)
        paths["save+validate (plain load)"] = plain(lambda: result.save(scratch / "new"))
        paths["export"] = lambda: exporter.export(tiny.model, tiny.inputs)
    best = best_interleaved(repeat, paths)
    export_seconds = min(export_seconds, best.pop("export", export_seconds))
    added = best["save+validate"] - best["old save+validate"]
    row = {
        "model": name,
        "backend": backend,
        "mode": "dynamic" if dynamic else "static",
        "export_seconds": round(export_seconds, 3),
        **{key: round(value, 4) for key, value in best.items()},
        "load_ratio": round(best["load + run"] / best["in-memory run"], 2),
        "added_validation_seconds": round(added, 4),
        "added_validation_fraction_of_export": round(added / export_seconds, 4),
    }
    if backend == "dynamo":
        added_plain = best["save+validate (plain load)"] - best["old save+validate"]
        row["memoised_load_ratio"] = round(best["save+validate"] / best["save+validate (plain load)"], 3)
        row["added_validation_fraction_of_export_plain_load"] = round(added_plain / export_seconds, 4)
    row["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--backends", nargs="*", default=BACKENDS)
    parser.add_argument("--static", action="store_true", help="static shapes (ExecuTorch lowers about 2x faster)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bundle.json")
    parser.add_argument("--update", action="store_true",
                        help="keep the rows of --out this run did not measure (other models/backends)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as scratch:
        for name in args.models:
            for backend in args.backends:
                row = bench_case(name, backend, not args.static, args.repeat, Path(scratch))
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.update and args.out.is_file():
        measured = {(r["model"], r["backend"], r["mode"]) for r in rows}
        kept = [r for r in json.loads(args.out.read_text())["rows"] if (r["model"], r["backend"], r["mode"]) not in measured]
        rows = kept + rows
    fractions = [r["added_validation_fraction_of_export"] for r in rows]
    summary = {
        "rows": rows,
        "note": "best of --repeat interleaved rounds on a shared 2-core machine; export timed once per row "
                "(.pt2 rows: also in every round, the best)",
        "max_added_validation_fraction": max(fractions),
        "median_added_validation_fraction": sorted(fractions)[len(fractions) // 2],
    }
    pt2 = [r for r in rows if r["backend"] == "dynamo"]
    if pt2:
        summary["pt2_max_added_validation_fraction"] = max(r["added_validation_fraction_of_export"] for r in pt2)
        summary["pt2_memoised_load_ratios"] = [r.get("memoised_load_ratio") for r in pt2]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))


if __name__ == "__main__":
    main()
