"""What to export and how: task (which head), sample shapes, dynamic bounds and axes, opset, dtype, tolerances.

One record, ``ExportOptions``, carries every choice ``exportbot export`` offers, for every backend. It is
checked before any work (``check``: a bad combination is a ``OptionError``, exit code 2 in the CLI), turned
into exporter-config fields (``exporter_settings``) and written into the export's metadata (``record``), so
an artifact says which head, shapes, dtype and tolerances it was made and validated with.

Tolerances by dtype (eager and artifact run in the same dtype, so the difference is rounding order, a few
units in the last place of the format, relative to the output's magnitude):

* float32: the backend's own (Dynamo 1e-4/1e-4, ONNX Runtime and ExecuTorch 1e-4/1e-3);
* float16: atol 1e-2, rtol 1e-2 (10 bits of mantissa, eps 9.8e-4: about ten ulps);
* bfloat16: atol 5e-2, rtol 5e-2 (7 bits of mantissa, eps 7.8e-3: about six ulps).

``--atol`` / ``--rtol`` replace either one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from exporters.tiny import BATCH, SEQUENCE

# Task → the transformers auto classes that pick its head, tried in order.
TASKS: dict[str, tuple[str, ...]] = {
    "feature-extraction": ("AutoModel",),
    "text-classification": ("AutoModelForSequenceClassification",),
    "token-classification": ("AutoModelForTokenClassification",),
    "question-answering": ("AutoModelForQuestionAnswering",),
    "fill-mask": ("AutoModelForMaskedLM",),
    "multiple-choice": ("AutoModelForMultipleChoice",),
    "text-generation": ("AutoModelForCausalLM",),
    "text2text-generation": ("AutoModelForSeq2SeqLM",),
    "image-classification": ("AutoModelForImageClassification",),
    "object-detection": ("AutoModelForObjectDetection",),
    "semantic-segmentation": ("AutoModelForSemanticSegmentation",),
    "automatic-speech-recognition": ("AutoModelForSpeechSeq2Seq", "AutoModelForCTC"),
    "audio-classification": ("AutoModelForAudioClassification",),
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_TOLERANCES = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}  # (atol, rtol); float32: the backend's
# The dtype each ExecuTorch backend lowers in (its ``prepare_for_<backend>`` casts the model to it).
EXECUTORCH_DTYPES = {"xnnpack": "float32", "cuda": "bfloat16"}
OPSETS = range(18, 24)  # torch.onnx (dynamo) starts at 18; onnxscript's torchlib has opsets up to 23

# Inputs whose axis 1 is a token sequence (what --sequence-length and --max-sequence size).
SEQUENCE_INPUTS = frozenset({
    "input_ids", "attention_mask", "token_type_ids", "position_ids", "bbox",
    "decoder_input_ids", "decoder_attention_mask",
})


class OptionError(ValueError):
    """An option, or a combination of options, that cannot work: refused before any export work."""


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``choices``, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    if not close:
        close = [c for c in choices if c.lower() == word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class DynamicDim:
    """``NAME:AXIS[:MIN:MAX]``: make axis ``AXIS`` of input ``NAME`` dynamic, within [MIN, MAX] when given."""

    name: str
    axis: int
    min: int | None = None
    max: int | None = None

    @classmethod
    def parse(cls, text: str) -> DynamicDim:
        parts = text.split(":")
        try:
            if len(parts) == 2:
                return cls(parts[0], int(parts[1]))
            if len(parts) == 4:
                low, high = (int(p) if p else None for p in parts[2:])
                dim = cls(parts[0], int(parts[1]), low, high)
                if low is not None and high is not None and low > high:
                    raise OptionError(f"--dynamic-dim {text}: MIN {low} is above MAX {high}")
                return dim
        except ValueError as error:
            if isinstance(error, OptionError):
                raise
        raise OptionError(f"--dynamic-dim {text}: expected NAME:AXIS or NAME:AXIS:MIN:MAX with integer AXIS/MIN/MAX")

    def __str__(self) -> str:
        bounds = "" if self.min is None and self.max is None else f":{self.min or ''}:{self.max or ''}"
        return f"{self.name}:{self.axis}{bounds}"


@dataclass
class ExportOptions:
    """Everything about an export besides the model and the backend; ``None`` means "the default"."""

    task: str | None = None
    batch_size: int = BATCH
    sequence_length: int = SEQUENCE
    image_size: int | None = None
    max_batch: int | None = None
    max_sequence: int | None = None
    opset: int | None = None
    dtype: str | None = None
    atol: float | None = None
    rtol: float | None = None
    dynamic_dims: tuple[DynamicDim, ...] = ()
    pretrained: bool = False
    init_scale: float | None = None  # a tiny model's initialisation scales multiplied by it

    # ── Checks, before any work ──
    def check(self, backend: str, dynamic: bool, et_backend: str = "xnnpack") -> None:
        """Raise ``OptionError`` for a value or combination that cannot work with ``backend``."""
        if self.task is not None and self.task not in TASKS:
            raise OptionError(f"unknown task {self.task!r}{did_you_mean(self.task, TASKS)}; choose from {', '.join(TASKS)}")
        for name in ("batch_size", "sequence_length", "image_size", "max_batch", "max_sequence"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OptionError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.opset is not None:
            if backend != "onnx":
                raise OptionError(f"--opset is an ONNX option; --backend is {backend}")
            if self.opset not in OPSETS:
                raise OptionError(f"--opset {self.opset}: the ONNX exporter writes opsets {OPSETS[0]} to {OPSETS[-1]}")
        if self.dtype is not None:
            if self.dtype not in DTYPES:
                raise OptionError(f"unknown dtype {self.dtype!r}{did_you_mean(self.dtype, DTYPES)}; choose from {', '.join(DTYPES)}")
            lowers_in = EXECUTORCH_DTYPES.get(et_backend)
            if backend == "executorch" and lowers_in and self.dtype != lowers_in:
                raise OptionError(f"ExecuTorch {et_backend} lowers in {lowers_in}; --dtype {self.dtype} needs another "
                                  "backend (--backend onnx or dynamo)")
        for name in ("atol", "rtol", "init_scale"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise OptionError(f"--{name} must be positive, got {value}")
        bounded = self.max_batch is not None or self.max_sequence is not None
        if bounded and not dynamic:
            raise OptionError("--max-batch/--max-sequence bound dynamic dims: add --dynamic")
        max_batch, max_sequence = self.max_batch, self.max_sequence
        if backend == "executorch" and dynamic:  # ExecuTorch always bounds its dynamic dims
            from exporters.executorch.exporter import DEFAULT_MAX_BATCH, DEFAULT_MAX_SEQUENCE

            max_batch, max_sequence = max_batch or DEFAULT_MAX_BATCH, max_sequence or DEFAULT_MAX_SEQUENCE
        if max_batch is not None and max_batch < self.batch_size:
            raise OptionError(f"--max-batch {max_batch} is below the sample --batch-size {self.batch_size}")
        if max_sequence is not None and max_sequence < self.sequence_length:
            raise OptionError(
                f"--max-sequence {max_sequence} is below the sample --sequence-length {self.sequence_length}")
        if self.max_sequence is not None and backend == "executorch" and self.max_sequence < 2:
            raise OptionError("--max-sequence must be at least 2 for ExecuTorch")
        for dim in self.dynamic_dims:
            if backend == "executorch" and dim.max is None:
                raise OptionError(f"--dynamic-dim {dim}: ExecuTorch needs an upper bound, e.g. {dim.name}:{dim.axis}:1:64")
            if dim.axis < 0:
                raise OptionError(f"--dynamic-dim {dim}: AXIS must be 0 or more")

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """``--dynamic-dim`` names and axes against the sample inputs (known once the model is built)."""
        tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        for dim in self.dynamic_dims:
            if dim.name not in tensors:
                raise OptionError(f"--dynamic-dim {dim}: no input {dim.name!r}{did_you_mean(dim.name, tensors)}; "
                                  f"inputs: {', '.join(tensors)}")
            if dim.axis >= tensors[dim.name].dim():
                raise OptionError(f"--dynamic-dim {dim}: {dim.name} has {tensors[dim.name].dim()} axes")

    # ── Into exporter configs ──
    def torch_dtype(self, backend: str, et_backend: str = "xnnpack") -> torch.dtype:
        return DTYPES[self.resolved_dtype(backend, et_backend)]

    def resolved_dtype(self, backend: str, et_backend: str = "xnnpack") -> str:
        if self.dtype is not None:
            return self.dtype
        return EXECUTORCH_DTYPES.get(et_backend, "float32") if backend == "executorch" else "float32"

    def exporter_settings(self, backend: str, dynamic: bool, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for the backend's config class (``DynamoConfig``, ``OnnxConfig``, ...)."""
        settings: dict[str, Any] = {}
        tolerances = DTYPE_TOLERANCES.get(self.dtype or "float32")
        if tolerances is not None:
            settings["atol"], settings["rtol"] = tolerances
        if self.atol is not None:
            settings["atol"] = self.atol
        if self.rtol is not None:
            settings["rtol"] = self.rtol
        if self.opset is not None:
            settings["opset_version"] = self.opset
        if backend == "executorch":
            for name in ("max_batch", "max_sequence"):
                if getattr(self, name) is not None:
                    settings[name] = getattr(self, name)
        spec = self.dynamic_shapes(backend, dynamic, inputs)
        if spec is not None:
            settings["dynamic_shapes"] = spec
            if backend != "executorch":
                settings["dynamic"] = True  # dynamo/onnx validate at a second shape only when dynamic
        return settings

    def dynamic_shapes(self, backend: str, dynamic: bool, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """A ``dynamic_shapes`` spec when bounds or custom axes were asked for, else None (the exporter's default).

        Custom axes use ``Dim.DYNAMIC``: torch.export fails instead of silently making them static, and the
        error names the inputs that share the axis. Bounds on the default dims use ``Dim.AUTO`` as the
        exporters' defaults do.
        """
        from torch.export import Dim

        bounded = self.max_batch is not None or self.max_sequence is not None
        if not self.dynamic_dims and (not bounded or backend == "executorch"):
            return None
        self.check_inputs(inputs)
        spec: dict[str, Any] = {}
        for name, value in inputs.items():
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                spec[name] = None
                continue
            dims: dict[int, Any] = {}
            if dynamic and backend == "executorch":
                from exporters.executorch.exporter import (
                    DEFAULT_MAX_BATCH,
                    DEFAULT_MAX_SEQUENCE,
                    bounded_dynamic_shapes,
                )

                dims = bounded_dynamic_shapes({name: value}, self.max_batch or DEFAULT_MAX_BATCH,
                                              self.max_sequence or DEFAULT_MAX_SEQUENCE)[name]
            elif dynamic:
                dims = dict.fromkeys(range(value.dim()), Dim.AUTO)
                if self.max_batch is not None:
                    dims[0] = Dim.AUTO(max=self.max_batch)
                if self.max_sequence is not None and name in SEQUENCE_INPUTS and value.dim() > 1:
                    dims[1] = Dim.AUTO(max=self.max_sequence)
            for dim in self.dynamic_dims:
                if dim.name == name:
                    dims[dim.axis] = Dim.DYNAMIC(min=dim.min if dim.min is not None else 1, max=dim.max)
            spec[name] = dims or None
        return spec

    def init_scale_overrides(self, class_name: str) -> dict[str, float] | None:
        """The tiny config's overrides for ``init_scale`` (None without it)."""
        if self.init_scale is None:
            return None
        from exporters.tiny import model_class
        from exporters.tiny.initialisation import init_scale_overrides
        from exporters.tiny.shrink import default_config

        return init_scale_overrides(default_config(model_class(class_name)), self.init_scale)

    # ── Into the model and its inputs ──
    def cast(self, model: torch.nn.Module, inputs: dict[str, Any], dtype: torch.dtype) -> tuple[torch.nn.Module, dict]:
        """Model and floating inputs in ``dtype`` (integer inputs, token ids and masks, keep theirs)."""
        if dtype == torch.float32 and all(p.dtype == torch.float32 for p in model.parameters()):
            return model, inputs
        model = model.to(dtype)
        return model, {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                       for k, v in inputs.items()}

    def resized_images(self, inputs: dict[str, Any], seed: int) -> dict[str, Any]:
        """``pixel_values`` of ``image_size`` x ``image_size`` (checkpoints: their config keeps its own size)."""
        pixels = inputs.get("pixel_values")
        if self.image_size is None or not isinstance(pixels, torch.Tensor) or pixels.dim() != 4:
            return inputs
        generator = torch.Generator().manual_seed(seed)
        shape = (*pixels.shape[:2], self.image_size, self.image_size)
        return inputs | {"pixel_values": torch.randn(shape, generator=generator, dtype=pixels.dtype)}

    # ── Into the manifest ──
    def record(self, backend: str, et_backend: str, class_name: str, exporter_config: Any) -> dict[str, Any]:
        """What the export was made with, resolved (the task and dtype actually used, the tolerances applied)."""
        data = dataclasses.asdict(self)
        data["dynamic_dims"] = [str(d) for d in self.dynamic_dims]
        data["task"] = self.task or task_of(class_name)
        data["dtype"] = self.resolved_dtype(backend, et_backend)
        data["model_class"] = class_name
        data["atol"] = getattr(exporter_config, "atol", self.atol)
        data["rtol"] = getattr(exporter_config, "rtol", self.rtol)
        if backend == "onnx":
            data["opset"] = getattr(exporter_config, "opset_version", self.opset)
        if getattr(exporter_config, "static_dims", None):  # the builder's, kept static in a dynamic export
            data["static_dims"] = {name: list(axes) for name, axes in exporter_config.static_dims.items()}
        return data


# ── Task → model class ──
def _auto_mapping(auto_name: str) -> Any:
    import transformers

    return getattr(transformers, auto_name)._model_mapping


def class_for_task(config_class: type, task: str) -> str:
    """The model class name of ``task`` for a config class (``BertConfig`` + fill-mask → ``BertForMaskedLM``)."""
    for auto_name in TASKS[task]:
        try:
            return _auto_mapping(auto_name)[config_class].__name__
        except KeyError:
            continue
    offered = tasks_for(config_class)
    raise OptionError(f"{config_class.__name__} has no {task} model; its tasks: {', '.join(offered) or 'none'}")


def tasks_for(config_class: type) -> list[str]:
    return [task for task, autos in TASKS.items() if any(config_class in _auto_mapping(a) for a in autos)]


def task_of(class_name: str) -> str | None:
    """The first task whose auto class maps to ``class_name`` (what a class or ``architectures`` implies).

    Reads the auto mappings' class names, so no modeling module is imported."""
    for task, autos in TASKS.items():
        for auto_name in autos:
            for names in _auto_mapping(auto_name)._model_mapping.values():
                if class_name in ((names,) if isinstance(names, str) else tuple(names)):
                    return task
    return None


def class_from_config(config: Any, task: str | None, where: str) -> str:
    """The class to build for a loaded config: ``task``'s head, else ``architectures[0]``."""
    if task is not None:
        return class_for_task(type(config), task)
    architectures = getattr(config, "architectures", None) or []
    if architectures:
        return architectures[0]
    offered = tasks_for(type(config))
    raise OptionError(f"{where}: config.json names no architecture; choose a head with --task "
                      f"({', '.join(offered) or ', '.join(TASKS)})")


def resolve_class_name(model: str, task: str | None) -> str:
    """The transformers class an export of ``model`` (class name, checkpoint dir or hub id) builds."""
    from exporters import hub
    from exporters.tiny import model_class

    path = Path(model)
    if path.is_dir():
        config_data = json.loads((path / "config.json").read_text())
        if task is None and config_data.get("architectures"):
            return config_data["architectures"][0]
        import transformers

        return class_from_config(transformers.AutoConfig.from_pretrained(path, local_files_only=True), task, model)
    if hub.is_hub_id(model):
        return class_from_config(hub.load_config(model), task, model)
    cls = model_class(model)
    return class_for_task(cls.config_class, task) if task is not None else model


@dataclass
class BuiltModel:
    """The eager model, its sample inputs, and the class it is (after the task chose the head)."""

    model: torch.nn.Module
    inputs: dict[str, Any]
    class_name: str
    notes: list[str] = field(default_factory=list)
    static_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)  # exporters.tiny.TinyModel's


def build_model(model: str, options: ExportOptions, seed: int, dtype: torch.dtype) -> BuiltModel:
    """A class name built tiny and random; a checkpoint directory or hub id loaded through ``from_pretrained``.

    Checkpoint weights are loaded when the directory has them (and, for a hub id, with ``--pretrained``);
    otherwise the model is random-initialised from its config under ``seed``.
    """
    from exporters import hub
    from exporters.tiny import build_tiny, sample_inputs

    class_name = resolve_class_name(model, options.task)
    notes: list[str] = []
    static_dims: dict[str, tuple[int, ...]] = {}
    path = Path(model)
    if not path.is_dir() and not hub.is_hub_id(model):
        tiny = build_tiny(class_name, seed, batch=options.batch_size, sequence=options.sequence_length,
                          image_size=options.image_size, overrides=options.init_scale_overrides(class_name))
        built, inputs, static_dims = tiny.model, tiny.inputs, tiny.static_dims
        if options.init_scale is not None:
            notes.append(f"initialisation scaled by {options.init_scale:g}")
    else:
        if options.init_scale is not None:
            raise OptionError(f"--init-scale scales a tiny model built from a class name; {model} is a checkpoint")
        built, note = load_checkpoint(model, class_name, seed, pretrained=options.pretrained)
        notes.append(note)
        inputs = sample_inputs(built, batch=options.batch_size, sequence=options.sequence_length, seed=seed)
        inputs = options.resized_images(inputs, seed)
    built, inputs = options.cast(built, inputs, dtype)
    return BuiltModel(built, inputs, class_name, notes, static_dims)


def load_checkpoint(model: str, class_name: str, seed: int, pretrained: bool = False) -> tuple[torch.nn.Module, str]:
    """A checkpoint directory or hub id built as ``class_name`` (``resolve_class_name``: its ``--task`` head), in
    eval mode, and a note saying where its weights came from: the directory's own when it has them (a hub id's
    with ``pretrained``), else random from its config under ``seed``, the same on every call."""
    import transformers

    from exporters import hub
    from exporters.tiny import model_class

    path = Path(model)
    local = path.is_dir()
    source: str | Path = path if local else model
    cls = model_class(class_name)
    config = transformers.AutoConfig.from_pretrained(source, local_files_only=local or hub.local_only())
    if (local and has_weights(path)) or (not local and pretrained):
        return cls.from_pretrained(source, local_files_only=local or hub.local_only()).eval(), f"weights loaded from {model}"
    torch.manual_seed(seed)
    note = f"random weights (seed {seed}) from {model}'s config" + ("" if local else "; --pretrained loads its weights")
    return cls(config).eval(), note


def has_weights(directory: Path) -> bool:
    """Whether a checkpoint directory holds weights (else a model is random-initialised from its config)."""
    return any(directory.glob("*.safetensors")) or any(directory.glob("pytorch_model*.bin"))
