"""Quantized exports side by side with float in one run: bundle size, decode speed, forward latency, export time.

Models (random weights; checkpoints made here and cached under ``.exportbot-cache/``):

* Llama hidden 512 x 8 layers, 8 heads, intermediate 1376, vocab 8000 (``exporters.tiny.trained.llama_checkpoint``,
  the checkpoint bench_generation.py's model has): generation bundles (prefill + decode), float and each
  dynamic scheme, ExecuTorch XNNPACK (``8da4w``, ``8da8w``) and ONNX Runtime (``int4``, ``int8``);
* one encoder, BERT hidden 512 x 8 layers, 8 heads, intermediate 2048 (vocab 30522): single-graph bundles,
  float and every scheme of both backends.

Measured per (model, backend, scheme): the bundle's size on disk against the float bundle's (``size_ratio``),
the export's wall time (export and validation from the written files, both verdicts), fidelity (largest
difference from the same quantization in PyTorch, in steps of each output's 8-bit grid) and quality (the
random weights make it inconclusive; the trained fixture's numbers are in docs/quantization.md), and:

* Llama: decode tokens/s of ``generate()`` on the loaded bundle (batch 2, 16-token prompts, 32 new tokens,
  all rows counted), best of ``REPEATS`` after a warm-up, quantized and float interleaved round by round;
* BERT: forward latency of the loaded bundle (batch 1, 128 tokens), best of ``REPEATS``, interleaved too.

Ratios are against the float bundle of the same backend in the same run (the machine is shared and noisy).
A bundle that does not validate is written unvalidated all the same, so that its size and speed are measured,
and its row says so (``status``, ``validation_problem``): it is not one an export would have shipped.
Goals (issue 47): ``8da4w`` .pte and ONNX ``int4`` at most 0.35x the float bundle's size on the Llama, decode
at least 1.3x float on XNNPACK.

    nice -n 5 python benchmarks/bench_quantize.py --out benchmarks/results/quantize.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".exportbot-cache"
PROMPT, NEW_TOKENS, BATCH, REPEATS = 16, 32, 2, 5
ENCODER_SEQUENCE = 128
LLAMA_SCHEMES = {"executorch": ("8da4w", "8da8w"), "onnx": ("int4", "int8")}
ENCODER_SCHEMES = {"executorch": ("8da4w", "8da8w", "int8"), "onnx": ("int4", "int8")}


def bundle_bytes(directory: Path) -> int:
    """Every file of the bundle (artifacts, external weights, manifest, configs)."""
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def encoder_checkpoint() -> Path:
    """BERT hidden 512 x 8 layers, random weights, saved once under ``CACHE``."""
    from transformers import BertConfig, BertModel

    directory = CACHE / "bert-512x8"
    if not (directory / "config.json").is_file():
        torch.manual_seed(0)
        config = BertConfig(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, intermediate_size=2048,
                            architectures=["BertModel"])
        BertModel(config).eval().save_pretrained(directory)
    return directory


def _quantize(scheme: str | None) -> Any:
    from exporters.quantize import QuantizeConfig

    return None if scheme is None else QuantizeConfig(scheme)


def _verdicts(record: dict[str, Any]) -> dict[str, Any]:
    """Fidelity (largest difference in output steps) and quality of a manifest's quantization section."""
    if not record:
        return {}
    fidelity = record.get("fidelity") or {}
    if "components" in record:  # a generation bundle: per component
        fidelity = {f"{name}: {output}": row for name, part in record["components"].items()
                    for output, row in part["fidelity"].items()}
        quality = {"tokens": record.get("tokens") and {k: record["tokens"][k] for k in
                                                        ("status", "equal_steps", "new_tokens", "detail")},
                   "components": {name: {k: (part.get("quality") or {}).get(k) for k in ("cosine", "top1_agreement")}
                                  for name, part in record["components"].items()}}
    else:
        quality = {k: (record.get("quality") or {}).get(k) for k in ("status", "cosine", "top1_agreement", "summary")}
    worst = max(fidelity.items(), key=lambda item: item[1]["steps"], default=(None, None))
    return {"fidelity_worst_output": worst[0], "fidelity_max_abs_diff": worst[1] and worst[1]["max_abs_diff"],
            "fidelity_steps": worst[1] and round(worst[1]["steps"], 6),
            "fidelity_envelope_steps": worst[1] and round(worst[1].get("envelope_steps", 0.0), 6), "quality": quality}


def export_llama(checkpoint: Path, backend: str, scheme: str | None, out: Path) -> dict[str, Any]:
    from bot.run.generation import build_generation_model, make_generation_exporter
    from exporters.generation.components import GenerationExportConfig, sample_prompts
    from exporters.generation.export import export_for_generation

    model, _ = build_generation_model(str(checkpoint), 0)
    prompts = sample_prompts(model, batch=BATCH, prompt_length=PROMPT, seed=0)
    from exporters.validation import ValidationError

    started = time.perf_counter()
    export = export_for_generation(make_generation_exporter(backend, quantize=_quantize(scheme)), model, prompts,
                                   GenerationExportConfig(max_cache_len=PROMPT + NEW_TOKENS + 16))
    problem = None
    try:
        export.save(out)  # validated from the written files first (fidelity and quality for a quantized one)
    except ValidationError as error:  # measured all the same, and said: this bundle would not have shipped
        problem = str(error)[:1000]
        export.save(out, validate=False)
    seconds = time.perf_counter() - started
    loop = {"token_loop": export.check.detail} if export.check is not None and scheme else {}
    return {"export_seconds": round(seconds, 1), "bytes": bundle_bytes(out), "status": export.status,
            **({"validation_problem": problem} if problem else {}), **_verdicts(export.quantization_record()), **loop}


def export_encoder(checkpoint: Path, backend: str, scheme: str | None, out: Path) -> dict[str, Any]:
    from bot.outcome import ExportRequest
    from bot.run.runner import export_one
    from exporters.export_options import ExportOptions

    options = ExportOptions(batch_size=1, sequence_length=ENCODER_SEQUENCE, quantize=_quantize(scheme))
    started = time.perf_counter()
    outcome = export_one(ExportRequest(str(checkpoint), backend, options=options, out_dir=out))
    seconds = time.perf_counter() - started
    row = {"export_seconds": round(seconds, 1), "status": outcome.status, **_verdicts(outcome.quantization)}
    if outcome.status != "pass":  # exported again unvalidated, to measure it all the same (and said)
        row["validation_problem"] = (outcome.error or "")[:1000]
        export_one(ExportRequest(str(checkpoint), backend, options=options, out_dir=out, validate=False))
    return row | {"bytes": bundle_bytes(out)}


def decode_speeds(bundles: dict[str, Path], prompts: dict[str, torch.Tensor]) -> dict[str, float]:
    """Best decode tokens/s of each loaded bundle, the bundles timed in turn within each round."""
    from exporters.bundle.loading import load

    loaded = {name: load(path) for name, path in bundles.items()}
    for bundle in loaded.values():  # warm-up
        bundle.generate(**prompts, max_new_tokens=4, min_new_tokens=4)
    best = dict.fromkeys(loaded, 0.0)
    for _ in range(REPEATS):
        for name, bundle in loaded.items():
            out = bundle.generate(**prompts, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
            best[name] = max(best[name], out.decode_tokens_per_second)
    return {name: round(speed, 1) for name, speed in best.items()}


def forward_latencies(bundles: dict[str, Path], inputs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Best forward seconds of each loaded bundle, interleaved as ``decode_speeds``."""
    from exporters.bundle.loading import load

    loaded = {name: load(path) for name, path in bundles.items()}
    for bundle in loaded.values():
        bundle(**inputs)
    best = dict.fromkeys(loaded, float("inf"))
    for _ in range(REPEATS):
        for name, bundle in loaded.items():
            started = time.perf_counter()
            bundle(**inputs)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: round(seconds * 1000, 2) for name, seconds in best.items()}


def export_each(export: Any, checkpoint: Path, backend: str, schemes: tuple[str, ...],
                prefix: Path) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """The float bundle and one per scheme, exported in turn: where each is, and what was measured."""
    bundles: dict[str, Path] = {}
    measured: dict[str, dict[str, Any]] = {}
    for scheme in (None, *schemes):
        name = scheme or "float"
        bundles[name] = prefix.with_name(f"{prefix.name}-{backend}-{name}")
        print(f"{prefix.name} {backend} {name}: exporting", flush=True)
        measured[name] = export(checkpoint, backend, scheme, bundles[name])
    return bundles, measured


def llama_rows(work: Path) -> list[dict[str, Any]]:
    from bot.run.generation import build_generation_model
    from exporters.generation.components import sample_prompts
    from exporters.tiny.trained import llama_checkpoint

    checkpoint = llama_checkpoint(CACHE)
    rows = []
    for backend, schemes in LLAMA_SCHEMES.items():
        bundles, measured = export_each(export_llama, checkpoint, backend, schemes, work / "llama")
        model, _ = build_generation_model(str(checkpoint), 0)
        speeds = decode_speeds(bundles, sample_prompts(model, batch=BATCH, prompt_length=PROMPT, seed=1))
        for name, row in measured.items():
            row |= {"model": "Llama 512x8 (vocab 8000)", "backend": backend, "scheme": name,
                    "decode_tokens_per_second": speeds[name],
                    "decode_ratio": round(speeds[name] / speeds["float"], 3),
                    "size_ratio": round(row["bytes"] / measured["float"]["bytes"], 3)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "quality"}), flush=True)
    return rows


def encoder_rows(work: Path) -> list[dict[str, Any]]:
    checkpoint = encoder_checkpoint()
    generator = torch.Generator().manual_seed(2)
    inputs = {"input_ids": torch.randint(0, 30522, (1, ENCODER_SEQUENCE), generator=generator),
              "attention_mask": torch.ones(1, ENCODER_SEQUENCE, dtype=torch.long),
              "token_type_ids": torch.zeros(1, ENCODER_SEQUENCE, dtype=torch.long)}
    rows = []
    for backend, schemes in ENCODER_SCHEMES.items():
        bundles, measured = export_each(export_encoder, checkpoint, backend, schemes, work / "bert")
        latencies = forward_latencies(bundles, inputs)  # every bundle was written (unvalidated where it failed)
        for name, row in measured.items():
            row |= {"model": "BERT 512x8", "backend": backend, "scheme": name, "forward_ms": latencies[name],
                    "speed_ratio": round(latencies["float"] / latencies[name], 3),
                    "size_ratio": round(row["bytes"] / measured["float"]["bytes"], 3)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "quality"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantize.json")
    parser.add_argument("--only", choices=("llama", "encoder"), default=None)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="exportbot-bench-quantize-") as scratch:
        work = Path(scratch)
        rows = ([] if arguments.only == "encoder" else llama_rows(work)) + \
               ([] if arguments.only == "llama" else encoder_rows(work))
    result = {
        "benchmark": "bench_quantize.py", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
        "cpus": len(__import__("os").sched_getaffinity(0)), "torch_threads": torch.get_num_threads(),
        "load_average_after": __import__("os").getloadavg(), "repeats": REPEATS,
        "decode": {"batch": BATCH, "prompt": PROMPT, "new_tokens": NEW_TOKENS},
        "encoder_sequence": ENCODER_SEQUENCE, "rows": rows,
    }
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    if arguments.out.exists() and arguments.only:  # a partial run keeps the other model's rows
        earlier = json.loads(arguments.out.read_text())
        model = {"llama": "Llama", "encoder": "BERT"}[arguments.only]
        keep = [r for r in earlier.get("rows", []) if not r["model"].startswith(model)]
        result["rows"] = keep + rows
    arguments.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
