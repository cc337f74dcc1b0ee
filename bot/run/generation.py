"""Outcome records of generation exports: the audit's re-run of a ``generate`` entry and the sweep's
generation task (``sweep run --task text-generation``), both as ``ExportOutcome`` like any other export.

The audit's re-run of a ``generate``-scope ledger entry is a generation export, not a single-graph one.

A ``generate`` entry says a class's *generation* export fails (prefill + decode with a KV cache, or the
token-for-token check); a plain dynamic export of the same class may well pass, so it is no evidence that
the entry can go. The audit's re-run child is ``exportbot export CLASS --backend B --dynamic --repro ID``
(bot.run.reruns) for every entry; when entry ID has scope ``generate``, the export command hands it here, so
``exportbot export CLASS --repro ID`` by hand still runs exactly what the audit runs. This runs
``export_for_generation`` without the ledger (the entry's gate off, recorded in ``workaround_off``) on the
entry's reproducer (its ``config`` overrides and ``seed``), validates the written bundle (both components at
two shapes, ``generate()`` token for token against eager) and records it as an ``ExportOutcome``: the same
record, verdict rules and report as any other re-run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from bot.errors import EXIT_FAILED, UsageProblem
from bot.run.runner import BUILD_ERROR, FAILED, ExportOutcome
from exporters.ledger import LedgerEntry, LedgerError, load_ledger

GENERATE_SCOPE = "generate"


def generate_entry(entry_id: str) -> LedgerEntry | None:
    """The ledger entry ``entry_id`` if its scope is ``generate`` (any other entry, or none: None)."""
    try:
        entry = load_ledger().by_id(entry_id)
    except (KeyError, LedgerError):  # an unknown id or an invalid ledger: check_repro says it in one line
        return None
    return entry if entry.scope == GENERATE_SCOPE else None


def generation_outcome(model_class: str, backend: str, out_dir: Path, seed: int = 0,
                       overrides: dict[str, Any] | None = None, without: tuple[str, ...] = ()) -> ExportOutcome:
    """Export ``model_class`` for generation without the ledger, validated token for token; never raises for a
    failed export (the failure is the outcome: its cause, stage, traceback tail and reproducing command)."""
    from bot.cli.generate import NotForGeneration, export_generation
    from bot.run.runner import SKIPPED
    from exporters.base import package_versions
    from exporters.ledger import default_registry_dir
    from exporters.stages import stage_events

    outcome = ExportOutcome(model_class, backend, True, FAILED, 0.0, versions=package_versions(backend),
                            registry=str(default_registry_dir()))
    outcome.options = {"task": "generation", "seed": seed, "overrides": overrides or {}}
    outcome.repro_source = "generation export of the tiny model" + (" with config" if overrides else "")
    started = time.perf_counter()
    with stage_events() as stages:
        try:
            export = export_generation(model_class, backend, out_dir, seed=seed, overrides=overrides,
                                       ignore_ledger=True, without=without, stages=stages)
        except NotForGeneration as error:  # no KV cache to carry: not a failed export, skipped with the reason
            outcome.status, outcome.error_type = SKIPPED, type(error).__name__
            outcome.error = str(error).strip()[:4000]
            outcome.cause = (outcome.error.splitlines() or [""])[0]
            outcome.seconds = round(time.perf_counter() - started, 3)
            return outcome
        except Exception as error:  # the export failed: that is the result, with its cause and traceback
            record_raised_generation(outcome, error, stages.failed, out_dir)
            outcome.seconds = round(time.perf_counter() - started, 3)
            return outcome
    outcome.status = export.status
    outcome.workarounds_disabled = sorted({w for r in export.results.values()
                                           for w in r.metadata.workarounds_disabled})
    outcome.workarounds_fired = {w: c for r in export.results.values()
                                 for w, c in r.metadata.workarounds_fired.items()}
    outcome.stage_seconds = {f"{name}: {stage}": s for name, r in export.results.items()
                             for stage, s in r.metadata.stage_seconds.items()}
    if export.check is not None:
        outcome.max_abs_diff = {"logits": export.check.max_logits_diff or 0.0}
    if export.status != "pass":  # validated and found wanting: where, and how to see it again
        outcome.error = "; ".join(export.problems()[:5]) or export.status
        outcome.failed_stage = "validating"
        outcome.hint = f"reproduce: {reproduce_command(model_class, backend)}"
    elif out_dir.is_dir():
        outcome.files = {"bundle": str(out_dir)}
    outcome.seconds = round(time.perf_counter() - started, 3)
    return outcome


def record_raised_generation(outcome: ExportOutcome, error: Exception, stage: str | None, out_dir: Path) -> None:
    """A generation export that raised, recorded as a static export's failure is (bot.run.runner): error, the
    traceback's last frames (of the cause a ``GenerationExportError`` wraps), the stage (``prefill:
    torch.export``), the innermost cause, a hint with the command that reproduces it, and ``<out>.failed.json``
    beside ``out_dir`` with the full traceback (docs/export-format.md)."""
    import traceback

    from bot.errors import innermost
    from bot.run.runner import fill_raised, record_failure

    component = getattr(error, "component", None)  # GenerationExportError: which component failed
    if isinstance(error, UsageProblem):
        stage = stage or "building model"
    elif component is not None:
        stage = f"{component}: {stage}" if stage and stage != "exporting components" else component
    fill_raised(outcome, BUILD_ERROR if isinstance(error, UsageProblem) else FAILED, error, stage,
                traceback_of=innermost(error) if component is not None else None)
    outcome.hint = f"reproduce: {reproduce_command(outcome.model, outcome.backend)}"
    record_failure(outcome, out_dir, {"error": str(error), "traceback": "".join(traceback.format_exception(error))})


def reproduce_command(model_class: str, backend: str) -> str:
    """The ``exportbot export`` line that runs this generation export again, with the traceback.

    The task is the one whose auto mapping lists the class (bot.sweep.catalogue.GENERATION_MAPPINGS), as the
    sweep chose it, since ``export --task`` refuses a task of the other kind (a config's
    ``is_encoder_decoder`` does not tell: ProphetNetForCausalLM's config class says True); text-generation
    for a class no mapping lists."""
    from bot.sweep.catalogue import GENERATION_MAPPINGS, generation_classes

    task = next((task for task in GENERATION_MAPPINGS if model_class in generation_classes(task)), "text-generation")
    return f"exportbot export {model_class} --task {task} --backend {backend} --debug"


def rerun_generation(entry: LedgerEntry, model_class: str, backend: str, out_dir: Path,
                     seed: int = 0, without: tuple[str, ...] = ()) -> ExportOutcome:
    """Export ``model_class`` for generation as entry ``entry`` reproduces it, with the entry's gate off (and
    the workarounds ``without`` names: the audit's supersession probes)."""
    if model_class not in entry.models:
        raise UsageProblem(f"--repro {entry.id}: {model_class} is not one of its models ({', '.join(entry.models)})")
    if backend != entry.backend:
        raise UsageProblem(f"--repro {entry.id}: a {entry.backend} entry; pass --backend {entry.backend}")
    repro = entry.repro
    if repro is not None and (repro.script is not None or repro.inputs or repro.export):
        raise UsageProblem(f"--repro {entry.id}: a generate entry's reproducer takes config and seed only "
                           "(prompts and export settings are the generation export's: docs/generation.md)")
    overrides = dict(repro.config) if repro is not None else {}
    if repro is not None and repro.seed is not None:
        seed = repro.seed
    outcome = generation_outcome(model_class, backend, out_dir, seed, overrides, without)
    outcome.repro = entry.id
    outcome.repro_source = "generation export of the tiny model" + (" with config" if overrides else "")
    outcome.workaround_off.append(entry.id)  # the gate was off: the export ran without the ledger
    return outcome


def sweep_generation_outcome(model_class: str, backend: str, ignore_ledger: list[str]) -> ExportOutcome:
    """The sweep's generation task (``sweep run --task text-generation``): the class's generation export, into
    a scratch bundle, unless a ledger entry gates it (``skipped``, as the sweep records any gated export)."""
    import tempfile

    from bot.run.runner import SKIPPED

    entry = load_ledger().skip(model_class, backend, dynamic=True, generate=True)
    if entry is not None and not {"all", entry.id} & set(ignore_ledger):
        outcome = ExportOutcome(model_class, backend, True, SKIPPED, 0.0, ledger_entry=entry.id,
                                ledger_reason=entry.reason)
        outcome.options = {"task": "generation"}
        return outcome
    seed, overrides, tries = lively_build(model_class)
    with tempfile.TemporaryDirectory(prefix="exportbot-sweep-generation-") as scratch:
        outcome = generation_outcome(model_class, backend, Path(scratch) / "bundle", seed, overrides)
    outcome.options["tries"] = tries
    if outcome.status == "inconclusive" and tries and all(t.get("degenerate") for t in tries):
        outcome.error = f"{outcome.error} [all {len(tries)} tries degenerate in eager: seeds and overrides in options.tries]"
    outcome.files = {}  # the scratch bundle is gone
    if entry is not None:
        outcome.workaround_off.append(entry.id)
    return outcome


def lively_build(model_class: str) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The sweep's build of ``model_class`` for its generation task: the first of the tiny builder's tries
    (exporters.tiny.generation.ATTEMPTS) whose eager greedy path is not one token forever, and every try."""
    from bot.cli.generate import build_generation_model
    from exporters.tiny.generation import lively_attempt

    def build(seed: int, overrides: dict[str, Any]) -> Any:
        return build_generation_model(model_class, seed, overrides=overrides)[0]

    seed, overrides, tries = lively_attempt(build)
    if tries and "error" in tries[0]:  # no build or no KV cache: the export reports that itself
        return seed, overrides, []
    return seed, overrides, tries


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
