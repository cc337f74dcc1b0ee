"""What every exporter returns: the artifact, its metadata, and validation against eager."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.metadata
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from exporters.bundle.format import (
    DEFAULT_COMPONENT,
    MANIFEST_FILE,
    SUMMARY_FILE,
    ComponentSpec,
    DimRange,
    Manifest,
    TracedInt,
    exportbot_identity,
    publish,
    staged_directory,
    write_manifest,
    write_model_configs,
)
from exporters.flatten import leaves_with_path
from exporters.minimum_sizes import check_smaller_shape
from exporters.optional_inputs import eager_default, optional_arguments
from exporters.utils import HitLog, check_disabled_names
from exporters.validation import (
    MISMATCH,
    PASS,
    OutputCheck,
    ShapeCheck,
    ValidationReport,
    check_shape,
    leaf_name,
    named_tensors,
)

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
    if getattr(config, "quantize", None) is not None:  # a user's calibration batches are counted, not stored
        data["quantize"] = config.quantize.as_dict()
    return data


@dataclass
class ExportMetadata:
    """Everything a maintainer needs to reproduce or audit one export; goes into the bundle's ``export.json``."""

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


def _remove_stage(stage_seconds: dict[str, float], name: str) -> None:
    """Take ``name`` out of the books, and out of ``total``, before it is timed again."""
    seconds = stage_seconds.pop(name, None)
    if seconds is not None and "total" in stage_seconds:
        stage_seconds["total"] = round(stage_seconds["total"] - seconds, 4)


@dataclass
class ExportResult:
    """An exported artifact plus the means to check it against the eager model it came from.

    ``component`` describes the artifact for the bundle manifest (inputs, outputs, specs, named dims);
    ``save_artifact`` writes the artifact to the file path it is given (a bundle names it ``component.file``, a
    generation bundle after its component); ``run_artifact`` runs the in-memory artifact (kept
    for quick experiments and the benchmark baseline; validation never uses it, see ``validate``);
    ``second_inputs`` (dynamic exports only) holds inputs of another batch/sequence size; the exporter gives
    ``make_second_inputs`` and the inputs are made on first read (validation, ``save``), booked then as the
    ``second-shape inputs`` stage: an export nobody validates does not pay for them (~1 % of an export call).
    """

    artifact: Any
    metadata: ExportMetadata
    model: torch.nn.Module = field(repr=False)
    inputs: dict[str, Any] = field(repr=False)
    run_artifact: Callable[[Mapping[str, Any]], Iterable[Any]] = field(repr=False)
    save_artifact: Callable[[Path], Path] = field(repr=False)
    component: ComponentSpec = field(repr=False)
    atol: float = 1e-4
    rtol: float = 1e-4
    make_second_inputs: Callable[[], dict[str, Any] | None] | None = field(default=None, repr=False)
    program: Any = field(default=None, repr=False)  # the torch.export program the artifact came from
    # A quantized export (exporters.quantize.record.QuantizedExport): validation then compares the artifact with
    # its PyTorch reference within one output step (fidelity) and with ``model``, the float model (quality).
    quantization: Any = field(default=None, repr=False)
    validation: ValidationReport | None = None
    # Shapes below the program's proven range (``[(label, inputs)]``: batch 1, sequence 1), made on first read
    # like the second shape; validation decides each dim's minimum with them (exporters.minimum_sizes).
    make_smaller_inputs: Callable[[], list[tuple[str, dict[str, Any]]]] | None = field(default=None, repr=False)
    _second_inputs: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _smaller_inputs: list[tuple[str, dict[str, Any]]] = field(default_factory=list, init=False, repr=False)
    traced_dims: dict[str, DimRange] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # The program's own ranges: every validation starts from them, so validating twice records the same.
        self.traced_dims = copy.deepcopy(self.component.dims)

    def _made_once(self, maker: str, made: str) -> Any:
        """What the ``maker`` field makes, made on first read and kept in ``made``; the time goes to the
        ``second-shape inputs`` stage (an export nobody validates never pays it)."""
        make = getattr(self, maker)
        if make is not None:
            started = time.perf_counter()
            setattr(self, made, make())
            setattr(self, maker, None)
            _add_stage(self.metadata.stage_seconds, "second-shape inputs", time.perf_counter() - started)
        return getattr(self, made)

    @property
    def second_inputs(self) -> dict[str, Any] | None:
        """Inputs of another batch/sequence size, or None (a static program); made once, on first read."""
        return self._made_once("make_second_inputs", "_second_inputs")

    @second_inputs.setter
    def second_inputs(self, value: dict[str, Any] | None) -> None:
        self.make_second_inputs = None
        self._second_inputs = value

    @property
    def smaller_inputs(self) -> list[tuple[str, dict[str, Any]]]:
        """``[(label, inputs)]`` at sizes below the program's range; made once, on first read."""
        return self._made_once("make_smaller_inputs", "_smaller_inputs")

    @smaller_inputs.setter
    def smaller_inputs(self, value: list[tuple[str, dict[str, Any]]]) -> None:
        self.make_smaller_inputs = None
        self._smaller_inputs = value

    def check_smaller_shapes(self, module: torch.nn.Module, loaded: Any, report: ValidationReport) -> None:
        """Validate ``loaded`` (this export's component, loaded from the written files) at each smaller shape
        and record each dim's validated minimum in ``self.component`` (exporters.minimum_sizes). A quantized
        export is compared there with the same quantization in PyTorch, as at the validated shapes."""
        module, tolerance = self.reference_of(module)

        def run_check(label: str, inputs: dict[str, Any]) -> ShapeCheck:
            return _check_loaded(label, inputs, module, loaded, self.atol, self.rtol, tolerance=tolerance)

        self.component.dims = copy.deepcopy(self.traced_dims)  # each validation decides anew, from the program's
        component = getattr(loaded, "default", loaded)  # an ExportedModel's one component, or the component
        for label, inputs in self.smaller_inputs:
            check = check_smaller_shape(label, inputs, self.component, component.spec.dims,
                                        lambda kwargs: module(**kwargs), run_check)
            if check is not None:
                report.smaller_shapes.append(check)

    def validated_if(self, validate: bool) -> ExportResult:
        """Itself, validated first when ``validate`` (the ``export(..., validate=True)`` of every exporter)."""
        if validate:
            self.validate()
        return self

    def validate(self, raise_on_failure: bool = True) -> ValidationReport:
        """Write the bundle to a scratch directory, load it back from those files and compare with eager at
        the sample shape and, for dynamic exports, a second shape. ``save`` does the same where it ships."""
        with staged_directory(Path(tempfile.gettempdir()) / "exportbot-validation") as staging:
            report = self._write_and_validate(staging)
        if raise_on_failure:
            report.raise_for_status()
        return report

    def save(self, out_dir: Path, validate: bool = True) -> dict[str, Path]:
        """Write the bundle (docs/export-format.md) to ``out_dir``, validated from the written files.

        The bundle is written to a staging directory beside ``out_dir`` and renamed into place only when
        validation passed; on a failure (``ValidationError`` or any other) an existing ``out_dir`` is left as
        it was and nothing of the new export remains. ``validate=False`` ships it unvalidated, and the
        manifest says so.
        """
        out_dir = Path(out_dir)
        with staged_directory(out_dir) as staging:
            if validate:
                self._write_and_validate(staging).raise_for_status()
            else:
                self._write(staging)
            publish(staging, out_dir)
        return {
            "artifact": out_dir / self.component.file,
            "manifest": out_dir / MANIFEST_FILE,
            "summary": out_dir / SUMMARY_FILE,
        }

    def manifest(self) -> Manifest:
        """The manifest of this export (validation filled in once validated)."""
        meta = self.metadata
        self.component.validation = None if self.validation is None else self.validation.as_dict() | {
            "loaded_from": self.component.file}
        return Manifest(
            backend=meta.backend, model_class=meta.model_class, components={DEFAULT_COMPONENT: self.component},
            dynamic=meta.dynamic, exportbot=exportbot_identity(), config=meta.config, versions=meta.versions,
            workarounds_fired=meta.workarounds_fired, workarounds_disabled=meta.workarounds_disabled,
            stage_seconds=meta.stage_seconds, notes=meta.notes, options=meta.options,
            quantization=self.quantization_record(),
        )

    def quantization_record(self) -> dict[str, Any]:
        """The manifest's ``quantization`` section ({} for a float export)."""
        if self.quantization is None:
            return {}
        return self.quantization.as_dict(self.validation.max_abs_diff if self.validation is not None else None)

    def reference_of(self, module: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
        """What the loaded files are compared with, and within what: ``module`` within atol/rtol (None), or
        for a quantized export the same quantization in PyTorch within one quantization step of each output
        (exporters.quantize.fidelity)."""
        if self.quantization is None:
            return module, None
        return self.quantization.reference, self.quantization.tolerance(self.atol, self.rtol)

    def check_optional_inputs(self, loaded: Any, report: ValidationReport) -> None:
        """Find what eager fills for each optional argument the sample had (``token_type_ids``), validate the
        loaded bundle called without it against eager called without it, and record the fills that passed
        in ``self.component.optional`` (exporters.optional_inputs). A quantized export's reference (the same
        quantization in PyTorch) may be a traced program that takes every argument (PT2E's): it is given the
        fill, which gives eager's outputs without the argument."""
        self.component.optional = {}
        reference, tolerance = self.reference_of(self.model)
        component = loaded.default
        for name in optional_arguments(self.model, self.inputs):
            default = eager_default(self.model, self.inputs, name, self.atol, self.rtol)
            if default is None:
                continue
            without = {k: v for k, v in self.inputs.items() if k != name}
            expected, own_tolerance = reference, tolerance
            if self.quantization is not None:  # the reference, and its flip envelope, run with the fill
                filled = without | {name: torch.full_like(self.inputs[name], default.fill)}
                expected = functools.partial(reference, **filled)
                own_tolerance = functools.partial(_on_inputs, tolerance, filled)
            component.spec.optional[name] = default
            check = _check_loaded(f"sample shape without {name}", without, expected, loaded, self.atol, self.rtol,
                                  tolerance=own_tolerance)
            report.omitted_inputs.append(check)
            if check.status == PASS:
                self.component.optional[name] = default
            else:
                del component.spec.optional[name]

    def _write(self, directory: Path) -> Manifest:
        seconds = self.metadata.stage_seconds
        for stage in ("write bundle", "validation"):  # this write's timings, not the sum over earlier ones
            _remove_stage(seconds, stage)
        started = time.perf_counter()
        self.save_artifact(directory / self.component.file)
        manifest = self.manifest()
        manifest.files = write_model_configs(directory, self.model)
        write_manifest(directory, manifest)
        _add_stage(seconds, "write bundle", time.perf_counter() - started)
        return manifest

    def _write_and_validate(self, directory: Path) -> ValidationReport:
        """Write the bundle, load it in fresh runtime objects, compare with eager, record the result in it."""
        from exporters.bundle.loading import load

        self.validation = None
        written = self._write(directory)
        started = time.perf_counter()
        loaded = load(directory)
        cases = [("sample shape", self.inputs)]
        if self.second_inputs is not None:
            cases.append(("second shape", self.second_inputs))
        report = validate_loaded(cases, self.model, loaded, self.atol, self.rtol, self.quantization)
        self.check_smaller_shapes(self.model, loaded, report)
        self.check_optional_inputs(loaded, report)
        _add_stage(self.metadata.stage_seconds, "validation", time.perf_counter() - started)
        self.validation = report
        manifest = self.manifest()
        manifest.files = written.files
        write_manifest(directory, manifest)
        return report


def _on_inputs(tolerance: Any, inputs: dict[str, Any], name: str, expected: torch.Tensor, _given: Any) -> Any:
    """``tolerance`` of an output measured on ``inputs`` (the same dict each call: its envelope is measured once)
    rather than on the inputs the artifact was given."""
    return tolerance(name, expected, inputs)


def validate_loaded(cases: list[tuple[str, dict[str, Any]]], model: torch.nn.Module, loaded: Any, atol: float,
                    rtol: float, quantization: Any = None, quality_gates: bool = True) -> ValidationReport:
    """The loaded artifact against ``model`` at each ``(label, inputs)`` case. A quantized export
    (exporters.quantize.record.QuantizedExport) is compared with its PyTorch reference within one step of each
    output (fidelity), then with ``model``, the float model (quality, ``report.quality``; recorded without
    failing the export when not ``quality_gates``: a generation bundle's component)."""
    report = ValidationReport(atol, rtol)
    for label, inputs in cases:
        if quantization is None:
            report.shapes.append(_check_loaded(label, inputs, model, loaded, atol, rtol))
        else:
            report.shapes.append(_check_loaded(label, inputs, quantization.reference, loaded, atol, rtol,
                                               tolerance=quantization.tolerance(atol, rtol)))
    if quantization is not None:
        report.quality = quantization.check_quality(lambda kwargs: loaded(**kwargs), cases, model, quality_gates)
    return report


def _check_loaded(label: str, inputs: dict[str, Any], model: torch.nn.Module, loaded: Any, atol: float,
                  rtol: float, tolerance: Any = None) -> ShapeCheck:
    """``check_shape`` on the loaded bundle, plus a check that it returns eager's structure (same output
    class, same fields and cache layout), not just tensors in the same order. With ``tolerance`` (a quantized
    export's per-output one), eager is not run again in float64 on a mismatch: the miss is in quantization
    steps, which float32 rounding does not explain."""
    returned: dict[str, Any] = {}

    def run_eager(kwargs: Mapping[str, Any]) -> Any:
        # A copy per call: a model updates a cache passed in (decode steps) in place, and eager runs twice.
        returned["eager"] = model(**copy.deepcopy(dict(kwargs)))
        return returned["eager"]

    def run_loaded(kwargs: Mapping[str, Any]) -> list[Any]:
        returned["loaded"] = loaded(**kwargs)
        return [tensor for _, tensor in named_tensors(returned["loaded"])]

    def run_reference(kwargs: Mapping[str, Any]) -> Any:
        # Eager in float64, on a copy: made only when an output mismatches (a tiny model's copy is cheap).
        def widen(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(torch.float64) if tensor.is_floating_point() else tensor

        wider = copy.deepcopy(model).to(torch.float64)
        return wider(**pytree.tree_map_only(torch.Tensor, widen, copy.deepcopy(dict(kwargs))))

    check = check_shape(label, inputs, run_eager, run_loaded, atol, rtol,
                        run_reference if tolerance is None else None, tolerance)
    if "loaded" in returned:
        difference = structure_difference(pytree.tree_structure(returned["eager"]),
                                          pytree.tree_structure(returned["loaded"]))
        if difference:
            check.outputs.append(OutputCheck("output structure", MISMATCH, None, None, difference))
        else:
            check.outputs.extend(_constant_checks(returned["eager"], returned["loaded"]))
    return check


def _constant_checks(eager: Any, loaded: Any) -> list[OutputCheck]:
    """A mismatch for each non-tensor output leaf (a constant the manifest records) that differs from eager's:
    ``check_shape`` compares tensors only, and a wrong constant would otherwise pass unseen."""
    def constants(outputs: Any) -> list[tuple[str, Any]]:
        return [(leaf_name(path), leaf) for path, leaf in leaves_with_path(outputs) if not isinstance(leaf, torch.Tensor)]

    return [OutputCheck(name, MISMATCH, None, None, f"constant {mine!r} in the bundle, {theirs!r} in eager")
            for (name, theirs), (_, mine) in zip(constants(eager), constants(loaded)) if mine != theirs]


def _why(item: Any) -> str:
    """Why a traced constant of the bundle's output structure (``TracedInt``) differs from eager's."""
    value = item[1] if isinstance(item, tuple) and len(item) == 2 else None
    if not isinstance(value, TracedInt):
        return ""
    if value.expr is None:
        return (f" ({item[0]} is a constant of the output structure, traced at the sample shape; it depends on a "
                "size no input of the bundle carries, so the loader cannot recompute it: docs/export-format.md)")
    return f" ({item[0]} recomputed from the inputs as {value.expr})"


def structure_difference(eager: pytree.TreeSpec, loaded: pytree.TreeSpec, where: str = "output") -> str:
    """The first place where the loaded output's structure differs from eager's, or '' when it is the same:
    another class, other fields, or another constant attribute (a cache layer's length recorded at trace
    time is a constant of the saved output structure, so at another shape it can differ from eager's)."""
    if eager == loaded:
        return ""
    if eager.type is not loaded.type:
        return f"{where}: the bundle returns {getattr(loaded.type, '__name__', loaded.type)}, eager " \
               f"{getattr(eager.type, '__name__', eager.type)}"
    if eager.num_children != loaded.num_children:
        return f"{where}: {loaded.num_children} children in the bundle's {eager.type.__name__}, eager has {eager.num_children}"
    if eager.context != loaded.context:
        if isinstance(eager.context, list) and isinstance(loaded.context, list) and len(eager.context) == len(loaded.context):
            for mine, theirs in zip(loaded.context, eager.context):
                if mine != theirs:
                    return f"{where}: {eager.type.__name__} {mine!r} in the bundle, {theirs!r} in eager" + _why(mine)
        return f"{where}: {eager.type.__name__} context {loaded.context!r} in the bundle, {eager.context!r} in eager"
    for index, (mine, theirs) in enumerate(zip(eager.children(), loaded.children())):
        difference = structure_difference(mine, theirs, f"{where}.{index}")
        if difference:
            return difference
    return f"{where}: differs"
