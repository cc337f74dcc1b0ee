"""Generation bundles, exported and described: the model built, its components exported and validated, and
the outcome as an ``ExportOutcome`` like any other export.

``export_generation`` builds the model (a class name built tiny and random, or a local checkpoint), exports
its ``prefill`` and ``decode`` components (exporters.generation.export), validates the written bundle token
for token against eager, and publishes it; ``rebuild_source`` rebuilds the model a bundle came from (the
``source`` its manifest records) for ``exportbot generate``'s comparison.

The audit's re-run of a ``generate``-scope ledger entry is a generation export, not a single-graph one. A
``generate`` entry says a class's *generation* export fails (prefill + decode with a KV cache, or the
token-for-token check); a plain dynamic export of the same class may well pass, so it is no evidence that
the entry can go. The audit's re-run child is ``exportbot export CLASS --backend B --dynamic --repro ID``
(bot.run.reruns) for every entry; when entry ID has scope ``generate``, the export command hands it here, so
``exportbot export CLASS --repro ID`` by hand still runs exactly what the audit runs. This runs
``export_for_generation`` without the ledger (the entry's gate off, recorded in ``workaround_off``) on the
entry's reproducer (its ``config`` overrides and ``seed``), validates the written bundle (both components at
two shapes, ``generate()`` token for token against eager) and records it as an ``ExportOutcome``: the same
record, verdict rules and report as any other re-run. The sweep's generation task (``sweep run --task
text-generation``) records its exports the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.errors import UsageProblem
from bot.outcome import BUILD_ERROR, FAILED, INTERRUPTED, SKIPPED, ExportOutcome
from bot.run.runner import record_failure
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
                       overrides: dict[str, Any] | None = None, without: tuple[str, ...] = (),
                       quantize: str | None = None) -> ExportOutcome:
    """Export ``model_class`` for generation without the ledger, validated token for token; never raises for a
    failed export (the failure is the outcome: its cause, stage, traceback tail and reproducing command)."""
    from exporters.ledger import default_registry_dir
    from exporters.quantize.schemes import QuantizeConfig

    outcome = new_generation_outcome(model_class, backend)
    outcome.registry = str(default_registry_dir())
    config = QuantizeConfig(quantize) if quantize is not None else None
    outcome.options = {"task": "generation", "seed": seed, "overrides": overrides or {},
                       "quantize": None if config is None else config.as_dict()}
    outcome.repro_source = "generation export of the tiny model" + (" with config" if overrides else "")
    recorded_generation(outcome, out_dir, seed=seed, overrides=overrides, ignore_ledger=True, without=without,
                        quantize=config)
    return outcome


def new_generation_outcome(model: str, backend: str) -> ExportOutcome:
    """The record a generation export of ``model`` fills (failed until it passes)."""
    from exporters.base import package_versions

    return ExportOutcome(model, backend, True, FAILED, 0.0, versions=package_versions(backend))


def recorded_generation(outcome: ExportOutcome, out_dir: Path, progress: Callable[[str], None] = lambda _stage: None,
                        usage_raises: bool = False, **export_options: Any) -> Any:
    """``export_generation`` of ``outcome.model`` into ``out_dir``, its result filled into ``outcome``, and every
    failure recorded beside ``out_dir`` in ``<out>.failed.json`` (docs/export-format.md): one that raised (with
    its traceback), one that did not validate (with the verdict), Ctrl-C (recorded, then re-raised).

    Returns the export, or None when it raised. ``progress`` hears every stage as it starts. A model with no
    KV cache to carry is ``skipped`` with the reason, and other bad input a ``build-error``, unless
    ``usage_raises`` (the CLI: exit 2, nothing recorded, as for any bad input), which also lets ``LedgerSkip``
    through."""
    from exporters.stages import interrupted_behind, preload_executorch, stage_events

    if outcome.backend == "executorch":
        preload_executorch()  # so that the stages follow its lowering steps
    started = time.perf_counter()
    with stage_events(progress) as stages:
        try:
            export = export_generation(outcome.model, outcome.backend, out_dir, stages=stages, **export_options)
        except (UsageProblem, LedgerSkip) as error:
            if usage_raises:
                raise
            if not isinstance(error, NotForGeneration):
                record_raised_generation(outcome, error, stages.failed, out_dir)
            else:  # no KV cache to carry: not a failed export, skipped with the reason
                outcome.status, outcome.error_type = SKIPPED, type(error).__name__
                outcome.error = str(error).strip()[:4000]
                outcome.cause = (outcome.error.splitlines() or [""])[0]
            return None
        except (KeyboardInterrupt, Exception) as error:
            if not interrupted_behind(error):  # the export failed: that is the result, with its cause and traceback
                record_raised_generation(outcome, error, stages.failed, out_dir)
                return None
            outcome.status, outcome.failed_stage = INTERRUPTED, stages.stopped_at  # a Ctrl-C, maybe wrapped by torch
            record_failure(outcome, out_dir)
            raise KeyboardInterrupt from error
        finally:
            outcome.seconds = round(time.perf_counter() - started, 3)
    outcome.status = export.status
    outcome.workarounds_disabled = sorted({w for r in export.results.values()
                                           for w in r.metadata.workarounds_disabled})
    outcome.workarounds_fired = {w: c for r in export.results.values()
                                 for w, c in r.metadata.workarounds_fired.items()}
    outcome.stage_seconds = {f"{name}: {stage}": s for name, r in export.results.items()
                             for stage, s in r.metadata.stage_seconds.items()}
    if export.check is not None:
        outcome.max_abs_diff = {"logits": export.check.max_logits_diff or 0.0}
    outcome.quantization = export.quantization_record()
    if export.status != "pass":  # validated and found wanting: where, and how to see it again
        outcome.error = "; ".join(export.problems()[:5]) or export.status
        outcome.failed_stage = "validating"
        outcome.hint = f"reproduce: {reproduce_command(outcome.model, outcome.backend)}"
        record_failure(outcome, out_dir, {"validation": {name: r.validation.as_dict() for name, r in
                                                         export.results.items() if r.validation is not None},
                                          "generation": export.check.as_dict() if export.check else None})
    elif out_dir.is_dir():
        outcome.files = {"bundle": str(out_dir)}
    return export


def record_raised_generation(outcome: ExportOutcome, error: Exception, stage: str | None, out_dir: Path) -> None:
    """A generation export that raised, recorded as a static export's failure is (bot.run.runner): error, the
    traceback's last frames (of the cause a ``GenerationExportError`` wraps), the stage (``prefill:
    torch.export``), the innermost cause, a hint with the command that reproduces it, and ``<out>.failed.json``
    beside ``out_dir`` with the full traceback (docs/export-format.md)."""
    import traceback

    from bot.errors import innermost
    from bot.run.runner import fill_raised

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


def sweep_generation_outcome(model_class: str, backend: str, ignore_ledger: list[str],
                             quantize: str | None = None) -> ExportOutcome:
    """The sweep's generation task (``sweep run --task text-generation``): the class's generation export, into
    a scratch bundle, unless a ledger entry gates it (``skipped``, as the sweep records any gated export);
    quantized with ``quantize`` (a scheme name) when given."""
    import tempfile

    entry = load_ledger().skip(model_class, backend, dynamic=True, generate=True, quantize=quantize)
    if entry is not None and not {"all", entry.id} & set(ignore_ledger):
        outcome = ExportOutcome(model_class, backend, True, SKIPPED, 0.0, ledger_entry=entry.id,
                                ledger_reason=entry.reason)
        outcome.options = {"task": "generation"}
        return outcome
    seed, overrides, tries = lively_build(model_class)
    with tempfile.TemporaryDirectory(prefix="exportbot-sweep-generation-") as scratch:
        outcome = generation_outcome(model_class, backend, Path(scratch) / "bundle", seed, overrides,
                                     quantize=quantize)
    outcome.options["tries"] = tries
    if outcome.status == "inconclusive" and tries and all(t.get("degenerate") for t in tries):
        outcome.error = f"{outcome.error} [all {len(tries)} tries degenerate in eager: seeds and overrides in options.tries]"
    outcome.files = {}  # the scratch bundle is gone
    if entry is not None:
        outcome.workaround_off.append(entry.id)
    return outcome


def tiny_build(model: str, seed: int, overrides: dict[str, Any] | None, init_scale: float | None,
               try_builds: bool) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]]]:
    """The seed and config overrides a generation export of ``model`` builds with, and the builds tried for
    them: ``init_scale`` applied to a tiny model's initialisation, or the sweep's tries (``try_builds``)."""
    if Path(model).is_dir():
        if init_scale is not None:
            raise UsageProblem(f"--init-scale scales a tiny model built from a class name; {model} is a checkpoint")
        return seed, overrides, []
    if init_scale is not None:
        from exporters.tiny import model_class
        from exporters.tiny.initialisation import init_scale_overrides
        from exporters.tiny.shrink import default_config

        return seed, {**(overrides or {}), **init_scale_overrides(default_config(model_class(model)), init_scale)}, []
    if try_builds:
        return lively_build(model)
    return seed, overrides, []


def lively_build(model_class: str) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The sweep's build of ``model_class`` for its generation task: the first of the tiny builder's tries
    (exporters.tiny.generation.ATTEMPTS) whose eager greedy path is not one token forever, and every try."""
    from exporters.tiny.generation import lively_attempt

    def build(seed: int, overrides: dict[str, Any]) -> Any:
        return build_generation_model(model_class, seed, overrides=overrides)[0]

    seed, overrides, tries = lively_attempt(build)
    if tries and "error" in tries[0]:  # no build or no KV cache: the export reports that itself
        return seed, overrides, []
    return seed, overrides, tries


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
    from exporters.export_options import OptionError, has_weights, load_checkpoint
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
            # The path is provenance only: a bundle never needs it (rebuild_source); weights say whether the
            # bundle's own config.json and the seed rebuild the model.
            source = {"checkpoint": str(path.resolve()), "weights": has_weights(path), "seed": seed, "task": task}
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


def rebuild_source(source: dict[str, Any], bundle: Path) -> tuple[Any, str | None]:
    """The eager model a bundle's ``generation.source`` names, or None and why it cannot be had.

    Nothing outside the bundle is needed where the bundle determines the model: a tiny class (its name, seed
    and overrides), or a checkpoint without weights (random from a config under a seed: the bundle's own
    ``config.json``). A checkpoint's weights are not in the bundle (only the artifacts computed from them), so
    comparing with it needs the checkpoint where it was (``checkpoint``, recorded as provenance)."""
    if "tiny" in source:
        model, _ = build_generation_model(source["tiny"], source.get("seed", 0), overrides=source.get("overrides"))
        return model, None
    if "checkpoint" in source:
        origin = Path(source["checkpoint"])
        if source.get("weights") is False:
            model, _ = build_generation_model(str(bundle), source.get("seed", 0), source.get("task"))
            return model, None
        if origin.is_dir():
            model, _ = build_generation_model(str(origin), source.get("seed", 0), source.get("task"))
            return model, None
        return None, f"the weights of {origin}, which the bundle was exported from, are not there any more"
    return None, "the bundle records no source model"


def make_generation_exporter(backend: str, et_backend: str = "xnnpack", optimize: bool = True,
                             without: tuple[str, ...] = (), quantize: Any = None, ort_fusions: bool = False) -> Any:
    """The exporter of a generation bundle's components; ``quantize`` (a ``QuantizeConfig``) quantizes each alike."""
    if quantize is not None and backend == "dynamo":
        raise UsageProblem(f"--quantize {quantize.scheme}: quantized exports need --backend executorch or onnx")
    if backend == "onnx":
        from exporters.onnx.exporter import OnnxConfig, OnnxExporter

        return OnnxExporter(OnnxConfig(optimize=optimize, ort_fusions=ort_fusions, without=frozenset(without),
                                       quantize=quantize))
    if backend == "executorch":
        from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

        return ExecutorchExporter(ExecutorchConfig(backend=et_backend, without=frozenset(without), quantize=quantize))
    from exporters.dynamo.exporter import DynamoConfig, DynamoExporter

    return DynamoExporter(DynamoConfig(without=frozenset(without)))


def export_generation(model: str, backend: str, out_dir: Path, task: str | None = None, seed: int = 0,
                      max_cache_len: int | None = None, batch_size: int = 2, prompt_length: int = 8, new_tokens: int = 16,
                      et_backend: str = "xnnpack", optimize: bool = True, without: tuple[str, ...] = (),
                      overrides: dict[str, Any] | None = None, ignore_ledger: bool = False,
                      stages: Any = None, init_scale: float | None = None, try_builds: bool = False,
                      quantize: Any = None, ort_fusions: bool = False, cache: str = "dynamic") -> Any:
    """Export, validate from the written files, publish: the ``export --task <generation task>`` path.

    Raises ``LedgerSkip`` when an EXPORT_SKIPS entry gates this class's generation export on ``backend``
    (scopes ``all``, ``dynamic``, ``generate``, and ``quantize`` for its scheme), unless ``ignore_ledger``.
    ``quantize`` (a ``QuantizeConfig``) quantizes every component alike (docs/quantization.md). ``stages`` (an
    ``exporters.stages.StageTracker``) is told the steps of our own, so a failure record names the one that
    raised (``building model``, ``exporting components``, ``validating``) where no torch stage did.
    A tiny model (a class name) is built with ``init_scale`` when given; else, with ``try_builds``, as the
    sweep builds it: the first of the tiny builder's tries whose eager greedy path is not one token forever
    (``lively_build``), every try recorded in the bundle's ``generation.source.tries``. ``cache``: ``dynamic``
    or ``in-place`` (exporters.generation.inplace; what it does not serve is a ``UsageProblem``).
    """
    from exporters.generation.components import GenerationExportConfig, sample_prompts
    from exporters.generation.export import check_quantize_for_generation, export_for_generation
    from exporters.generation.inplace import InPlaceUnsupported
    from exporters.generation.support import GenerationUnsupported
    from exporters.quantize.schemes import QuantizeError
    from exporters.validation import ValidationError

    def stage(name: str) -> Any:
        return stages.stage(name) if stages is not None else contextlib.nullcontext()

    def check_fits(limit: int) -> None:  # bad input: said before any export work
        if prompt_length + new_tokens > limit:
            raise UsageProblem(f"--sequence-length {prompt_length} + {new_tokens} new tokens exceed max_cache_len "
                               f"{limit}")

    if max_cache_len is not None:
        check_fits(max_cache_len)
    config = GenerationExportConfig(max_cache_len=max_cache_len, cache=cache)
    try:  # before any work: a scheme this backend or a generation bundle cannot take is one line, exit 2
        exporter = make_generation_exporter(backend, et_backend, optimize, without, quantize, ort_fusions)
        check_quantize_for_generation(exporter)
    except QuantizeError as error:
        raise UsageProblem(str(error)) from None
    with stage("building model"):
        seed, overrides, tries = tiny_build(model, seed, overrides, init_scale, try_builds)
        built, source = build_generation_model(model, seed, task, overrides)
        check_fits(config.cache_len(built))  # the default: the model's context, at most DEFAULT_MAX_CACHE_LEN
        if tries:
            source["tries"] = tries
        inputs = sample_prompts(built, batch=batch_size, prompt_length=prompt_length, seed=seed)
    if not ignore_ledger:
        from exporters.ledger import load_ledger

        entry = load_ledger().skip(type(built).__name__, backend, dynamic=True, generate=True,
                                   quantize=quantize.scheme if quantize is not None else None)
        if entry is not None:
            raise LedgerSkip(entry)
    announce = (lambda name: stages.report(f"exporting {name}")) if stages is not None else None
    with stage("exporting components"):
        try:
            export = export_for_generation(exporter, built, inputs, config,
                                           new_tokens=new_tokens, on_component=announce)
        except GenerationUnsupported as error:  # found at the first eager prefill (no cache returned)
            raise NotForGeneration(str(error)) from None
        except InPlaceUnsupported as error:  # refused before any tracing: bad input, exit 2
            raise UsageProblem(str(error)) from None
    export.layout["source"] = source
    if quantize is not None:  # the weights' origin is known here, not in the exporter
        random = not source.get("weights", False)  # a tiny model, or a checkpoint without weights
        for result in export.results.values():
            result.quantization.random_weights = random
    with stage("validating"), contextlib.suppress(ValidationError):  # reported from export.status / problems
        export.save(out_dir)
    return export
