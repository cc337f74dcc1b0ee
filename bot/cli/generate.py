"""``exportbot export MODEL --task text-generation`` and ``exportbot generate DIR``: generation bundles.

The export command prints what ``bot.run.generation.export_generation`` did (exported, validated token for
token, published); ``--repro ID`` of a ``generate``-scope entry prints its re-run as JSON. ``generate`` loads
a bundle, generates from random prompts of a chosen length in the bundle's runtime, prints the tokens and
decode speed, and compares them with eager ``generate()`` on the model the bundle came from (rebuilt from
the ``source`` the manifest records).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.run.generation import LedgerSkip, export_generation, rebuild_source, rerun_generation
from exporters.ledger import LedgerEntry


def export_generation_command(model: str, backend: str, task: str, out_dir: Path | None, seed: int = 0,
                              batch_size: int = 2, sequence_length: int = 8, max_sequence: int | None = None,
                              et_backend: str | None = None, no_optimize: bool = False,
                              without: tuple[str, ...] = (), ignore_ledger: bool = False, quantize: Any = None) -> None:
    """``exportbot export MODEL --task <generation task>``: the bundle, its table, exit 1 unless it passed."""
    out_dir = out_dir or Path("out") / f"{Path(model).name}-{backend}-generation"
    console = Console(stderr=True)
    try:
        with console.status(f"{model}: exporting prefill and decode with {backend}, then validating"):
            export = export_generation(model, backend, out_dir, task=task, seed=seed, batch_size=batch_size,
                                       prompt_length=sequence_length, max_cache_len=max_sequence or 64,
                                       et_backend=et_backend or "xnnpack", optimize=not no_optimize,
                                       without=without, ignore_ledger=ignore_ledger, quantize=quantize)
    except LedgerSkip as skip:
        click.echo(f"{model}: {skip}\nUse --ignore-ledger to try the export anyway.")
        sys.exit(EXIT_FAILED)
    print_export(Console(), model, backend, export, out_dir)
    if export.status != "pass":
        click.echo(f"{model}: generation export {export.status}: {(export.problems() or ['not validated'])[0]}"
                   " (nothing written)", err=True)
        sys.exit(EXIT_FAILED)


def print_export(console: Console, model: str, backend: str, export: Any, out_dir: Path) -> None:
    table = Table(title=f"{model} → {backend} (generation): {export.status}", title_justify="left")
    quantized = export.quantization is not None
    for column in ("component", "validation", "export s", "inputs", *(("fidelity steps", "quality") if quantized else ())):
        table.add_column(column, overflow="fold")
    for name, result in export.results.items():
        seconds = sum(result.metadata.stage_seconds.values())
        status = result.validation.status if result.validation else "not validated"
        row = [name, status, f"{seconds:.1f}", ", ".join(result.component.arguments[:4]) +
               (" …" if len(result.component.arguments) > 4 else "")]
        if quantized:
            record = result.quantization_record()
            row.append(f"{max((f['steps'] for f in record['fidelity'].values()), default=0.0):.3f}")
            row.append((record["quality"] or {}).get("summary", "not validated"))
        table.add_row(*row)
    console.print(table)
    if export.check is not None:
        against = "the same quantization in eager" if export.quantization is not None else "eager"
        console.print(f"generate vs {against}: {export.check.status}: {export.check.detail}")
    if export.tokens is not None:
        console.print(f"greedy tokens vs float eager: {export.tokens.status}: {export.tokens.detail}")
    if export.status == "pass":
        console.print(f"bundle: {out_dir}")
    for problem in export.problems()[:5]:
        console.print(f"[red]{problem}[/red]")


@click.command("generate")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--prompt-length", type=int, default=8, show_default=True, help="Tokens per prompt (row 0).")
@click.option("--max-new-tokens", type=int, default=16, show_default=True, help="Tokens to generate per row.")
@click.option("--batch-size", type=int, default=2, show_default=True,
              help="Rows; row i is left-padded by i*N/3 tokens (ExecuTorch: the exported batch).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random prompts (and sampling).")
@click.option("--sample", "do_sample", is_flag=True, help="Sample from softmax(logits/temperature) instead of greedy.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="With --sample.")
@click.option("--top-k", type=int, default=0, show_default=True, help="With --sample: keep the k best (0: all).")
@click.option("--stop-at-eos/--no-stop-at-eos", default=False, show_default=True,
              help="Stop a row at its EOS token (default: generate --max-new-tokens, as the eager check does).")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also run eager generate() on the source model and compare token for token (greedy only).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@report_errors
def generate_command(directory: Path, prompt_length: int, max_new_tokens: int, batch_size: int, seed: int,
                     do_sample: bool, temperature: float, top_k: int, stop_at_eos: bool, compare: bool,
                     as_json: bool) -> None:
    """Generate from the generation bundle in DIRECTORY, every step in the bundle's runtime.

    Prompts are random token ids (speech models: random features). Prints the new tokens, decode steps/s
    and tokens/s, and, unless --no-compare or --sample, eager generate()'s tokens for the same prompts and
    the verdict (exit 1 on a mismatch). Make the bundle first with
    `exportbot export LlamaForCausalLM --task text-generation --backend onnx --out out/llama-gen`.

    \b
    Examples:
      exportbot generate out/llama-gen --prompt-length 12 --max-new-tokens 32
      exportbot generate out/llama-gen --sample --temperature 0.8 --top-k 20 --seed 3
    """
    from exporters.bundle.format import BundleError
    from exporters.bundle.loading import load
    from exporters.generation.components import make_image_prompts, make_prompts, sample_prompts

    if prompt_length < 1 or max_new_tokens < 1 or batch_size < 1:
        raise UsageProblem("--prompt-length, --max-new-tokens and --batch-size must be at least 1")
    try:
        bundle = load(directory)
    except (BundleError, FileNotFoundError) as error:
        raise UsageProblem(str(error)) from None
    layout = bundle.metadata.generation
    if not layout:
        raise UsageProblem(f"{directory}: not a generation bundle (export it with --task text-generation)")
    limit = layout["max_cache_len"]
    # A vision-language prompt also holds one image's placeholders and 2 lead tokens (make_image_prompts).
    image = layout["image_input"]["tokens_per_image"] + 2 if "image_input" in layout else 0
    if layout["kind"] == "decoder-only" and image + prompt_length + max_new_tokens > limit:
        raise UsageProblem(f"--prompt-length {prompt_length} + --max-new-tokens {max_new_tokens}"
                           + (f" + {image} image tokens" if image else "") + f" exceed the bundle's max_cache_len {limit}")
    if layout["batch"] == "static" and batch_size != layout["batch_size"]:
        raise UsageProblem(f"{directory} was exported with a static batch of {layout['batch_size']}; "
                           f"use --batch-size {layout['batch_size']}")
    eager = rebuild_source(layout.get("source", {})) if compare and not do_sample else None
    if eager is not None:
        inputs = sample_prompts(eager, batch=batch_size, prompt_length=prompt_length, seed=seed)
    elif "image_input" in layout:  # a vision-language bundle: placeholders and pixels from its manifest
        image = layout["image_input"]
        inputs = make_image_prompts(image["image_token_id"], image["tokens_per_image"], tuple(image["shape"]),
                                    bundle.config.get_text_config(decoder=True).vocab_size,
                                    layout.get("pad_token_id"), batch_size, prompt_length, seed)
    else:
        inputs = make_prompts(layout["kind"], layout.get("encoder_input", "input_ids"), bundle.config,
                              layout.get("pad_token_id"), batch_size, prompt_length, seed)
    options: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": do_sample,
                               "temperature": temperature, "top_k": top_k, "seed": seed}
    if not stop_at_eos:
        options["min_new_tokens"] = max_new_tokens
    started = time.perf_counter()
    output = bundle.generate(**inputs, **options)
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {
        "directory": str(directory), "backend": bundle.metadata.backend, "model_class": bundle.metadata.model_class,
        "prompt_lengths": [int(v) for v in inputs["attention_mask"].sum(-1)] if "attention_mask" in inputs else [],
        "tokens": output.tokens.tolist(), "seconds": round(seconds, 4),
        "decode_steps_per_second": round(output.decode_steps_per_second, 2),
        "decode_tokens_per_second": round(output.decode_tokens_per_second, 2),
    }
    status = "pass"
    if eager is not None:
        from exporters.generation.check import check_generation

        check = check_generation(eager, bundle, inputs, max_new_tokens=max_new_tokens)
        result["eager_comparison"] = check.as_dict()
        status = check.status
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        _print_generation(result)
    if status != "pass":
        sys.exit(EXIT_FAILED)


def _print_generation(result: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"{result['model_class']} ({result['backend']}): generate", title_justify="left")
    table.add_column("row", justify="right")
    table.add_column("prompt", justify="right")
    table.add_column("new tokens", overflow="fold")
    lengths = result["prompt_lengths"] or ["-"] * len(result["tokens"])
    for row, (length, tokens) in enumerate(zip(lengths, result["tokens"])):
        table.add_row(str(row), str(length), " ".join(map(str, tokens)))
    console.print(table)
    console.print(f"decode: {result['decode_steps_per_second']} steps/s, {result['decode_tokens_per_second']} "
                  f"tokens/s (all rows); total {result['seconds']} s")
    check = result.get("eager_comparison")
    if check is not None:
        console.print(f"eager generate(): {check['status']}: {check['detail']}")


def rerun_generation_command(entry: LedgerEntry, model: str, backend: str, out_dir: Path | None,
                             outcome_json: Path | None, as_json: bool, seed: int,
                             without: tuple[str, ...] = ()) -> None:
    """``exportbot export CLASS --repro ID`` for a generate entry: the outcome record, exit 1 unless it passed."""
    from bot.cli.json_output import emit_json

    out_dir = out_dir or Path("out") / f"{model}-{backend}-generation"
    outcome = rerun_generation(entry, model, backend, out_dir, seed, without)
    if outcome_json is not None:
        emit_json(outcome.as_dict(), outcome_json)
    if as_json:
        emit_json(outcome.as_dict())
    else:
        click.echo(f"{model} → {backend} (generation, reproducer of {entry.id}, its gate off): {outcome.status}"
                   + (f": {outcome.error.splitlines()[0]}" if outcome.error else ""))
    if outcome.status != "pass":
        sys.exit(EXIT_FAILED)
