"""``exportbot export MODEL --task text-generation`` and ``exportbot generate DIR``: generation bundles.

The export command prints what ``bot.run.generation.export_generation`` did (exported, validated token for
token, published); ``--repro ID`` of a ``generate``-scope entry prints its re-run as JSON. ``generate`` loads
a bundle, generates from random prompts of a chosen length in the bundle's runtime, prints the tokens and
decode speed, and compares them with eager ``generate()`` on the model the bundle came from (rebuilt from
the ``source`` the manifest records).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.run.generation import LedgerSkip, rebuild_source, rerun_generation
from exporters.ledger import LedgerEntry


def export_generation_command(model: str, target: str, backend: str, task: str, out_dir: Path | None,
                              seed: int = 0, batch_size: int = 2, sequence_length: int = 8,
                              max_sequence: int | None = None, et_backend: str | None = None,
                              no_optimize: bool = False, ort_fusions: bool = False, without: tuple[str, ...] = (),
                              ignore_ledger: bool = False,
                              init_scale: float | None = None, try_builds: bool = False, as_json: bool = False,
                              outcome_json: Path | None = None, quantize: Any = None, cache: str | None = None) -> None:
    """``exportbot export MODEL --task <generation task>``: progress on stderr, the bundle's table (or with
    ``--json`` the outcome record) on stdout, every failure one line (and ``OUT.failed.json``), exit 1 unless it
    passed. ``target`` is what is built: MODEL, or the generating head the task gives a class name (BertModel →
    BertLMHeadModel)."""
    from bot.cli.json_output import emit_json
    from bot.cli.progress import StageDisplay
    from bot.errors import echo_failure
    from bot.run.generation import new_generation_outcome, recorded_generation

    out_dir = out_dir or Path("out") / f"{Path(model).name}-{backend}-generation"
    outcome = new_generation_outcome(target, backend)
    outcome.workarounds_disabled = sorted(without)
    outcome.optimize = False if no_optimize else None
    if target != model:
        click.echo(f"{model}: --task {task} exports its generating head, {target}", err=True)
    try:
        with StageDisplay(Console(stderr=True), target) as display:
            export = recorded_generation(
                outcome, out_dir, display, usage_raises=True, task=task, seed=seed, batch_size=batch_size,
                prompt_length=sequence_length, max_cache_len=max_sequence, et_backend=et_backend or "xnnpack",
                optimize=not no_optimize, ort_fusions=ort_fusions, without=without, ignore_ledger=ignore_ledger,
                init_scale=init_scale, try_builds=try_builds, quantize=quantize, cache=cache or "dynamic")
    except LedgerSkip as skip:
        click.echo(f"{target}: {skip}\nUse --ignore-ledger to try the export anyway.")
        sys.exit(EXIT_FAILED)
    if outcome_json is not None:
        emit_json(outcome.as_dict(), outcome_json)
    if as_json:
        emit_json(outcome.as_dict())
    elif export is not None:
        print_export(Console(), model, target, backend, export, out_dir, outcome.seconds)
    if outcome.status != "pass":
        echo_failure(outcome)
        sys.exit(EXIT_FAILED)


def print_export(console: Console, model: str, target: str, backend: str, export: Any, out_dir: Path,
                 seconds: float) -> None:
    """The components (verdict, their export and validation seconds, inputs), the token comparison, the time."""
    head = f"{model} ({target})" if target != model else model
    table = Table(title=f"{head} → {backend} (generation): {export.status}", title_justify="left")
    quantized = export.quantization is not None
    for column in ("component", "validation", "export s", "validate s", "inputs",
                   *(("fidelity steps", "quality") if quantized else ())):
        table.add_column(column, overflow="fold")
    for name, result in export.results.items():
        stages = result.metadata.stage_seconds
        status = result.validation.status if result.validation else "not validated"
        row = [name, status, f"{stages.get('total', 0.0):.1f}", f"{stages.get('validation', 0.0):.1f}",
               ", ".join(result.component.arguments[:4]) + (" …" if len(result.component.arguments) > 4 else "")]
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
    console.print(f"time: {seconds:.1f}s in all (building the model, both exports, validation, the token comparison)",
                  highlight=False)
    if export.status == "pass":
        console.print(f"bundle: {out_dir}")


@click.command("generate")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--prompt", "prompts", multiple=True, metavar="TEXT",
              help="A prompt as text (repeatable: one row each), encoded with the tokenizer saved in the bundle; "
                   "the new tokens are decoded back to text. A tiny model's bundle has none: use --prompt-length.")
@click.option("--prompt-length", type=int, default=8, show_default=True,
              help="Tokens per random prompt (row 0), without --prompt.")
@click.option("--max-new-tokens", type=int, default=16, show_default=True, help="Tokens to generate per row.")
@click.option("--batch-size", type=int, default=2, show_default=True,
              help="Random prompts: rows; row i is left-padded by i*N/3 tokens (ExecuTorch: the exported batch).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random prompts (and sampling).")
@click.option("--sample", "do_sample", is_flag=True, help="Sample from softmax(logits/temperature) instead of greedy.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="With --sample.")
@click.option("--top-k", type=int, default=0, show_default=True, help="With --sample: keep the k best (0: all).")
@click.option("--stop-at-eos/--no-stop-at-eos", default=False, show_default=True,
              help="Stop a row at its EOS token (default: generate --max-new-tokens, as the eager check does).")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also run eager generate() on the source model and compare token for token (greedy only; "
                   "skipped, with a note, when the bundle cannot rebuild it).")
@click.option("--threads", type=int, default=None, metavar="N",
              help="ONNX Runtime intra-op threads [default: its own, one per core]; on cores shared with other "
                   "work, 1 decodes faster (docs/generation.md, \"Decode speed\").")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@report_errors
def generate_command(directory: Path, prompts: tuple[str, ...], prompt_length: int, max_new_tokens: int,
                     batch_size: int, seed: int, do_sample: bool, temperature: float, top_k: int, stop_at_eos: bool,
                     compare: bool, threads: int | None, as_json: bool) -> None:
    """Generate from the generation bundle in DIRECTORY, every step in the bundle's runtime.

    Prompts are text (--prompt, with the checkpoint's tokenizer saved in the bundle) or random token ids
    (speech models: random features). Prints the new tokens (and text), decode steps/s and tokens/s, and,
    unless --no-compare or --sample, eager generate()'s tokens for the same prompts and the verdict (exit 1
    on a mismatch). A quantized bundle's tokens are compared with float eager's as its quality: steps equal
    before the first divergence, exit 1 only below the floor it was exported with (docs/quantization.md). The bundle needs nothing outside its directory: copied elsewhere, it generates the same.
    Make one with `exportbot export LlamaForCausalLM --task text-generation --backend onnx --out out/llama-gen`.

    \b
    Examples:
      exportbot generate out/llama-gen --prompt-length 12 --max-new-tokens 32
      exportbot generate out/llama-gen --prompt-length 1 --batch-size 1
      exportbot generate out/ckpt-gen --prompt "the quick brown fox" --prompt "hello"
      exportbot generate out/llama-gen --sample --temperature 0.8 --top-k 20 --seed 3
      exportbot generate out/llama-gen --max-new-tokens 256 --threads 1
    """
    if prompt_length < 1 or max_new_tokens < 1 or batch_size < 1:
        raise UsageProblem("--prompt-length, --max-new-tokens and --batch-size must be at least 1")
    if threads is not None and threads < 1:
        raise UsageProblem(f"--threads must be at least 1, got {threads}")
    bundle = load_bundle(directory, threads)
    layout = bundle.metadata.generation
    if not layout:
        raise UsageProblem(f"{directory}: not a generation bundle (export it with --task text-generation)")
    eager, why_not = rebuild_source(layout.get("source", {}), directory) if compare and not do_sample else (None, None)
    if why_not:
        click.echo(f"no eager comparison: {why_not}", err=True)
    inputs = (text_prompts(bundle, directory, prompts) if prompts
              else random_prompts(bundle, eager, batch_size, prompt_length, seed))
    check_prompt_fits(bundle, directory, inputs, max_new_tokens)
    options: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": do_sample,
                               "temperature": temperature, "top_k": top_k, "seed": seed}
    if not stop_at_eos:
        options["min_new_tokens"] = max_new_tokens
    from exporters.bundle.loading import InputError

    started = time.perf_counter()
    try:
        output = bundle.generate(**inputs, **options)
    except InputError as error:  # a prompt outside what the bundle validated: the loader says why, in one line
        raise UsageProblem(f"{directory}: {error}") from None
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {
        "directory": str(directory), "backend": bundle.metadata.backend, "model_class": bundle.metadata.model_class,
        "prompt_lengths": [int(v) for v in inputs["attention_mask"].sum(-1)] if "attention_mask" in inputs else [],
        "tokens": output.tokens.tolist(), "seconds": round(seconds, 4),
        "decode_steps_per_second": round(output.decode_steps_per_second, 2),
        "decode_tokens_per_second": round(output.decode_tokens_per_second, 2),
    }
    if prompts:
        result["prompts"] = list(prompts)
        result["text"] = bundle.tokenizer.batch_decode(output.tokens, skip_special_tokens=True)
    status = "pass"
    if eager is not None and bundle.metadata.quantization:
        tokens = float_tokens_quality(bundle, eager, inputs, output.tokens)
        result["float_comparison"] = dataclasses.asdict(tokens)
        status = "mismatch" if tokens.status == "mismatch" else "pass"
    elif eager is not None:
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


def float_tokens_quality(bundle: Any, eager: Any, inputs: dict[str, Any], tokens: Any) -> Any:
    """A quantized bundle's greedy tokens against the float model's: its quality, held to the floor it was
    exported with (docs/quantization.md). Token for token against float eager is not the bundle's fidelity:
    4-bit weights may move a near-tie, which the export judged and recorded."""
    from exporters.generation.check import token_quality
    from exporters.quantize.schemes import QuantizeConfig

    layout, record = bundle.metadata.generation, bundle.metadata.quantization
    floor = QuantizeConfig.recorded(record["config"]).thresholds(bundle.metadata.backend)["min_equal_tokens"]
    random_weights = not layout.get("source", {}).get("weights", False)  # a tiny model, or no weights saved
    return token_quality(eager, layout, inputs, tokens, floor, random_weights)


def load_bundle(directory: Path, threads: int | None = None) -> Any:
    """``exporters.load(directory, threads)``, or one line (exit 2) saying why it is not a bundle that loads."""
    from exporters.bundle.format import BundleError
    from exporters.bundle.loading import load

    try:
        return load(directory, threads=threads)
    except (BundleError, FileNotFoundError) as error:
        raise UsageProblem(str(error)) from None


def text_prompts(bundle: Any, directory: Path, prompts: tuple[str, ...]) -> dict[str, Any]:
    """``--prompt`` texts as the checkpoint's tokenizer encodes them, padded on the side the bundle's kind
    pads (decoder-only: left, so every row's last token is real; encoder-decoder: right)."""
    layout = bundle.metadata.generation
    if "image_input" in layout or layout.get("encoder_input", "input_ids") != "input_ids":
        raise UsageProblem(f"{directory} takes {'images' if 'image_input' in layout else 'audio'} with its prompts; "
                           "--prompt gives text only: use --prompt-length")
    tokenizer = bundle.tokenizer
    if tokenizer is None:
        raise UsageProblem(f"{directory} holds no tokenizer (a tiny random model's bundle): generate from random "
                           "token ids with --prompt-length")
    if layout["batch"] == "static" and len(prompts) != layout["batch_size"]:
        raise UsageProblem(f"{directory} was exported with a static batch of {layout['batch_size']}; give "
                           f"{layout['batch_size']} --prompt texts")
    tokenizer.padding_side = "left" if layout["kind"] == "decoder-only" else "right"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = layout.get("pad_token_id") or (layout.get("eos_token_id") or [0])[0]
    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def random_prompts(bundle: Any, eager: Any, batch_size: int, prompt_length: int, seed: int) -> dict[str, Any]:
    """Random prompts of ``prompt_length`` tokens (row i left-padded by i*N/3) for the bundle's kind."""
    from exporters.generation.components import make_image_prompts, make_prompts, sample_prompts

    layout = bundle.metadata.generation
    if layout["batch"] == "static" and batch_size != layout["batch_size"]:
        raise UsageProblem(f"{bundle.directory} was exported with a static batch of {layout['batch_size']}; "
                           f"use --batch-size {layout['batch_size']}")
    if eager is not None:
        return sample_prompts(eager, batch=batch_size, prompt_length=prompt_length, seed=seed)
    if "image_input" in layout:  # a vision-language bundle: placeholders and pixels from its manifest
        image = layout["image_input"]
        return make_image_prompts(image["image_token_id"], image["tokens_per_image"], tuple(image["shape"]),
                                  bundle.config.get_text_config(decoder=True).vocab_size,
                                  layout.get("pad_token_id"), batch_size, prompt_length, seed)
    return make_prompts(layout["kind"], layout.get("encoder_input", "input_ids"), bundle.config,
                        layout.get("pad_token_id"), batch_size, prompt_length, seed)


def check_prompt_fits(bundle: Any, directory: Path, inputs: dict[str, Any], max_new_tokens: int) -> None:
    """A decoder-only bundle's cache holds prompt plus new tokens up to ``max_cache_len``: refuse more, in one
    line, before the runtime does."""
    layout = bundle.metadata.generation
    if layout["kind"] != "decoder-only" or "input_ids" not in inputs:
        return
    length = int(inputs["input_ids"].shape[1])
    limit = layout["max_cache_len"]
    if length + max_new_tokens > limit:
        raise UsageProblem(f"a prompt of {length} tokens + --max-new-tokens {max_new_tokens} exceed {directory}'s "
                           f"max_cache_len {limit}")


def _print_generation(result: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"{result['model_class']} ({result['backend']}): generate", title_justify="left")
    table.add_column("row", justify="right")
    table.add_column("prompt", justify="right")
    table.add_column("new tokens", overflow="fold")
    texts = "text" in result
    if texts:
        table.add_column("text", overflow="fold")
    lengths = result["prompt_lengths"] or ["-"] * len(result["tokens"])
    for row, (length, tokens) in enumerate(zip(lengths, result["tokens"])):
        text = [f"{result['prompts'][row]!r} → {result['text'][row]!r}"] if texts else []
        table.add_row(str(row), str(length), " ".join(map(str, tokens)), *text)
    console.print(table, highlight=False)
    console.print(f"decode: {result['decode_steps_per_second']} steps/s, {result['decode_tokens_per_second']} "
                  f"tokens/s (all rows); total {result['seconds']} s")
    check = result.get("eager_comparison")
    if check is not None:
        console.print(f"eager generate(): {check['status']}: {check['detail']}")
    tokens = result.get("float_comparison")
    if tokens is not None:
        console.print(f"greedy tokens vs float eager (quality): {tokens['status']}: {tokens['detail']}")


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
