"""The export directory format: the ``export.json`` manifest, its records, and writing a bundle atomically.

docs/export-format.md is the specification; this module is its only writer and reader. A bundle holds one
artifact file per component (single-graph exports: ``model``; generation exports add ``prefill``,
``decode``), the manifest, the model's ``config.json`` and its generation config. Bundles are written into
a staging directory beside their destination and renamed into place only once validated from the written
files (``staged_directory`` + ``publish``), so a destination is always either the old bundle or the new one.
An export that fails in any way is recorded in one file beside the destination, ``<out>.failed.json``
(``write_failure_record``), never inside it; publishing a bundle removes that record.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
FORMAT = "exportbot-bundle"
MANIFEST_FILE = "export.json"
SUMMARY_FILE = "summary.json"
DEFAULT_COMPONENT = "model"
FAILURE_SUFFIX = ".failed.json"  # <out>.failed.json: the record of the last export into <out> that failed

# The runtime each backend's artifact runs in (the ``runtime`` field of a component).
RUNTIMES = {"dynamo": "torch.export", "onnx": "onnxruntime", "executorch": "executorch"}


class TracedInt(int):
    """A constant of an output structure that ``torch.export`` traced as an expression of the input sizes.

    A cache layer keeps scalars beside its tensors (a sliding-window layer's ``cumulative_length``: the
    tokens seen so far). They are not outputs of the graph but constants of its output spec, so the export
    can only store the value they had at the sample shape. This int is that value (and equals it, so specs
    compare as before) and also carries ``expr``: the expression it was traced as, in the program's
    symbols while exporting and in the manifest's dim names once described (``"sequence"``), or None when
    it depends on a size no input carries. ``exporters.load`` evaluates ``expr`` at the caller's sizes
    when it rebuilds the outputs.
    """

    expr: str | None

    def __new__(cls, value: int, expr: str | None) -> TracedInt:
        traced = super().__new__(cls, value)
        traced.expr = expr
        return traced

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles keep the expression
        return (TracedInt, (int(self), self.expr))


class BundleError(ValueError):
    """A directory is not a bundle this version of exportbot can read."""


@dataclass
class DimRange:
    """The range of one named dim that the bundle accepts; ``max`` None means unbounded.

    ``min`` is the smallest size validated: the program's own lower bound, or a smaller size (1) that
    validation ran the written bundle at and found right (``exporters.minimum_sizes``). ``min_reason`` says
    why a smaller size is refused when validation found the bundle wrong there (torch.export's 0/1
    specialisation), and is quoted by the loader's refusal; None otherwise.
    """

    min: int | None
    max: int | None
    min_reason: str | None = None

    def contains(self, size: int) -> bool:
        return (self.min is None or size >= self.min) and (self.max is None or size <= self.max)

    def describe(self) -> str:
        return f"{self.min if self.min is not None else 0}..{self.max if self.max is not None else 'inf'}"

    def as_dict(self) -> dict[str, Any]:
        """The manifest's form: ``min_reason`` only when there is one."""
        data = asdict(self)
        if data["min_reason"] is None:
            del data["min_reason"]
        return data


@dataclass
class TensorSpec:
    """One input or output leaf of an artifact: its name, dtype and shape (ints static, names dynamic).

    ``values`` (integer inputs only) is ``[min, max]`` of the sample the export was validated with: ids in
    that range are valid for the model (a vocabulary, two token types), which is what a caller without the
    model's config, such as scripts/run_bundle_without_exportbot.py, needs to make inputs."""

    name: str
    dtype: str
    shape: list[int | str]
    values: list[int] | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["values"] is None:
            del data["values"]
        return data


@dataclass
class ConstantLeaf:
    """An output leaf that is a Python constant of the program (an int, float, bool, str or None), not an
    artifact output: ``index`` is its position among all the output leaves of ``out_spec``."""

    index: int
    name: str
    value: int | float | bool | str | None


@dataclass
class OptionalInput:
    """An argument a caller may leave out: the bundle then feeds ``fill`` in the shape of argument
    ``shape_of``, which is what eager does in its place (validated on the bundle: exporters.optional_inputs)."""

    fill: int | float | bool
    shape_of: str


@dataclass
class ComponentSpec:
    """One artifact file of a bundle and everything needed to call it and rebuild its outputs."""

    file: str
    runtime: str
    arguments: list[str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    in_spec: str
    out_spec: str
    pytree_types: list[str] = field(default_factory=list)
    dims: dict[str, DimRange] = field(default_factory=dict)
    method: str = "forward"
    validation: dict[str, Any] | None = None
    constants: list[ConstantLeaf] = field(default_factory=list)
    optional: dict[str, OptionalInput] = field(default_factory=dict)  # arguments filled when left out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ComponentSpec:
        data = _known(cls, data)
        data["optional"] = {name: OptionalInput(**_known(OptionalInput, o)) for name, o in data.get("optional", {}).items()}
        data["inputs"] = [TensorSpec(**_known(TensorSpec, t)) for t in data.get("inputs", [])]
        data["outputs"] = [TensorSpec(**_known(TensorSpec, t)) for t in data.get("outputs", [])]
        data["constants"] = [ConstantLeaf(**_known(ConstantLeaf, c)) for c in data.get("constants", [])]
        data["dims"] = {name: DimRange(**_known(DimRange, r)) for name, r in data.get("dims", {}).items()}
        return cls(**data)


@dataclass
class Manifest:
    """``export.json``: the one description of an export (``summary.json`` is derived from it)."""

    backend: str
    model_class: str
    components: dict[str, ComponentSpec]
    dynamic: bool = False
    exportbot: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    workarounds_fired: dict[str, int] = field(default_factory=dict)
    workarounds_disabled: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the export options used (task, dtype, shapes, bounds)
    files: dict[str, str | None] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)  # generation bundles: docs/generation.md
    format: str = FORMAT
    schema_version: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name, component in self.components.items():
            data["components"][name]["dims"] = {dim: r.as_dict() for dim, r in component.dims.items()}
            for kind in ("inputs", "outputs"):
                data["components"][name][kind] = [t.as_dict() for t in getattr(component, kind)]
        # format and version first: a reader sees what it is reading before anything else
        return {"format": data.pop("format"), "schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        if data.get("format") != FORMAT:
            raise BundleError(f"not an exportbot bundle manifest (format {data.get('format')!r})")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise BundleError(
                f"bundle schema version {data.get('schema_version')} is not the one this exportbot reads "
                f"({SCHEMA_VERSION}); re-export, or load it with the exportbot version that wrote it"
            )
        data = _known(cls, data)
        data["components"] = {name: ComponentSpec.from_dict(c) for name, c in data["components"].items()}
        return cls(**data)

    def overall_status(self) -> str:
        """``pass`` only when every component was validated and passed; else the first other status."""
        statuses = [(c.validation or {}).get("status", "not validated") for c in self.components.values()]
        return next((s for s in statuses if s != "pass"), "pass") if statuses else "not validated"


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that ``cls`` has fields for: readers ignore fields added later (same version)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def exportbot_identity() -> dict[str, Any]:
    """exportbot's version and, when run from a git checkout, its commit and whether the tree was dirty."""
    try:
        version = importlib.metadata.version("exportbot")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    root = Path(__file__).resolve().parents[2]
    identity: dict[str, Any] = {"version": version, "commit": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return identity
    identity.update(commit=commit, dirty=bool(status.strip()))
    return identity


# ── Reading and writing ──
def read_manifest(directory: Path | str) -> Manifest:
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise BundleError(f"{directory}: not an export bundle (no {MANIFEST_FILE})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise BundleError(f"{path}: not valid JSON ({error})") from None
    return Manifest.from_dict(data)


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    """Write ``export.json`` and the ``summary.json`` view derived from it."""
    manifest.validation = {"status": manifest.overall_status()}
    path = directory / MANIFEST_FILE
    path.write_text(json.dumps(manifest.as_dict(), indent=2, default=str) + "\n")
    (directory / SUMMARY_FILE).write_text(json.dumps(summary_of(manifest), indent=2, default=str) + "\n")
    return path


def summary_of(manifest: Manifest) -> dict[str, Any]:
    """The pre-bundle ``summary.json`` layout, computed from the manifest (never written independently)."""
    component = manifest.components.get(DEFAULT_COMPONENT) or next(iter(manifest.components.values()))
    metadata = {
        "backend": manifest.backend,
        "model_class": manifest.model_class,
        "input_names": component.arguments,
        "input_shapes": _sample_shapes(component),
        "output_names": [o.name for o in component.outputs],
        "dynamic": manifest.dynamic,
        "dims": {name: r.as_dict() for name, r in component.dims.items()},
        "dynamic_dims": {  # the pre-bundle layout: per input, per dim index, its name and range
            t.name: {str(i): {"symbol": d, **component.dims[d].as_dict()} for i, d in enumerate(t.shape)
                     if isinstance(d, str) and d in component.dims}
            for t in component.inputs if any(isinstance(d, str) and d in component.dims for d in t.shape)
        },
        "versions": manifest.versions,
        "config": manifest.config,
        "workarounds_fired": manifest.workarounds_fired,
        "workarounds_disabled": manifest.workarounds_disabled,
        "stage_seconds": manifest.stage_seconds,
        "notes": manifest.notes,
        "options": manifest.options,
    }
    summary: dict[str, Any] = {"derived_from": MANIFEST_FILE, "metadata": metadata, "artifact": component.file}
    if component.validation is not None:
        summary["validation"] = component.validation
    return summary


def _sample_shapes(component: ComponentSpec) -> dict[str, list[int | str]]:
    """The sample shapes as validation ran them; the manifest's shapes when it was not validated."""
    shapes = (component.validation or {}).get("shapes") or []
    return shapes[0]["input_shapes"] if shapes else {t.name: t.shape for t in component.inputs}


def write_model_configs(directory: Path, model: Any) -> dict[str, str | None]:
    """``config.json``, for a model that can generate ``generation_config.json``, and the tokenizer, processor
    or feature extractor of the checkpoint the model came from (exporters.bundle.preprocessors); returns the
    file names by kind."""
    from exporters.bundle.preprocessors import save_preprocessors

    files: dict[str, str | None] = {"config": None, "generation_config": None}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "save_pretrained"):
        config.save_pretrained(directory)
        files["config"] = "config.json"
    generation = getattr(model, "generation_config", None)
    can_generate = getattr(model, "can_generate", lambda: False)
    if generation is not None and can_generate():
        generation.save_pretrained(directory)
        files["generation_config"] = "generation_config.json"
    files.update(save_preprocessors(model, directory))
    return files


# ── Staging and publishing ──
def check_replaceable(destination: Path) -> None:
    """``destination`` may be replaced by a bundle: it does not exist, is an empty directory, or is a bundle.
    Publishing replaces the directory as a whole, so anything else in it (``--out .``) would be deleted."""
    destination = Path(destination)
    if not destination.exists():
        return
    if not destination.is_dir():
        raise BundleError(f"{destination}: exists and is not a directory")
    if any(destination.iterdir()) and not (destination / MANIFEST_FILE).is_file():
        raise BundleError(
            f"{destination}: not empty and not an export bundle (no {MANIFEST_FILE}); a bundle replaces its "
            "directory as a whole, so choose a new or empty directory, or an earlier bundle's"
        )


@contextlib.contextmanager
def staged_directory(destination: Path) -> Iterator[Path]:
    """A fresh directory beside ``destination`` (same file system, so ``publish`` is a rename); removed
    when the block raises or leaves it unpublished."""
    destination = Path(destination)
    check_replaceable(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.staging-", dir=destination.parent))
    # mkdtemp makes it private (0700) whatever the umask; published, it is a directory like any other.
    staging.chmod(0o777 & ~current_umask())
    try:
        yield staging
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back: the only portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish(staging: Path, destination: Path) -> Path:
    """Move a finished bundle into place. An existing destination is renamed aside first and removed only
    after the new bundle is in place, so at every moment ``destination`` is the old bundle or the new one.
    The record of an earlier failed export into ``destination`` goes: it no longer describes what is there."""
    from exporters.stages import raise_if_interrupted

    raise_if_interrupted()  # a Ctrl-C that landed where Python swallows exceptions: nothing is published
    destination = Path(destination)
    check_replaceable(destination)
    aside = None
    if destination.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{destination.name}.previous-", dir=destination.parent))
        os.rmdir(aside)
        os.rename(destination, aside)
    try:
        os.rename(staging, destination)
    except OSError:
        if aside is not None:
            os.rename(aside, destination)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    failure_record_path(destination).unlink(missing_ok=True)
    return destination


# ── Failure records ──
def failure_record_path(destination: Path) -> Path:
    """Where a failed export into ``destination`` is recorded: ``<destination>.failed.json``, beside it."""
    destination = Path(destination)
    return destination.with_name(destination.name + FAILURE_SUFFIX)


def write_failure_record(destination: Path, record: dict[str, Any]) -> Path:
    """Record a failed export into ``destination`` beside it (whole file: a temporary file renamed into
    place); ``destination`` itself, the previous bundle or nothing, is not touched."""
    path = failure_record_path(destination)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.partial-{os.getpid()}")
    temporary.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(temporary, path)
    return path
