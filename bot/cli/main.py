"""The ``exportbot`` command line.

Exit codes (every command): 0 success; 1 the job ran and found a problem (export failed or did not
validate, lint errors, ...); 2 bad input (unknown class, unreadable directory, invalid option), printed
as one line. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.cli.generate import export_generation_command, rerun_generation_command
from bot.cli.json_output import emit_json, json_flag
from bot.cli.quantize_options import print_quantization, quantize_options
from bot.errors import (
    EXIT_FAILED,
    ExportbotGroup,
    SuggestingChoice,
    UsageProblem,
    echo_failure,
    report_errors,
)
from bot.outcome import BACKENDS, PASS, SKIPPED, ExportRequest
from bot.run.generation import generate_entry, generation_class
from bot.run.runner import export_one
from exporters.export_options import DTYPES, TASKS
from exporters.quantize.schemes import QuantizeConfig


@click.group(cls=ExportbotGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors (accepted anywhere).")
def main(debug: bool) -> None:
    """exportbot: export transformers models to ONNX and ExecuTorch, and keep the workaround lists honest.

    Results go to stdout, progress and errors to stderr. Exit codes: 0 success, 1 the job ran and found a
    problem, 2 bad input (one line, before any work), 130 interrupted (Ctrl-C).

    \b
    Examples:
      exportbot export LlamaForCausalLM --backend onnx --dynamic --out out/llama
      exportbot export ./my-checkpoint --task text-classification --backend executorch
      exportbot list-workarounds --json
      exportbot audit --tracker registry/upstream-snapshot.json
    """
    if not debug:
        quiet_library_logs()


def quiet_library_logs() -> None:
    """torch, torchao, onnxscript and transformers log warnings, progress bars and model-init notes meant for
    their developers; users see ours (``--debug`` shows everything)."""
    import logging
    import warnings

    def silence() -> None:
        for name in ("torch", "torchao", "onnxscript", "onnx_ir", "transformers", "huggingface_hub"):
            logging.getLogger(name).setLevel(logging.ERROR)

    silence()
    import torch  # noqa: F401 - torch configures its loggers on import: silence again after it

    silence()
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights: 100%|…" on every checkpoint load
    transformers_logging.set_verbosity_error()  # model-init notes ("Initializing global attention …")
    # Every warning of third-party code (torch's, transformers', the ONNX reference evaluator's numpy
    # RuntimeWarnings while onnxscript folds constants) is for its developers; exportbot's own still show.
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"(exporters|bot)(\.|$)")


@main.command("export")
@click.argument("model")
@click.option("--backend", type=SuggestingChoice(BACKENDS), default="dynamo", show_default=True,
              help="dynamo writes model.pt2, onnx writes model.onnx, executorch writes model.pte.")
@click.option("--task", type=SuggestingChoice(list(TASKS)), default=None, metavar="TASK",
              help=f"Head to export: {', '.join(TASKS)} [default: the class named, or config.json's architectures].")
@click.option("--dynamic/--static", default=False, show_default=True,
              help="Export with symbolic batch and sequence dimensions (validated at a second shape).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Bundle directory: artifact, export.json, config.json (docs/export-format.md); a bundle that "
                   "does not validate is not written [default: out/<MODEL>-<backend>-<mode>].")
@click.option("--batch-size", type=int, default=2, show_default=True, help="Batch of the sample inputs.")
@click.option("--sequence-length", type=int, default=8, show_default=True, help="Token sequence of the sample inputs.")
@click.option("--image-size", type=int, default=None,
              help="Side of the sample images (a class name: also the tiny config's image_size).")
@click.option("--max-batch", type=int, default=None, help="Upper bound of the dynamic batch dim (with --dynamic).")
@click.option("--max-sequence", type=int, default=None,
              help="Upper bound of the dynamic sequence dim (with --dynamic; ExecuTorch default 128). Generation "
                   "tasks: prompt plus new tokens [default: the model's context, at most 2048].")
@click.option("--dynamic-dim", "dynamic_dims", multiple=True, metavar="NAME:AXIS[:MIN:MAX]",
              help="Also make this input axis dynamic, within MIN..MAX (repeatable; ExecuTorch needs MAX).")
@click.option("--opset", type=int, default=None, help="ONNX opset (18-23) [default: 20].")
@click.option("--dtype", type=SuggestingChoice(list(DTYPES)), default=None,
              help="Model and float inputs in this dtype; tolerances follow it (float16 1e-2, bfloat16 5e-2) "
              "[default: float32; ExecuTorch: its backend's].")
@click.option("--atol", type=float, default=None, help="Absolute tolerance of validation [default: per backend/dtype].")
@click.option("--rtol", type=float, default=None, help="Relative tolerance of validation [default: per backend/dtype].")
@click.option("--pretrained", is_flag=True, help="Hub id: load its weights too (else random weights from its config).")
@click.option("--no-optimize", is_flag=True, help="ONNX: turn the onnxscript optimizer off.")
@click.option("--ort-fusions", is_flag=True,
              help="ONNX: rewrite the graph into ONNX Runtime's fused ops (RMS/skip norm, rotary embedding, "
                   "attention where matched), validated like any export; runs in ONNX Runtime only.")
@click.option("--cache", type=SuggestingChoice(["dynamic", "in-place"]), default=None,
              help="Generation tasks: how the KV cache is held. dynamic: flat tensors into and out of every step; "
                   "in-place (batch 1, full-attention decoders): one step whose cache is written in place, so a "
                   "step feeds only its token; ExecuTorch: mutable buffers of the method; ONNX: "
                   "GroupQueryAttention's past/present bound to one buffer [default: dynamic].")
@click.option("--et-backend", type=SuggestingChoice(["xnnpack", "cuda"]), default=None,
              help="ExecuTorch delegate [default: xnnpack]; cuda needs a GPU.")
@click.option("--without", multiple=True, metavar="NAME",
              help="Leave this workaround out (repeatable); see `exportbot list-workarounds`.")
@click.option("--ignore-ledger", is_flag=True, help="Export even if the class is listed in EXPORT_SKIPS, "
              "and with the optimizer on even if listed in ONNX_DISABLE_OPTIMIZE.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for random weights (a generation export of a class name otherwise tries the sweep's "
                   "builds until one is not degenerate).")
@click.option("--init-scale", type=float, default=None, metavar="X",
              help="Multiply a tiny model's initialisation scales (initializer_range, initializer_factor, "
                   "init_std) by X: larger weights for a model whose outputs are degenerate (inconclusive).")
@click.option("--repro", "repro", default=None, metavar="ENTRY_ID",
              help="Export ledger entry ENTRY_ID's reproducer (registry/README.md) without the ledger: exactly "
              "what `exportbot audit` re-runs for it.")
@json_flag("the outcome record", "the record fields of docs/sweep-results.md")
@click.option("--outcome-json", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the outcome record (status, error, diffs, workarounds fired) as JSON here.")
@report_errors
@quantize_options
def export_command(model: str, backend: str, task: str | None, dynamic: bool, out_dir: Path | None,
                   batch_size: int, sequence_length: int, image_size: int | None, max_batch: int | None,
                   max_sequence: int | None, dynamic_dims: tuple[str, ...], opset: int | None, dtype: str | None,
                   atol: float | None, rtol: float | None, pretrained: bool, no_optimize: bool, ort_fusions: bool,
                   cache: str | None, et_backend: str | None, without: tuple[str, ...], ignore_ledger: bool, seed: int,
                   init_scale: float | None, repro: str | None, as_json: bool, outcome_json: Path | None,
                   quantize: QuantizeConfig | None) -> None:
    """Export MODEL and check the artifact against the eager model.

    MODEL is a transformers class name (built tiny and random), a local checkpoint directory, or a hub id
    (org/name: its config, and its weights with --pretrained). The artifact is validated against eager
    (and at a second shape when --dynamic) and written as a bundle (export.json, summary.json: options,
    diffs, timings, workarounds fired) to --out. A failure leaves --out as it was and is one line (stage,
    cause, hint); its full text is in OUT.failed.json beside --out.

    \b
    Examples:
      exportbot export BertModel --backend onnx --dynamic --max-sequence 64 --opset 18
      exportbot export ./ckpt --task text-classification --dtype float16 --backend onnx
      exportbot export ViTModel --backend executorch --batch-size 1 --image-size 64
      exportbot export LlamaModel --dynamic-dim input_ids:1:2:32 --dynamic-dim attention_mask:1:2:32
      exportbot export LlamaForCausalLM --task text-generation --backend onnx --ort-fusions
      exportbot export LlamaForCausalLM --task text-generation --backend executorch --cache in-place
      exportbot export LlamaForCausalLM --task text-generation --backend onnx --cache in-place
      exportbot export LlamaForCausalLM --backend executorch --quantize 8da4w --group-size 64
      exportbot export ./ckpt --task text-generation --backend onnx --quantize int4 --min-equal-tokens 8
    """
    from bot.cli.export_checks import check_request

    if repro is not None and (entry := generate_entry(repro)) is not None:  # bot/run/generation.py
        return rerun_generation_command(entry, model, backend, out_dir, outcome_json, as_json, seed, without)
    generation = generation_class(model, task)
    if generation is not None:  # prefill + decode with a KV cache: bot/cli/generate.py
        from bot.cli.export_checks import check_generation_request

        check_generation_request(backend, out_dir, et_backend=et_backend, no_optimize=no_optimize, without=without,
                                 ort_fusions=ort_fusions, cache=cache)
        target = model if Path(model).is_dir() else generation
        context = click.get_current_context()
        seed_given = context.get_parameter_source("seed") is not ParameterSource.DEFAULT
        if cache == "in-place" and context.get_parameter_source("batch_size") is ParameterSource.DEFAULT:
            batch_size = 1  # the in-place cache serves batch 1 (an explicit --batch-size 2 is refused)
        return export_generation_command(model, target, backend, task, out_dir, seed=seed, batch_size=batch_size,
                                         sequence_length=sequence_length, max_sequence=max_sequence,
                                         et_backend=et_backend, no_optimize=no_optimize, ort_fusions=ort_fusions,
                                         without=without,
                                         ignore_ledger=ignore_ledger, init_scale=init_scale,
                                         try_builds=not seed_given and init_scale is None, as_json=as_json,
                                         outcome_json=outcome_json, quantize=quantize, cache=cache)
    if cache is not None:
        raise UsageProblem(f"--cache {cache} is a generation option: give --task text-generation")

    mode = "dynamic" if dynamic or dynamic_dims else "static"  # a --dynamic-dim makes the export dynamic
    out_dir = out_dir or Path("out") / f"{Path(model).name}-{backend}-{mode}"
    options = check_request(
        model, backend, dynamic, out_dir, et_backend=et_backend, no_optimize=no_optimize, ort_fusions=ort_fusions,
        without=without,
        task=task, batch_size=batch_size, sequence_length=sequence_length, image_size=image_size,
        max_batch=max_batch, max_sequence=max_sequence, dynamic_dims=dynamic_dims, opset=opset, dtype=dtype,
        atol=atol, rtol=rtol, pretrained=pretrained, init_scale=init_scale, quantize=quantize,
    )  # fmt: skip
    if repro is not None:
        from bot.cli.export_checks import check_repro

        check_repro(repro, model, backend, dynamic)
    if not Path(model).exists() and options.task is not None:
        from exporters.export_options import resolve_class_name

        if (head := resolve_class_name(model, options.task)) != model:  # a task that changes the class says so
            click.echo(f"{model}: --task {options.task} exports {head}", err=True)
    from bot.cli.progress import StageDisplay

    request = ExportRequest(model, backend, dynamic, optimize=False if no_optimize else None, ort_fusions=ort_fusions,
                            et_backend=et_backend or "xnnpack", without=without,
                            ignore_ledger=("all",) if ignore_ledger else (), seed=seed, out_dir=out_dir,
                            repro=repro, options=options)
    with StageDisplay(Console(stderr=True), model) as display:
        from exporters.export_options import OptionError

        try:  # the bundle is staged beside out_dir and renamed into place only once validated
            outcome = export_one(request, progress=display)
        except OptionError as error:
            raise UsageProblem(str(error)) from None
    if outcome_json is not None:
        emit_json(outcome.as_dict(), outcome_json)
    if as_json:
        emit_json(outcome.as_dict())
    elif outcome.status == SKIPPED:
        click.echo(f"{model}: skipped by ledger entry {outcome.ledger_entry!r}: {outcome.ledger_reason}")
    else:
        _print_outcome(outcome)
    if outcome.status == SKIPPED:
        click.echo("Use --ignore-ledger to try the export anyway.", err=True)
    elif outcome.status != PASS:
        echo_failure(outcome)
    if outcome.status != PASS:
        sys.exit(EXIT_FAILED)


def _print_outcome(outcome: Any) -> None:
    """The result on stdout: status, the diff table when something was compared, timings, files."""
    console = Console()
    console.print(f"{outcome.model} → {outcome.backend} ({outcome.mode}): {outcome.status}", highlight=False)
    if outcome.max_abs_diff:
        table = Table()
        table.add_column("output", overflow="fold")
        table.add_column("max abs diff", justify="right")
        for name, diff in outcome.max_abs_diff.items():
            table.add_row(name, f"{diff:.3g}")
        console.print(table)
    print_quantization(console, outcome.quantization)
    if outcome.ledger_entry:
        console.print(f"ledger entry applied: {outcome.ledger_entry} ({outcome.ledger_reason})", highlight=False)
    if outcome.workarounds_fired:
        console.print("workarounds fired: " + ", ".join(f"{k}×{v}" for k, v in outcome.workarounds_fired.items()),
                      highlight=False)
    parts = {k: v for k, v in outcome.stage_seconds.items() if k != "total" and v >= 0.05}  # summary.json has all
    if parts:
        timing = ", ".join(f"{k} {v:.1f}s" for k, v in parts.items())
        console.print(f"time: {outcome.seconds:.1f}s ({timing})", highlight=False)
    for kind, path in outcome.files.items():
        console.print(f"{kind}: {path}", highlight=False, soft_wrap=True)


@main.command("list-workarounds")
@json_flag("every workaround (name, kind, backend, targets, upstream, dependency, summary)", "a list of objects")
@report_errors
def list_workarounds_command(as_json: bool) -> None:
    """List every registered workaround: kind, backend, targets, upstream issue, dependency.

    The table shows upstream issues as owner/repo#N and patch targets by their last two names; --json
    gives the full URLs, dotted paths and one-line summaries.

    \b
    Examples:
      exportbot list-workarounds
      exportbot list-workarounds --json | jq -r '.[] | select(.backend == "onnx") | .name'
      exportbot list-workarounds --json > workarounds.json
    """
    from bot.cli.terminal import compact_table, short_link, short_target
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    workarounds = [w.as_dict() for w in all_workarounds()]
    if as_json:
        emit_json(workarounds)
        return
    table = compact_table("workaround (targets)", "backend · kind\nupstream · needs", title=f"{len(workarounds)} workarounds")
    table.columns[0].width = max(len(w["name"]) for w in workarounds)
    for w in workarounds:
        targets = "".join(f"\n {short_target(t)}" for t in w["targets"])
        table.add_row(f"{w['name']}[dim]{escape(targets)}[/dim]",
                      f"{w['backend']} · {w['kind']}\n[dim]{short_link(w['upstream'])} · {w['dependency'] or '—'}[/dim]")
    Console().print(table)


@main.command("tiny-checkpoint")
@click.argument("model_class", metavar="CLASS")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--config-only", is_flag=True,
              help="No weights: `export` then initialises the model at random from config.json (under --seed).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@report_errors
def tiny_checkpoint_command(model_class: str, directory: Path, config_only: bool, seed: int) -> None:
    """Write a tiny checkpoint of CLASS to DIRECTORY: config.json, random weights and a tokenizer.

    A checkpoint to try `exportbot export DIR` and `exportbot generate --prompt` on without the hub: the tiny
    model exportbot builds for CLASS (random, deterministic) saved with save_pretrained, and a small byte-pair
    tokenizer trained for its vocabulary, whose special tokens are the model's.

    \b
    Examples:
      exportbot tiny-checkpoint LlamaForCausalLM my-checkpoint
      exportbot tiny-checkpoint T5ForConditionalGeneration t5-checkpoint --config-only
    """
    from bot.cli.export_checks import check_model
    from exporters.tiny.checkpoint import write_tiny_checkpoint

    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageProblem(f"{directory}: exists and is not an empty directory")
    check_model(model_class, None)
    write_tiny_checkpoint(directory, model_class, seed, weights=not config_only)
    click.echo(f"{model_class} ({'config only' if config_only else 'weights'}, tokenizer): {directory}")


def _register_subcommands() -> None:
    from bot.cli.audit import audit_command
    from bot.cli.bisect import bisect_command
    from bot.cli.generate import generate_command
    from bot.cli.help_examples import attach_examples
    from bot.cli.lint import lint_command
    from bot.cli.pr import pr_command
    from bot.cli.sweep import sweep_group
    from bot.cli.upstream import upstream_group
    from bot.cli.watch import pin_check_group, watch_command
    from bot.cli.workarounds import workarounds_group

    main.add_command(lint_command)
    main.add_command(audit_command)
    main.add_command(sweep_group)
    main.add_command(pr_command)
    main.add_command(workarounds_group)
    main.add_command(bisect_command)
    main.add_command(generate_command)
    main.add_command(watch_command)
    main.add_command(pin_check_group)
    main.add_command(upstream_group)
    attach_examples(main)


_register_subcommands()
