"""``exportbot export MODEL --task text-generation`` and ``exportbot generate DIR``: generation bundles.

``export_generation`` builds the model (a class name built tiny and random, or a local checkpoint), exports
its ``prefill`` and ``decode`` components (exporters.generation.export), validates the written bundle token
for token against eager, and publishes it. ``generate`` loads a bundle, generates from random prompts of a
chosen length in the bundle's runtime, prints the tokens and decode speed, and compares them with eager
``generate()`` on the model the bundle came from (rebuilt from the ``source`` the manifest records).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bot.errors import EXIT_FAILED, UsageProblem, report_errors

# Tasks whose export is a generation bundle, and the kind of model each needs.
GENERATION_TASKS = {
    "text-generation": "decoder-only",
    "text2text-generation": "encoder-decoder",
    "automatic-speech-recognition": "encoder-decoder",
}


def generation_class(model: str, task: str | None) -> str | None:
    """The class a generation export of MODEL builds for TASK, or None when it is no generation export: the
    task is not a generation task, or it maps MODEL to a head that does not generate (Wav2Vec2's CTC for
    automatic-speech-recognition), which the ordinary single-graph export handles."""
    if task not in GENERATION_TASKS:
        return None
    import json

    from exporters.export_options import OptionError, class_for_task, resolve_class_name
    from exporters.tiny import TinyModelError, model_class

    path = Path(model)
    try:
        if path.is_dir():  # architectures[0], or (a config without it) the task's head
            name = (json.loads((path / "config.json").read_text()).get("architectures") or [""])[0]
            name = name or resolve_class_name(model, task)
        else:
            name = model
        cls = model_class(name)
        if not cls.can_generate():
            cls = model_class(class_for_task(cls.config_class, task))
    except (TinyModelError, OptionError, OSError, ValueError):
        return None
    return cls.__name__ if cls.can_generate() else None


class NotForGeneration(UsageProblem):
    """The model keeps no KV cache that prefill + decode components can carry (exporters.generation.support):
    one line naming why; the sweep records it as ``skipped`` with that reason, the CLI exits 2."""


class LedgerSkip(Exception):
    """An EXPORT_SKIPS entry gates this generation export."""

    def __init__(self, entry: Any):
        super().__init__(f"skipped by ledger entry {entry.id!r}: {entry.reason}")
        self.entry = entry


def build_generation_model(model: str, seed: int, task: str | None = None,
                           overrides: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The eager model for a generation export and the ``source`` record that rebuilds it later."""
    from exporters.export_options import OptionError, load_checkpoint
    from exporters.generation.components import generation_kind
    from exporters.generation.support import unsupported_reason
    from exporters.tiny import TinyModelError, build_tiny, model_class
    from exporters.tiny.generation import generation_overrides

    path = Path(model)
    try:
        if path.is_dir():  # as `export` loads it: its weights, else random from its config; the task's head
            name = generation_class(model, task or "text-generation")
            if name is None:
                raise UsageProblem(f"{model}: no generating head for its config; choose one with --task "
                                   f"{' or '.join(GENERATION_TASKS)}")
            built, _ = load_checkpoint(model, name, seed)
            source = {"checkpoint": str(path.resolve()), "seed": seed, "task": task}
        else:  # the generation knobs first (is_decoder on encoder-style configs); explicit overrides win
            overrides = {**generation_overrides(model_class(model).config_class()), **(overrides or {})}
            built = build_tiny(model, seed, overrides=overrides).model
            source = {"tiny": model, "seed": seed, "overrides": overrides}
    except (TinyModelError, OptionError) as error:
        raise UsageProblem(str(error)) from None
    try:
        kind = generation_kind(built)
    except ValueError as error:
        raise UsageProblem(f"{model}: {error}") from None
    if task is not None and GENERATION_TASKS.get(task) not in (None, kind):
        raise UsageProblem(f"{model} is {kind}; --task {task} needs an {GENERATION_TASKS[task]} model")
    reason = unsupported_reason(built)
    if reason is not None:
        raise NotForGeneration(reason)
    fill_decoder_start(built)
    return built, source


def fill_decoder_start(model: Any) -> None:
    """Give an encoder-decoder model without ``decoder_start_token_id`` its pad token as the start token.

    T5's config class has no such field (its checkpoints set ``decoder_start_token_id: 0``, the pad id, in
    config.json), so a T5 built from its config class cannot ``generate()`` at all; this is what T5 means.
    """
    generation, config = model.generation_config, model.config
    missing = generation.decoder_start_token_id is None and getattr(config, "decoder_start_token_id", None) is None
    if config.is_encoder_decoder and missing and config.pad_token_id is not None:
        generation.decoder_start_token_id = config.pad_token_id


def rebuild_source(source: dict[str, Any]) -> Any:
    """The eager model a bundle's ``generation.source`` names."""
    if "tiny" in source:
        model, _ = build_generation_model(source["tiny"], source.get("seed", 0), overrides=source.get("overrides"))
        return model
    if "checkpoint" in source:
        model, _ = build_generation_model(source["checkpoint"], source.get("seed", 0), source.get("task"))
        return model
    raise UsageProblem("the bundle records no source model to compare with (use --no-compare)")


def make_generation_exporter(backend: str, et_backend: str = "xnnpack", optimize: bool = True,
                             without: tuple[str, ...] = ()) -> Any:
    if backend == "onnx":
        from exporters.onnx.exporter import OnnxConfig, OnnxExporter

        return OnnxExporter(OnnxConfig(optimize=optimize, without=frozenset(without)))
    if backend == "executorch":
        from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

        return ExecutorchExporter(ExecutorchConfig(backend=et_backend, without=frozenset(without)))
    from exporters.dynamo.exporter import DynamoConfig, DynamoExporter

    return DynamoExporter(DynamoConfig(without=frozenset(without)))


def export_generation(model: str, backend: str, out_dir: Path, task: str | None = None, seed: int = 0,
                      max_cache_len: int = 64, batch_size: int = 2, prompt_length: int = 8, new_tokens: int = 16,
                      et_backend: str = "xnnpack", optimize: bool = True, without: tuple[str, ...] = (),
                      overrides: dict[str, Any] | None = None, ignore_ledger: bool = False,
                      stages: Any = None) -> Any:
    """Export, validate from the written files, publish: the ``export --task <generation task>`` path.

    Raises ``LedgerSkip`` when an EXPORT_SKIPS entry gates this class's generation export on ``backend``
    (scopes ``all``, ``dynamic``, ``generate``), unless ``ignore_ledger``. ``stages`` (an
    ``exporters.stages.StageTracker``) is told the steps of our own, so a failure record names the one that
    raised (``building model``, ``exporting components``, ``validating``) where no torch stage did.
    """
    from exporters.generation.components import GenerationExportConfig, sample_prompts
    from exporters.generation.export import export_for_generation
    from exporters.generation.support import GenerationUnsupported
    from exporters.validation import ValidationError

    def stage(name: str) -> Any:
        return stages.stage(name) if stages is not None else contextlib.nullcontext()

    with stage("building model"):
        built, source = build_generation_model(model, seed, task, overrides)
    if not ignore_ledger:
        from exporters.ledger import load_ledger

        entry = load_ledger().skip(type(built).__name__, backend, dynamic=True, generate=True)
        if entry is not None:
            raise LedgerSkip(entry)
    if prompt_length + new_tokens > max_cache_len:
        raise UsageProblem(f"--sequence-length {prompt_length} + {new_tokens} new tokens exceed max_cache_len "
                           f"{max_cache_len}")
    with stage("building model"):
        inputs = sample_prompts(built, batch=batch_size, prompt_length=prompt_length, seed=seed)
    exporter = make_generation_exporter(backend, et_backend, optimize, without)
    with stage("exporting components"):
        try:
            export = export_for_generation(exporter, built, inputs,
                                           GenerationExportConfig(max_cache_len=max_cache_len), new_tokens=new_tokens)
        except GenerationUnsupported as error:  # found at the first eager prefill (no cache returned)
            raise NotForGeneration(str(error)) from None
    export.layout["source"] = source
    with stage("validating"), contextlib.suppress(ValidationError):  # reported from export.status / problems
        export.save(out_dir)
    return export


def export_generation_command(model: str, backend: str, task: str, out_dir: Path | None, seed: int = 0,
                              batch_size: int = 2, sequence_length: int = 8, max_sequence: int | None = None,
                              et_backend: str | None = None, no_optimize: bool = False,
                              without: tuple[str, ...] = (), ignore_ledger: bool = False) -> None:
    """``exportbot export MODEL --task <generation task>``: the bundle, its table, exit 1 unless it passed."""
    out_dir = out_dir or Path("out") / f"{Path(model).name}-{backend}-generation"
    console = Console(stderr=True)
    try:
        with console.status(f"{model}: exporting prefill and decode with {backend}, then validating"):
            export = export_generation(model, backend, out_dir, task=task, seed=seed, batch_size=batch_size,
                                       prompt_length=sequence_length, max_cache_len=max_sequence or 64,
                                       et_backend=et_backend or "xnnpack", optimize=not no_optimize,
                                       without=without, ignore_ledger=ignore_ledger)
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
    for column in ("component", "validation", "export s", "inputs"):
        table.add_column(column, overflow="fold")
    for name, result in export.results.items():
        seconds = sum(result.metadata.stage_seconds.values())
        status = result.validation.status if result.validation else "not validated"
        table.add_row(name, status, f"{seconds:.1f}", ", ".join(result.component.arguments[:4]) +
                      (" …" if len(result.component.arguments) > 4 else ""))
    console.print(table)
    if export.check is not None:
        console.print(f"generate vs eager: {export.check.status}: {export.check.detail}")
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
