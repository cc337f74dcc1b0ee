"""Generation exports side by side in one run: export time and decode speed, ours vs the baselines.

For each model (the tiny Llama, and Llama hidden 512 / 8 layers / vocab 8000, random weights):

* export time of ``export_for_generation`` (ONNX, ExecuTorch XNNPACK; no validation) vs
  ``transformers.exporters``' ``export_for_generation`` with the same backend (dynamic shapes);
* decode tokens/s (batch 2, 16-token prompts, 32 new tokens, all rows counted) of the ONNX bundle in ONNX
  Runtime and of the ``.pte`` bundle in the ExecuTorch runtime, loaded from disk, vs eager PyTorch with
  the same KV-cache wrappers and the same loop; and transformers' ONNX artifacts driven by an equivalent
  greedy loop (their inputs are named by their cache's flattening, mapped here once).

Each decode figure is the best of 3 timed runs after a warm-up. Ratios are against eager in the same run.

    nice -n 5 python benchmarks/bench_generation.py --out benchmarks/results/generation.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
PROMPT, NEW_TOKENS, BATCH, REPEATS = 16, 32, 2, 3


def build(name: str) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    from exporters.tiny import build_tiny

    if name == "tiny":
        return build_tiny("LlamaForCausalLM").model
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
                         num_key_value_heads=8, vocab_size=8000, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def best_decode(generate: Any, prompts: dict[str, torch.Tensor]) -> tuple[float, list[list[int]]]:
    generate(**prompts, max_new_tokens=4, min_new_tokens=4)
    runs = [generate(**prompts, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS) for _ in range(REPEATS)]
    return max(r.decode_tokens_per_second for r in runs), runs[0].tokens.tolist()


def ours(model: torch.nn.Module, prompts: dict[str, torch.Tensor], backend: str, work: Path) -> dict[str, Any]:
    from bot.run.generation import make_generation_exporter
    from exporters.bundle.loading import load
    from exporters.generation.components import GenerationExportConfig
    from exporters.generation.export import export_for_generation

    started = time.perf_counter()
    export = export_for_generation(make_generation_exporter(backend), model, prompts,
                                   GenerationExportConfig(max_cache_len=PROMPT + NEW_TOKENS + 16))
    seconds = time.perf_counter() - started
    out = work / f"ours-{backend}"
    export.save(out, validate=False)
    speed, tokens = best_decode(load(out).generate, prompts)
    return {"export_seconds": round(seconds, 1), "decode_tokens_per_second": round(speed, 1), "tokens": tokens,
            "export": export}


def theirs_export(model: torch.nn.Module, prompts: dict[str, torch.Tensor], backend: str, work: Path) -> dict[str, Any]:
    from transformers.exporters import AutoHfExporter, ExecutorchConfig, OnnxConfig

    config = OnnxConfig(dynamic=True) if backend == "onnx" else ExecutorchConfig(backend="xnnpack", dynamic=True)
    started = time.perf_counter()
    try:
        exported = AutoHfExporter.from_config(config).export_for_generation(model, dict(prompts), config)
    except Exception as error:
        return {"error": _causes(error), "seconds_until_error": round(time.perf_counter() - started, 1)}
    seconds = time.perf_counter() - started
    out = work / f"theirs-{backend}"
    exported.save_pretrained(out)
    return {"export_seconds": round(seconds, 1), "directory": out}


def theirs_onnx_decode(directory: Path, model: torch.nn.Module, prompts: dict[str, torch.Tensor]) -> dict[str, Any]:
    """transformers' prefill.onnx / decode.onnx in ONNX Runtime, driven by an equivalent greedy loop."""
    import onnxruntime as ort

    sessions = {name: ort.InferenceSession(str(directory / f"{name}.onnx"), providers=["CPUExecutionProvider"])
                for name in ("prefill", "decode")}
    names = {name: [i.name for i in s.get_inputs()] for name, s in sessions.items()}
    outputs = {name: [o.name for o in s.get_outputs()] for name, s in sessions.items()}

    def run(name: str, feed: dict[str, Any]) -> dict[str, Any]:
        arrays = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in feed.items() if k in names[name]}
        missing = [k for k in names[name] if k not in arrays]
        if missing:
            raise KeyError(f"{name}.onnx wants {missing}; this loop feeds {sorted(arrays)}")
        return dict(zip(outputs[name], sessions[name].run(None, arrays)))

    def generate(input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 min_new_tokens: int = 0) -> Any:
        mask = attention_mask
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        out = run("prefill", {"input_ids": input_ids, "attention_mask": mask, "position_ids": positions})
        decode_seconds, tokens = 0.0, []
        for step in range(max_new_tokens):
            logits = torch.from_numpy(out["logits"])
            token = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
            if step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            # their prefill returns ``past_key_values.layers.i.keys``, decode ``output.past_key_values…``;
            # decode takes ``input.past_key_values…``
            past = {"input." + k.removeprefix("output."): v for k, v in out.items() if "past_key_values" in k}
            feed = {"input_ids": token, "attention_mask": mask, "position_ids": positions[:, -1:] + step + 1, **past}
            started = time.perf_counter()
            out = run("decode", feed)
            decode_seconds += time.perf_counter() - started
        steps = max_new_tokens - 1
        return _Timed(torch.cat(tokens, dim=1), steps * input_ids.shape[0] / decode_seconds)

    try:
        speed, tokens = best_decode(generate, prompts)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}",
                "inputs": names, "outputs": {k: v[:6] for k, v in outputs.items()}}
    return {"decode_tokens_per_second": round(speed, 1), "tokens": tokens}


def _causes(error: BaseException) -> str:
    """The first line of an error and of each error it was raised from (wrappers hide the real cause)."""
    lines = []
    while error is not None and len(lines) < 4:
        text = (str(error).strip().splitlines() or [""])[0][:300]
        lines.append(f"{type(error).__name__}: {text}")
        error = error.__cause__ or error.__context__
    return " <- ".join(lines)


class _Timed:
    def __init__(self, tokens: torch.Tensor, speed: float):
        self.tokens, self.decode_tokens_per_second = tokens, speed


def bench(name: str, backends: list[str], baseline: bool) -> dict[str, Any]:
    from exporters.bundle.decoding import EagerGeneration
    from exporters.generation.components import make_prompts

    model = build(name)
    prompts = make_prompts("decoder-only", "input_ids", model.config, model.config.pad_token_id or 0, BATCH, PROMPT)
    work = Path(tempfile.mkdtemp(prefix=f"exportbot-bench-generation-{name}-"))
    result: dict[str, Any] = {"model": name, "parameters": sum(p.numel() for p in model.parameters())}
    eager_speed = None
    for backend in backends:
        mine = ours(model, prompts, backend, work)
        export = mine.pop("export")
        if eager_speed is None:
            eager = EagerGeneration(export.plans, export.layout)
            eager_speed, eager_tokens = best_decode(eager.generate, prompts)
            result["eager"] = {"decode_tokens_per_second": round(eager_speed, 1)}
        mine["tokens_equal_eager"] = mine.pop("tokens") == eager_tokens
        mine["decode_vs_eager"] = round(mine["decode_tokens_per_second"] / eager_speed, 2)
        entry: dict[str, Any] = {"ours": mine}
        if baseline:
            theirs = theirs_export(model, prompts, backend, work)
            if "export_seconds" in theirs:
                entry["export_time_ratio_ours_over_theirs"] = round(mine["export_seconds"] / theirs["export_seconds"], 2)
                if backend == "onnx":
                    decode = theirs_onnx_decode(theirs.pop("directory"), model, prompts)
                    if "tokens" in decode:
                        decode["tokens_equal_eager"] = decode.pop("tokens") == eager_tokens
                        decode["decode_vs_eager"] = round(decode["decode_tokens_per_second"] / eager_speed, 2)
                    theirs["decode"] = decode
            theirs.pop("directory", None)
            entry["transformers"] = theirs
        result[backend] = entry
        print(json.dumps({name: {backend: entry}}, default=str), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", choices=["tiny", "llama-512x8"])
    parser.add_argument("--backend", action="append", choices=["onnx", "executorch"])
    parser.add_argument("--no-baseline", action="store_true", help="skip transformers.exporters")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "generation.json")
    args = parser.parse_args()
    import importlib.metadata
    import os

    results = {
        "versions": {p: importlib.metadata.version(p) for p in ("torch", "transformers", "onnxruntime", "executorch")},
        "load_average_at_start": os.getloadavg()[0], "threads": torch.get_num_threads(),
        "settings": {"batch": BATCH, "prompt": PROMPT, "new_tokens": NEW_TOKENS, "repeats": REPEATS},
        "models": [bench(name, args.backend or ["onnx", "executorch"], not args.no_baseline)
                   for name in (args.model or ["tiny", "llama-512x8"])],
    }
    results["load_average_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
