"""The ``exportbot`` command line.

Exit codes (every command): 0 success; 1 the job ran and found a problem (export failed or did not
validate, lint errors, ...); 2 bad input (unknown class, unreadable directory, invalid option), printed
as one line. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from bot.errors import EXIT_FAILED, UsageProblem, report_errors
from bot.runner import BACKENDS, PASS, SKIPPED, ExportRequest, export_one

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """exportbot: export transformers models to ONNX and ExecuTorch, and keep the workaround lists honest.

    \b
    Examples:
      exportbot export LlamaForCausalLM --backend onnx --dynamic --out out/llama
      exportbot export ./my-checkpoint --backend executorch
      exportbot list-workarounds --json
      exportbot lint
    """
    if not debug:
        quiet_library_logs()


def quiet_library_logs() -> None:
    """torch, torchao and onnxscript log warnings meant for their developers; users see ours."""
    import logging
    import warnings

    def silence() -> None:
        for name in ("torch", "torchao", "onnxscript", "onnx_ir", "transformers"):
            logging.getLogger(name).setLevel(logging.ERROR)

    silence()
    import torch  # noqa: F401 - torch configures its loggers on import: silence again after it

    silence()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _check_model_argument(model: str) -> None:
    path = Path(model)
    if path.exists():
        if not (path / "config.json").is_file():
            raise UsageProblem(f"{model}: not a checkpoint directory (no readable config.json)")
        return
    if "/" in model or model.startswith("."):
        raise UsageProblem(f"{model}: no such directory")
    from exporters.tiny import TinyModelError, model_class

    try:
        model_class(model)
    except TinyModelError as error:
        raise UsageProblem(str(error)) from None


@main.command("export")
@click.argument("model")
@click.option("--backend", type=click.Choice(BACKENDS), default="dynamo", show_default=True,
              help="dynamo writes model.pt2, onnx writes model.onnx, executorch writes model.pte.")
@click.option("--dynamic/--static", default=False, show_default=True,
              help="Export with symbolic batch and sequence dimensions (validated at a second shape).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the artifact and summary.json [default: out/<MODEL>-<backend>-<mode>].")
@click.option("--no-optimize", is_flag=True, help="ONNX: turn the onnxscript optimizer off.")
@click.option("--et-backend", type=click.Choice(["xnnpack", "cuda"]), default="xnnpack", show_default=True,
              help="ExecuTorch delegate.")
@click.option("--without", multiple=True, metavar="NAME",
              help="Leave this workaround out (repeatable); see `exportbot list-workarounds`.")
@click.option("--ignore-ledger", is_flag=True, help="Export even if the class is listed in EXPORT_SKIPS, "
              "and with the optimizer on even if listed in ONNX_DISABLE_OPTIMIZE.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the tiny random model.")
@click.option("--repro", "repro", default=None, metavar="ENTRY_ID",
              help="Export ledger entry ENTRY_ID's reproducer (registry/README.md) without the ledger: exactly "
              "what `exportbot audit` re-runs for it.")
@click.option("--outcome-json", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the outcome record (status, error, diffs, workarounds fired) as JSON here.")
@report_errors
def export_command(model: str, backend: str, dynamic: bool, out_dir: Path | None, no_optimize: bool,
                   et_backend: str, without: tuple[str, ...], ignore_ledger: bool, seed: int,
                   repro: str | None, outcome_json: Path | None) -> None:
    """Export MODEL (a transformers class name, built tiny and random, or a local checkpoint directory).

    Validates the artifact against the eager model (and at a second shape when --dynamic) and writes the
    artifact plus summary.json (validation diffs, timings, workarounds fired) to --out.
    """
    _check_model_argument(model)
    if repro is not None:
        from bot.repro_option import check_repro

        check_repro(repro, model, backend, dynamic)
    if without:
        from exporters import load_all_workarounds
        from exporters.utils import WorkaroundError, check_disabled_names

        load_all_workarounds()
        try:
            check_disabled_names(set(without))
        except WorkaroundError as error:
            raise UsageProblem(str(error)) from None
    mode = "dynamic" if dynamic else "static"
    out_dir = out_dir or Path("out") / f"{Path(model).name}-{backend}-{mode}"
    request = ExportRequest(model, backend, dynamic, optimize=False if no_optimize else None, et_backend=et_backend,
                            without=without, ignore_ledger=("all",) if ignore_ledger else (), seed=seed,
                            out_dir=out_dir, repro=repro)
    console = Console(stderr=True)
    with console.status(f"{model}: starting") as status:
        outcome = export_one(request, progress=lambda step: status.update(f"{model}: {step}"))
    if outcome_json is not None:
        outcome_json.write_text(json.dumps(outcome.as_dict(), indent=2) + "\n")
    if outcome.status == SKIPPED:
        click.echo(f"{model}: skipped by ledger entry {outcome.ledger_entry!r}: {outcome.ledger_reason}\n"
                   f"Use --ignore-ledger to try the export anyway.")
        sys.exit(EXIT_FAILED)
    _print_outcome(console, outcome)
    if outcome.status != PASS:
        sys.exit(EXIT_FAILED)


def _print_outcome(console: Console, outcome) -> None:
    table = Table(title=f"{outcome.model} → {outcome.backend} ({outcome.mode}): {outcome.status}")
    table.add_column("output")
    table.add_column("max abs diff", justify="right")
    for name, diff in outcome.max_abs_diff.items():
        table.add_row(name, f"{diff:.3g}")
    console.print(table)
    if outcome.ledger_entry:
        console.print(f"ledger entry applied: {outcome.ledger_entry} ({outcome.ledger_reason})")
    if outcome.workarounds_fired:
        console.print("workarounds fired: " + ", ".join(f"{k}×{v}" for k, v in outcome.workarounds_fired.items()))
    timing = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.stage_seconds.items())
    console.print(f"time: {outcome.seconds:.1f}s ({timing})")
    if outcome.error:
        console.print(f"[red]{outcome.error_type or outcome.status}[/red]: {outcome.error[:2000]}")
    for kind, path in outcome.files.items():
        console.print(f"{kind}: {path}")


@main.command("list-workarounds")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@report_errors
def list_workarounds_command(as_json: bool) -> None:
    """Every registered workaround: kind, backend, targets, upstream issue, dependency."""
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    workarounds = [w.as_dict() for w in all_workarounds()]
    if as_json:
        click.echo(json.dumps(workarounds, indent=2))
        return
    table = Table(title=f"{len(workarounds)} workarounds")
    for column in ("name", "kind", "backend", "targets", "upstream", "dependency"):
        table.add_column(column, overflow="fold")
    for w in workarounds:
        table.add_row(w["name"], w["kind"], w["backend"], "\n".join(w["targets"]), w["upstream"] or "—",
                      w["dependency"] or "—")
    Console().print(table)


def _register_subcommands() -> None:
    from bot.audit import audit_command
    from bot.bisect import bisect_command
    from bot.lint import lint_command
    from bot.shrink import pr_command
    from bot.sweep import sweep_group
    from bot.workaround_index import workarounds_group

    main.add_command(lint_command)
    main.add_command(audit_command)
    main.add_command(sweep_group)
    main.add_command(pr_command)
    main.add_command(workarounds_group)
    main.add_command(bisect_command)


_register_subcommands()
