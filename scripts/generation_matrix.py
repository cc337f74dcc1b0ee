"""The generation model matrix: every listed model exported for generation on each backend, by hand.

Each (model, backend) runs in its own process: export both components, validate the written bundle
(components at two shapes, ``generate()`` token for token against eager), publish it; then a second, fresh
process runs ``exportbot generate DIR --json`` on the saved bundle (longer prompt, 20 new tokens) against a
freshly built eager model. Eager decode speed is measured with the same KV-cache wrappers in eager PyTorch.
A degenerate tiny model (one token forever) is retried with the next seed, then with a larger init scale.

    nice -n 10 python scripts/generation_matrix.py --backend onnx --backend executorch \
        --out sweeps/generation-matrix.json

Costs: ONNX ~20-60 s per model, ExecuTorch (XNNPACK) 40-200 s per model on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# (class, task, config overrides). Sliding-window models get a window of 4 so the window is crossed.
MATRIX: list[tuple[str, str, dict[str, Any]]] = [
    ("LlamaForCausalLM", "text-generation", {}),
    ("Qwen2ForCausalLM", "text-generation", {}),
    ("Qwen3ForCausalLM", "text-generation", {}),
    ("MistralForCausalLM", "text-generation", {"sliding_window": 4}),
    ("GemmaForCausalLM", "text-generation", {}),
    ("Gemma2ForCausalLM", "text-generation", {"sliding_window": 4}),
    ("Gemma3ForCausalLM", "text-generation", {"sliding_window": 4}),
    ("Phi3ForCausalLM", "text-generation", {}),
    ("GPT2LMHeadModel", "text-generation", {}),
    ("OPTForCausalLM", "text-generation", {}),
    ("MixtralForCausalLM", "text-generation", {}),
    ("Qwen2MoeForCausalLM", "text-generation", {}),
    ("T5ForConditionalGeneration", "text2text-generation", {}),
    ("BartForConditionalGeneration", "text2text-generation", {}),
    ("WhisperForConditionalGeneration", "automatic-speech-recognition", {}),
    # Vision encoder + language model; the tiny config's image token (32000) lies outside its 256-token vocab.
    ("LlavaForConditionalGeneration", "text-generation", {"image_token_id": 3}),
]
# Tries per model: seeds first, then a larger init scale (a tiny random model whose greedy path is one token
# forever is inconclusive, never a pass).
ATTEMPTS: tuple[tuple[int, dict[str, Any]], ...] = (
    (0, {}), (1, {}), (2, {}), (0, {"initializer_range": 0.5, "initializer_factor": 4.0}),
)


def run_one(name: str, task: str, overrides: dict[str, Any], backend: str, out: Path, seed: int) -> dict[str, Any]:
    """Export + validate + publish in this process; returns the record (no exception escapes)."""
    from bot.run.generation import export_generation

    record: dict[str, Any] = {"model": name, "backend": backend, "task": task, "seed": seed, "overrides": overrides}
    started = time.perf_counter()
    try:
        export = export_generation(name, backend, out, task=task, seed=seed, overrides=overrides)
    except Exception as error:  # an export failure is a result of the matrix, recorded with its cause
        record.update(status="export failed", error=f"{type(error).__name__}: {str(error).strip()[:600]}")
        record["seconds"] = round(time.perf_counter() - started, 1)
        return record
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["status"] = export.status
    record["components"] = list(export.results)
    record["component_status"] = {n: r.validation.status if r.validation else None for n, r in export.results.items()}
    record["export_seconds"] = {n: round(sum(s for k, s in r.metadata.stage_seconds.items() if k != "validation"), 1)
                                for n, r in export.results.items()}
    record["workarounds_fired"] = sorted({w for r in export.results.values() for w in r.metadata.workarounds_fired})
    record["problems"] = export.problems()[:5]
    if export.check is not None:
        record["check"] = {k: export.check.as_dict()[k] for k in ("status", "detail", "max_logits_diff",
                                                                 "first_mismatch", "prompt_lengths")}
    if export.status == "pass":
        record.update(decode_speeds(out, seed))
    return record


def decode_speeds(out: Path, seed: int) -> dict[str, float]:
    """Decode tokens/s of the saved bundle and of eager with the same cache wrappers (the model rebuilt from
    the bundle's source), interleaved, best of 3 each after a warm-up, so both see the same machine load."""
    from bot.run.generation import rebuild_source
    from exporters.bundle.decoding import EagerGeneration
    from exporters.bundle.loading import load
    from exporters.generation.components import GenerationExportConfig, plan_components, sample_prompts

    bundle = load(out)
    layout = bundle.metadata.generation
    model, why_not = rebuild_source(layout["source"], out)
    if model is None:
        raise RuntimeError(why_not)
    prompts = sample_prompts(model, batch=2, prompt_length=8, seed=seed)
    plans = plan_components(model, prompts, GenerationExportConfig(max_cache_len=layout["max_cache_len"]),
                            bundle.metadata.backend)
    sides = {"exported": bundle, "eager": EagerGeneration(plans, layout)}
    best = dict.fromkeys(sides, 0.0)
    for side in sides.values():
        side.generate(**prompts, max_new_tokens=4, min_new_tokens=4)
    for _ in range(3):
        for name, side in sides.items():
            timed = side.generate(**prompts, max_new_tokens=16, min_new_tokens=16)
            best[name] = max(best[name], timed.decode_tokens_per_second)
    return {"exported_decode_tokens_per_second": round(best["exported"], 1),
            "eager_decode_tokens_per_second": round(best["eager"], 1), "speeds": "interleaved, best of 3"}


def fresh_process_check(out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "bot", "generate", str(out), "--prompt-length", "10",
                          "--max-new-tokens", "20", "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=900)
    if not run.stdout.strip().startswith("{"):
        return {"status": "error", "detail": (run.stderr.strip().splitlines() or ["no output"])[-1][:400]}
    result = json.loads(run.stdout)
    check = result.get("eager_comparison", {})
    return {"status": check.get("status"), "detail": check.get("detail"),
            "decode_tokens_per_second": result.get("decode_tokens_per_second")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action="append", choices=["dynamo", "onnx", "executorch"])
    parser.add_argument("--model", action="append", help="only these classes, in this order")
    parser.add_argument("--out", type=Path, default=ROOT / "sweeps" / "generation-matrix.json")
    parser.add_argument("--one", nargs=5, metavar=("MODEL", "TASK", "OVERRIDES", "BACKEND", "SEED"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--bundle", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--first-attempt", type=int, default=0, help="skip the first N (seed, scale) attempts")
    parser.add_argument("--recheck-fresh", action="store_true",
                        help="re-run the fresh-process check of passing records whose check did not run")
    parser.add_argument("--markdown", nargs="+", type=Path, metavar="JSON",
                        help="print the table of these result files (model / backend / components / tokens equal / "
                             "decode tokens/s vs eager) and exit")
    args = parser.parse_args()
    if args.markdown:
        records = []
        for path in args.markdown:
            fresh = json.loads(fresh_path(path).read_text()) if fresh_path(path).is_file() else {}
            records += [r | fresh.get(f"{r['model']}|{r['backend']}", {}) for r in json.loads(path.read_text())["records"]]
        print(markdown_table(records))
        return
    if args.recheck_fresh:
        recheck_fresh(args.out)
        return
    if args.one:
        name, task, overrides, backend, seed = args.one
        print(json.dumps(run_one(name, task, json.loads(overrides), backend, args.bundle, int(seed))))
        return
    records = json.loads(args.out.read_text())["records"] if args.out.is_file() else []
    done = {(r["model"], r["backend"]) for r in records}
    backends = args.backend or ["onnx", "executorch"]
    work = tempfile.mkdtemp(prefix="exportbot-generation-matrix-")
    # --model, in the order given (the most telling models first when the machine is busy)
    selected = [entry for name in args.model for entry in MATRIX if entry[0] == name] if args.model else MATRIX
    for backend in backends:
        for name, task, overrides in selected:
            if (name, backend) in done:
                continue
            for seed, scale in ATTEMPTS[args.first_attempt:]:
                bundle = Path(work) / f"{name}-{backend}-{seed}{'-scaled' if scale else ''}"
                record = _subprocess_record(name, task, overrides | scale, backend, bundle, seed)
                if record.get("check", {}).get("status") != "inconclusive":
                    break
            if record.get("status") == "pass":
                record["fresh_process"] = fresh_process_check(bundle)
            records.append(record)
            _write(args.out, records)
            print(f"{name} {backend}: {record.get('status')} {record.get('check', {}).get('detail', '')}"
                  f" {record.get('error', '')}", flush=True)


def markdown_table(records: list[dict[str, Any]]) -> str:
    """One row per (model, backend): components, verdicts, decode speed against eager with the same cache."""
    order = {name: i for i, (name, _, _) in enumerate(MATRIX)}
    latest = {(r["model"], r["backend"]): r for r in records}  # a later file's attempt supersedes (init scale)
    records = list(latest.values())
    rows = ["| model | backend | components | validated | tokens equal (export / fresh process) | seed "
            "| decode tok/s | eager tok/s | vs eager |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (order.get(r["model"], 99), r["backend"])):
        check = r.get("check", {})
        fresh = r.get("fresh_process", {})
        equal = {"pass": "yes", "mismatch": "no", "inconclusive": "inconclusive"}
        exported, eager = r.get("exported_decode_tokens_per_second"), r.get("eager_decode_tokens_per_second")
        ratio = f"{exported / eager:.1f}x" if exported and eager else "—"
        verdict = r.get("status", "")
        tokens = equal.get(check.get("status"), "—")
        if "although the tokens agree" in check.get("detail", ""):
            tokens = f"yes, but {check['detail'].split(' (')[0]}"
        seed = f"{r.get('seed', '')}" + (" (init x, seeds 0-2 degenerate)" if "initializer_range" in r.get("overrides", {})
                                          else "")
        if r.get("error"):
            verdict += f": {r['error'][:120]}"
        rows.append(
            f"| {r['model']} | {r['backend']} | {', '.join(r.get('components', [])) or '—'} | {verdict} | "
            f"{tokens} / {equal.get(fresh.get('status'), fresh.get('status') or '—')} | "
            f"{seed} | {exported if exported is not None else '—'} | "
            f"{eager if eager is not None else '—'} | {ratio} |")
    return "\n".join(rows)


def fresh_path(path: Path) -> Path:
    return path.with_name(path.stem + "-fresh.json")


def recheck_fresh(path: Path) -> None:
    """The fresh-process check and interleaved speeds of every passing record of ``path`` not yet rechecked,
    on its bundle (still in /tmp); written beside it (``-fresh.json``), so a running matrix can keep writing."""
    records = json.loads(path.read_text())["records"]
    target = fresh_path(path)
    done = json.loads(target.read_text()) if target.is_file() else {}
    for record in records:
        key = f"{record['model']}|{record['backend']}"
        if record.get("status") != "pass" or key in done:
            continue
        name = f"{record['model']}-{record['backend']}-{record['seed']}"
        bundles = sorted(Path(tempfile.gettempdir()).glob(f"exportbot-generation-matrix-*/{name}*"))
        if not bundles:
            continue
        done[key] = {"fresh_process": fresh_process_check(bundles[-1]), **decode_speeds(bundles[-1], record["seed"])}
        target.write_text(json.dumps(done, indent=1) + "\n")
        print(key, done[key], flush=True)


def _subprocess_record(name: str, task: str, overrides: dict[str, Any], backend: str, bundle: Path,
                       seed: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), "--one", name, task, json.dumps(overrides), backend,
               str(seed), "--bundle", str(bundle)]
    try:
        run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"model": name, "backend": backend, "seed": seed, "status": "timeout", "error": "over 1800 s"}
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "backend": backend, "seed": seed, "status": "crashed",
                "error": f"exit {run.returncode}: {tail[:400]}"}
    return json.loads(lines[-1])


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    import importlib.metadata

    versions = {p: importlib.metadata.version(p) for p in ("torch", "transformers", "onnxruntime", "executorch")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"versions": versions, "records": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
