"""What every exporter returns: the artifact, its metadata, and validation against eager."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from exporters.utils import HitLog, check_disabled_names
from exporters.validation import ValidationReport, check_shape

# Packages whose versions define an export's environment, per backend.
BACKEND_PACKAGES: dict[str, tuple[str, ...]] = {
    "dynamo": ("torch", "transformers"),
    "onnx": ("torch", "transformers", "onnx", "onnxscript", "onnxruntime"),
    "executorch": ("torch", "transformers", "executorch", "torchao"),
}


def package_versions(backend: str) -> dict[str, str]:
    versions = {}
    for package in BACKEND_PACKAGES[backend]:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def config_as_dict(config: Any) -> dict[str, Any]:
    """An exporter config as JSON-ready data: ``without`` sorted, a custom ``dynamic_shapes`` spec as text."""
    data = asdict(config)
    data["without"] = sorted(config.without)
    data["dynamic_shapes"] = None if config.dynamic_shapes is None else repr(config.dynamic_shapes)
    return data


@dataclass
class ExportMetadata:
    """Everything a maintainer needs to reproduce or audit one export; written as ``summary.json``."""

    backend: str
    model_class: str
    input_names: list[str]
    input_shapes: dict[str, list[int]]
    output_names: list[str]
    dynamic: bool
    dynamic_dims: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    workarounds_fired: dict[str, int] = field(default_factory=dict)
    workarounds_disabled: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # task, dtype, shapes, bounds (ExportOptions.record)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class StageClock:
    """Times the named stages of one export; ``with clock("torch.export"): ...``."""

    def __init__(self, into: dict[str, float]):
        self.into = into

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.into[name] = round(self.into.get(name, 0.0) + time.perf_counter() - start, 4)


@dataclass
class ExportRun:
    """What every exporter's ``export()`` keeps while its stages run: which workarounds fired, stage timings.

    ``finish()`` closes the books: ``total`` is the whole export call so far and ``other`` what no named
    stage covers, so the named parts plus ``other`` add up to ``total`` (nothing an export spends is hidden).
    """

    hits: HitLog
    stage_seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @property
    def clock(self) -> StageClock:
        return StageClock(self.stage_seconds)

    def finish(self) -> dict[str, float]:
        total = time.perf_counter() - self.started
        self.stage_seconds.pop("total", None)
        self.stage_seconds.pop("other", None)
        named = sum(self.stage_seconds.values())
        self.stage_seconds["other"] = round(max(total - named, 0.0), 4)
        self.stage_seconds["total"] = round(max(total, named), 4)
        return self.stage_seconds


def start_export(model: torch.nn.Module, without: frozenset[str]) -> ExportRun:
    """The common first steps of an export: the workaround names to leave out are checked before any work
    (a typo must not cost a lowering), and the model goes to eval mode (dropout off, as deployed)."""
    check_disabled_names(without)
    model.eval()
    return ExportRun(HitLog(disabled=without))


def _add_stage(stage_seconds: dict[str, float], name: str, seconds: float) -> None:
    """Book ``seconds`` under ``name`` and in ``total`` (validation runs after the export's books closed)."""
    stage_seconds[name] = round(stage_seconds.get(name, 0.0) + seconds, 4)
    if "total" in stage_seconds:
        stage_seconds["total"] = round(stage_seconds["total"] + seconds, 4)


@dataclass
class ExportResult:
    """An exported artifact plus the means to check it against the eager model it came from.

    ``run_artifact`` maps an input dict to the artifact's flat list of output tensors;
    ``second_inputs`` (dynamic exports only) holds inputs of another batch/sequence size.
    """

    artifact: Any
    metadata: ExportMetadata
    model: torch.nn.Module = field(repr=False)
    inputs: dict[str, Any] = field(repr=False)
    run_artifact: Callable[[Mapping[str, Any]], Iterable[Any]] = field(repr=False)
    save_artifact: Callable[[Path], Path] = field(repr=False)
    atol: float = 1e-4
    rtol: float = 1e-4
    second_inputs: dict[str, Any] | None = field(default=None, repr=False)
    validation: ValidationReport | None = None

    def validated_if(self, validate: bool) -> ExportResult:
        """Itself, validated first when ``validate`` (the ``export(..., validate=True)`` of every exporter)."""
        if validate:
            self.validate()
        return self

    def validate(self, raise_on_failure: bool = True) -> ValidationReport:
        """Compare the artifact with eager at the sample shape and, for dynamic exports, a second shape."""
        started = time.perf_counter()
        report = ValidationReport(self.atol, self.rtol)
        cases = [("sample shape", self.inputs)]
        if self.second_inputs is not None:
            cases.append(("second shape", self.second_inputs))
        for label, inputs in cases:
            report.shapes.append(
                check_shape(label, inputs, lambda kw: self.model(**kw), self.run_artifact, self.atol, self.rtol)
            )
        self.validation = report
        _add_stage(self.metadata.stage_seconds, "validation", time.perf_counter() - started)
        if raise_on_failure:
            report.raise_for_status()
        return report

    def save(self, out_dir: Path) -> dict[str, Path]:
        """Write the artifact and ``summary.json`` (metadata and validation) into ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        artifact_path = self.save_artifact(out_dir)
        summary_path = out_dir / "summary.json"
        summary = {"metadata": self.metadata.as_dict(), "artifact": artifact_path.name}
        if self.validation is not None:
            summary["validation"] = self.validation.as_dict()
        summary_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return {"artifact": artifact_path, "summary": summary_path}
