"""Run one export end to end and describe the outcome as a record (``bot.outcome``).

``exportbot export`` and every sweep worker call ``export_one``; its ``ExportOutcome`` is the one shape
of result that the sweep writes, the audit reads and the coverage table shows.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.outcome import (
    BACKENDS,
    BUILD_ERROR,
    FAILED,
    INTERRUPTED,
    PASS,
    SKIPPED,
    ExportOutcome,
    ExportRequest,
)

if TYPE_CHECKING:  # imported where used: a sweep child must start before torch is imported
    from exporters.ledger import LedgerEntry
    from exporters.ledger.repro import Reproducer

def make_exporter(request: ExportRequest, optimize: bool, inputs: dict[str, Any] | None = None) -> Any:
    """The exporter object for ``request.backend`` configured from the request (and its options)."""
    common = {"dynamic": request.dynamic, "without": frozenset(request.without)}
    common |= request.options.exporter_settings(request.backend, request.dynamic, inputs or {})
    if request.backend == "dynamo":
        from exporters.dynamo.exporter import DynamoConfig, DynamoExporter

        return DynamoExporter(DynamoConfig(**common))
    if request.backend == "onnx":
        from exporters.onnx.exporter import OnnxConfig, OnnxExporter

        return OnnxExporter(OnnxConfig(optimize=optimize, ort_fusions=request.ort_fusions, **common))
    if request.backend == "executorch":
        from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

        return ExecutorchExporter(ExecutorchConfig(backend=request.et_backend, **common))
    raise ValueError(f"unknown backend {request.backend!r}; choose from {', '.join(BACKENDS)}")


def _class_name(request: ExportRequest) -> str:
    """The class the export builds (its ``--task`` head); the model argument itself when that cannot be told."""
    from exporters.export_options import resolve_class_name

    try:
        return resolve_class_name(request.model, request.options.task)
    except Exception:  # reported by the build below, with its stage
        return Path(request.model).name if Path(request.model).is_dir() else request.model


def export_one(request: ExportRequest, progress: Callable[[str], None] = lambda _step: None) -> ExportOutcome:
    """Build (or load) the model, apply the ledger, export, validate; never raises for a failed export.

    ``OptionError`` (an option the built model's inputs contradict, such as a ``--dynamic-dim`` name) is
    raised, not recorded: it is the caller's input, not the export, that failed. Every stage started is
    reported to ``progress`` (``exporters.stages``) and a failure names its stage. With ``out_dir``, the
    bundle is published there only when it validated; every failure, Ctrl-C included (recorded, then
    re-raised), leaves ``out_dir`` as it was and is recorded in ``<out_dir>.failed.json`` (``record_failure``).
    """
    from exporters.base import package_versions
    from exporters.ledger import default_registry_dir, load_ledger
    from exporters.stages import preload_executorch, stage_events

    if request.backend == "executorch":
        progress("importing executorch")
        preload_executorch()  # so that stage_events follows its lowering steps

    started = time.perf_counter()
    class_name = _class_name(request)
    dynamic = request.dynamic or bool(request.options.dynamic_dims)  # custom dynamic axes make it dynamic too
    outcome = ExportOutcome(class_name, request.backend, dynamic, FAILED, 0.0)
    outcome.versions = package_versions(request.backend)
    outcome.registry = str(default_registry_dir())
    outcome.workarounds_disabled = sorted(request.without)  # as asked; a finished export records its own
    ledger = load_ledger()
    repro_entry = ledger.by_id(request.repro) if request.repro is not None else None
    ignored = {"all"} if repro_entry is not None else set(request.ignore_ledger)
    outcome.repro = request.repro
    quantize = request.options.quantize.scheme if request.options.quantize is not None else None
    skip = ledger.skip(class_name, request.backend, dynamic, quantize=quantize)
    if skip is not None and not ({"all", skip.id} & ignored):
        outcome.status, outcome.ledger_entry, outcome.ledger_reason = SKIPPED, skip.id, skip.reason
        return outcome
    if skip is not None:
        outcome.workaround_off.append(skip.id)
    optimize = request.optimize
    if repro_entry is not None and optimize is None:
        optimize = repro_entry.repro.export.get("optimize") if repro_entry.repro else None
    if request.backend == "onnx" and optimize is None:
        entry = ledger.disable_optimize(class_name, dynamic)
        optimize = entry is None or bool({"all", entry.id} & ignored)
        if entry is not None and not optimize:
            outcome.ledger_entry, outcome.ledger_reason = entry.id, entry.reason
        elif entry is not None:
            outcome.workaround_off.append(entry.id)
    outcome.optimize = optimize if request.backend == "onnx" else None
    if skip is not None:
        outcome.ledger_entry, outcome.ledger_reason = skip.id, skip.reason
    with stage_events(progress) as stages:
        try:
            report = _build_export_validate(outcome, request, repro_entry, class_name, optimize, started, stages)
        except KeyboardInterrupt:  # recorded, then handed on: the CLI exits 130
            outcome.status, outcome.failed_stage = INTERRUPTED, stages.stopped_at
            outcome.seconds = round(time.perf_counter() - started, 3)
            record_failure(outcome, request.out_dir)
            raise
    outcome.seconds = round(time.perf_counter() - started, 3)
    if outcome.status != PASS and "failure" not in outcome.files:  # did not validate, so was not published
        record_failure(outcome, request.out_dir, {"validation": report.as_dict() if report is not None else None})
    return outcome


def _build_export_validate(
    outcome: ExportOutcome, request: ExportRequest, repro_entry: LedgerEntry | None, class_name: str,
    optimize: bool | None, started: float, stages: Any,
) -> Any:  # fmt: skip
    """The stages of ``export_one``, filling ``outcome``; the validation report (None when not validated or
    when a stage raised, which ``_failed`` has recorded)."""
    from exporters.export_options import WEIGHTS_LOADED, OptionError
    from exporters.ledger.repro import exporter_options
    from exporters.stages import quiet_native_noise
    from exporters.utils import HitLog, observing_hits

    try:
        with stages.stage("building model"):
            built = _build(request, repro_entry, class_name)
        outcome.repro_source = built.source
    except OptionError:
        raise
    except Exception as error:
        _failed(outcome, BUILD_ERROR, error, started, request, stages.failed)
        return None
    report = None
    fired = HitLog()  # what fired, kept when the export raises (its own log goes with its result)
    try:
        exporter = make_exporter(request, optimize=bool(optimize), inputs=built.inputs)
        exporter.config = dataclasses.replace(exporter.config, **exporter_options(built))
        with observing_hits(fired):
            result = exporter.export(built.model, built.inputs)
        if result.quantization is not None:  # the weights' origin is known here, not in the exporter
            result.quantization.random_weights = not built.source.startswith(WEIGHTS_LOADED)
        outcome.options = request.options.record(request.backend, request.et_backend, class_name, exporter.config)
        result.metadata.options = outcome.options
        result.metadata.notes.append(built.source)  # where the model came from (weights or random)
        outcome.workarounds_fired = result.metadata.workarounds_fired
        outcome.workarounds_disabled = result.metadata.workarounds_disabled
        outcome.dynamic_dims = {name: sorted(int(axis) for axis in dims)
                                for name, dims in result.metadata.dynamic_dims.items()}  # fmt: skip
        outcome.stage_seconds = result.metadata.stage_seconds
        outcome.versions = result.metadata.versions or outcome.versions
        if request.out_dir is not None:  # the bundle is validated from its written files, then published
            with stages.stage("validating" if request.validate else "writing files"), quiet_native_noise():
                report, outcome.files = save_bundle(result, request.out_dir, request.validate)
        elif request.validate:
            with stages.stage("validating"), quiet_native_noise():
                report = result.validate(raise_on_failure=False)
        outcome.quantization = result.quantization_record()
        if report is not None:
            outcome.status = report.status
            outcome.max_abs_diff = report.max_abs_diff
            outcome.unmoved_dims = unmoved_dims(outcome.dynamic_dims, report)
            if not report.passed:
                outcome.error = "; ".join(report.problems()[:5]) or "no output tensor to compare"
                outcome.failed_stage = "validating"
        else:
            outcome.status = PASS
    except OptionError:
        raise
    except Exception as error:
        outcome.workarounds_fired = outcome.workarounds_fired or dict(sorted(fired.counts.items()))
        _failed(outcome, FAILED, error, started, request, stages.failed)
        return None
    return report


def unmoved_dims(dynamic_dims: dict[str, list[int]], report: Any) -> dict[str, list[int]]:
    """The dynamic axes whose size is the same at the first two validated shapes ({} when there is no second).

    XcodecModel's samples axis stays symbolic, but its guards admit only the sample's 1,600 (its frame count
    is tied to 5), so the second shape moves the batch alone: the record must not read as "validated dynamic
    along the samples"."""
    if report is None or len(report.shapes) < 2:
        return {}
    first, second = report.shapes[0].input_shapes, report.shapes[1].input_shapes
    unmoved = {
        name: [axis for axis in axes if name in first and name in second and first[name][axis] == second[name][axis]]
        for name, axes in dynamic_dims.items()
    }
    return {name: axes for name, axes in unmoved.items() if axes}


def save_bundle(result: Any, out_dir: Path, validate: bool) -> tuple[Any, dict[str, str]]:
    """Write the bundle to ``out_dir``, validated from the written files first when ``validate``: the
    validation report and the files written (none when validation failed and ``out_dir`` was left as it was)."""
    from exporters.validation import ValidationError

    try:
        files = result.save(out_dir, validate=validate)
    except ValidationError:
        return result.validation, {}
    return result.validation, {kind: str(path) for kind, path in files.items()}


def _build(request: ExportRequest, repro_entry: LedgerEntry | None, class_name: str) -> Reproducer:
    """A ledger entry's reproducer as the entry gives it; anything else as the request's options shape it
    (task, sample shapes, dtype: ``exporters.export_options.build_model``)."""
    from exporters.export_options import build_model
    from exporters.ledger.repro import Reproducer, build_reproducer, builder_export_options

    if repro_entry is not None:
        return build_reproducer(repro_entry, class_name, request.seed)
    options = request.options
    built = build_model(request.model, options, request.seed, options.torch_dtype(request.backend, request.et_backend))
    source = "; ".join(built.notes) or "default tiny model"
    return Reproducer(None, built.class_name, built.model, built.inputs, builder_export_options(built.static_dims),
                      seed=request.seed, source=source)


def _failed(
    outcome: ExportOutcome, status: str, error: BaseException, started: float, request: ExportRequest,
    stage: str | None,
) -> ExportOutcome:  # fmt: skip
    """Record a raised failure: one-line cause, stage and hint in the outcome; the full text and traceback
    in the failure record beside ``out_dir``."""
    from bot.errors import hint_for, options_given
    from exporters.stages import interrupted_behind

    if interrupted_behind(error):  # export_one records it as interrupted; the CLI exits 130
        raise KeyboardInterrupt from error
    fill_raised(outcome, status, error, stage)
    given = options_given(outcome.dynamic, request.optimize, request.options.dtype)
    outcome.hint = hint_for(f"{error}\n{outcome.cause}", stage, request.backend, given, request.without)
    outcome.seconds = round(time.perf_counter() - started, 3)
    record_failure(outcome, request.out_dir,
                   {"error": str(error), "traceback": "".join(traceback.format_exception(error))})
    return outcome


def fill_raised(outcome: ExportOutcome, status: str, error: BaseException, stage: str | None,
                traceback_of: BaseException | None = None) -> None:
    """The fields every raised failure records, whatever export raised it: status, error type and text,
    the last frames of the traceback (of ``traceback_of``, default ``error``), the stage and the innermost
    cause. A wrapper exception (``GenerationExportError``) passes its cause as ``traceback_of``: its own last
    frames are the re-raise, not the failure."""
    from bot.errors import innermost_line

    outcome.status = status
    outcome.error_type = type(error).__name__
    outcome.error = str(error).strip()[:4000] or type(error).__name__
    tail = traceback.format_exception(traceback_of or error, chain=traceback_of is None)
    outcome.traceback_tail = "".join(tail[-3:])[-2000:]
    outcome.failed_stage = stage
    outcome.cause = innermost_line(error)


def record_failure(outcome: ExportOutcome, out_dir: Path | None, detail: dict[str, Any] | None = None) -> None:
    """The one place a failed export into ``out_dir`` is written down, whatever failed (the build, an
    export stage, validation, Ctrl-C): ``<out_dir>.failed.json`` (docs/export-format.md), the outcome plus
    ``detail`` (full error and traceback, or the validation report). ``out_dir`` itself is left as it was."""
    if out_dir is None:
        return
    from exporters.bundle.format import write_failure_record

    path = write_failure_record(out_dir, {**outcome.as_dict(), **(detail or {})})
    outcome.files = {"failure": str(path)}
