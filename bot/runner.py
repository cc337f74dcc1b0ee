"""Run one export end to end and describe the outcome as a record.

``exportbot export`` and every sweep worker call ``export_one``; its ``ExportOutcome`` is the one shape
of result that the sweep writes, the audit reads and the coverage table shows.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporters.ledger import LedgerEntry
    from exporters.repro import Reproducer

BACKENDS = ("dynamo", "onnx", "executorch")

# Outcome statuses. Only PASS means the artifact was shown to match eager.
PASS = "pass"
FAILED = "failed"  # the export (or the run of the artifact) raised
MISMATCH = "mismatch"
INCONCLUSIVE = "inconclusive"
NONDETERMINISTIC = "nondeterministic"
SKIPPED = "skipped"  # gated by a ledger entry; never a pass
BUILD_ERROR = "build-error"  # the tiny model or its inputs could not be made


@dataclass
class ExportRequest:
    """What to export and how; ``model`` is a transformers class name or a local checkpoint directory."""

    model: str
    backend: str = "dynamo"
    dynamic: bool = False
    optimize: bool | None = None  # ONNX only; None = follow the ledger
    et_backend: str = "xnnpack"
    without: tuple[str, ...] = ()
    ignore_ledger: tuple[str, ...] = ()  # entry ids, or ("all",)
    repro: str | None = None  # a ledger entry id: export its reproducer, without the ledger (as the audit)
    validate: bool = True
    seed: int = 0
    out_dir: Path | None = None


@dataclass
class ExportOutcome:
    model: str
    backend: str
    dynamic: bool
    status: str
    seconds: float
    error: str | None = None
    error_type: str | None = None
    traceback_tail: str | None = None
    ledger_entry: str | None = None
    ledger_reason: str | None = None
    optimize: bool | None = None
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    workarounds_fired: dict[str, int] = field(default_factory=dict)
    workarounds_disabled: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # what this process ran with, failed or not
    files: dict[str, str] = field(default_factory=dict)
    repro: str | None = None  # the entry whose reproducer was exported
    repro_source: str | None = None  # "default tiny model", "tiny model with config, inputs", "script …"
    # Ledger entries that apply to this export and were left off: gate skipped, or optimizer on instead
    # of off. The audit's evidence that a pass really ran without the workaround.
    workaround_off: list[str] = field(default_factory=list)
    registry: str | None = None  # the ledger directory this process read

    @property
    def mode(self) -> str:
        return "dynamic" if self.dynamic else "static"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_exporter(request: ExportRequest, optimize: bool) -> Any:
    """The exporter object for ``request.backend`` configured from the request."""
    without = frozenset(request.without)
    if request.backend == "dynamo":
        from exporters.exporter_dynamo import DynamoConfig, DynamoExporter

        return DynamoExporter(DynamoConfig(dynamic=request.dynamic, without=without))
    if request.backend == "onnx":
        from exporters.exporter_onnx import OnnxConfig, OnnxExporter

        return OnnxExporter(OnnxConfig(dynamic=request.dynamic, optimize=optimize, without=without))
    if request.backend == "executorch":
        from exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

        return ExecutorchExporter(
            ExecutorchConfig(backend=request.et_backend, dynamic=request.dynamic, without=without)
        )
    raise ValueError(f"unknown backend {request.backend!r}; choose from {', '.join(BACKENDS)}")


def _class_name(model: str) -> str:
    path = Path(model)
    if path.is_dir():
        import json

        config = json.loads((path / "config.json").read_text())
        return (config.get("architectures") or [path.name])[0]
    return model


def export_one(request: ExportRequest, progress: Callable[[str], None] = lambda _step: None) -> ExportOutcome:
    """Build (or load) the model, apply the ledger, export, validate; never raises for a failed export."""
    from exporters.base import package_versions
    from exporters.ledger import default_registry_dir, load_ledger
    from exporters.repro import exporter_options

    started = time.perf_counter()
    class_name = _class_name(request.model)
    outcome = ExportOutcome(class_name, request.backend, request.dynamic, FAILED, 0.0)
    outcome.versions = package_versions(request.backend)
    outcome.registry = str(default_registry_dir())
    ledger = load_ledger()
    repro_entry = ledger.by_id(request.repro) if request.repro is not None else None
    ignored = {"all"} if repro_entry is not None else set(request.ignore_ledger)
    outcome.repro = request.repro
    skip = ledger.skip(class_name, request.backend, request.dynamic)
    if skip is not None and not ({"all", skip.id} & ignored):
        outcome.status, outcome.ledger_entry, outcome.ledger_reason = SKIPPED, skip.id, skip.reason
        return outcome
    if skip is not None:
        outcome.workaround_off.append(skip.id)
    optimize = request.optimize
    if repro_entry is not None and optimize is None:
        optimize = repro_entry.repro.export.get("optimize") if repro_entry.repro else None
    if request.backend == "onnx" and optimize is None:
        entry = ledger.disable_optimize(class_name, request.dynamic)
        optimize = entry is None or bool({"all", entry.id} & ignored)
        if entry is not None and not optimize:
            outcome.ledger_entry, outcome.ledger_reason = entry.id, entry.reason
        elif entry is not None:
            outcome.workaround_off.append(entry.id)
    outcome.optimize = optimize if request.backend == "onnx" else None
    if skip is not None:
        outcome.ledger_entry, outcome.ledger_reason = skip.id, skip.reason
    try:
        progress("building model")
        reproducer = _build(request, repro_entry, class_name)
        outcome.repro_source = reproducer.source
    except Exception as error:
        return _failed(outcome, BUILD_ERROR, error, started)
    try:
        progress(f"exporting with {request.backend}")
        exporter = make_exporter(request, optimize=bool(optimize))
        exporter.config = dataclasses.replace(exporter.config, **exporter_options(reproducer))
        result = exporter.export(reproducer.model, reproducer.inputs)
        outcome.workarounds_fired = result.metadata.workarounds_fired
        outcome.workarounds_disabled = result.metadata.workarounds_disabled
        outcome.stage_seconds = result.metadata.stage_seconds
        outcome.versions = result.metadata.versions or outcome.versions
        if request.validate:
            progress("validating against eager")
            report = result.validate(raise_on_failure=False)
            outcome.status = report.status
            outcome.max_abs_diff = report.max_abs_diff
            if not report.passed:
                outcome.error = "; ".join(report.problems()[:5]) or "no output tensor to compare"
        else:
            outcome.status = PASS
        if request.out_dir is not None:
            progress("writing files")
            outcome.files = {k: str(v) for k, v in result.save(request.out_dir).items()}
    except Exception as error:
        return _failed(outcome, FAILED, error, started)
    outcome.seconds = round(time.perf_counter() - started, 3)
    return outcome


def _build(request: ExportRequest, repro_entry: LedgerEntry | None, class_name: str) -> Reproducer:
    """A local checkpoint as it is; a class name as the entry's reproducer (or the default tiny model)."""
    from exporters.repro import Reproducer, build_reproducer
    from exporters.tiny import load_local

    path = Path(request.model)
    if path.is_dir() and repro_entry is None:
        tiny = load_local(path, request.seed)
        return Reproducer(None, class_name, tiny.model, tiny.inputs, seed=request.seed, source=str(path))
    return build_reproducer(repro_entry, class_name, request.seed)


def _failed(outcome: ExportOutcome, status: str, error: BaseException, started: float) -> ExportOutcome:
    outcome.status = status
    outcome.error_type = type(error).__name__
    outcome.error = str(error).strip()[:4000] or type(error).__name__
    outcome.traceback_tail = "".join(traceback.format_exception(error)[-3:])[-2000:]
    outcome.seconds = round(time.perf_counter() - started, 3)
    return outcome
