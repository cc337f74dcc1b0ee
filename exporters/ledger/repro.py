"""Build a ledger entry's reproducer: the model, inputs and export options its failure shows with.

Why: the audit decides whether a workaround is still needed by exporting without it. A class's default
tiny model is often not the case that fails (the bug needs a config field the default leaves off, another
image size, an opset), so a re-run of the default would "pass" while the bug is still there. An entry's
``[entry.repro]`` table (``exporters.ledger.Repro``, schema in registry/README.md) says what to change;
without one, the default tiny model is the reproducer, as before.

``exportbot export CLASS --repro ENTRY_ID``, ``exportbot audit`` (whose re-runs pass that same flag) and
``exportbot lint`` (which runs every reproducer once in eager) all build it here, so they run one thing.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from exporters.ledger import LedgerEntry, Repro
from exporters.padding import padded_mask

__all__ = ["ReproError", "Reproducer", "build_reproducer", "exporter_options", "run_eager"]

SCRIPT_FUNCTION = "build"  # registry/repro/<id>.py defines build(model_class, seed) -> (model, inputs)
# Export options that are fields of an exporter's config under another name.
_CONFIG_FIELD = {"et_backend": "backend"}


class ReproError(ValueError):
    """The reproducer cannot be built: one line naming the entry and the problem."""


@dataclass
class Reproducer:
    """What a re-run of one entry exports: model, inputs, exporter options, and where they came from."""

    entry_id: str | None
    model_class: str
    model: torch.nn.Module
    inputs: dict[str, Any]
    export: dict[str, Any] = field(default_factory=dict)  # export options without ``dynamic``
    seed: int = 0
    source: str = "default tiny model"


def build_reproducer(entry: LedgerEntry | None, model_class: str, seed: int = 0) -> Reproducer:
    """The reproducer of ``entry`` for ``model_class`` (one of its models); ``entry=None``: the default.

    ``seed`` is used unless the entry's repro sets its own.
    """
    from exporters.tiny import BATCH, SEQUENCE, build_tiny

    repro = entry.repro if entry is not None else None
    if entry is not None and model_class not in entry.models:
        raise ReproError(f"entry {entry.id!r} does not list {model_class!r} (it lists {', '.join(entry.models)})")
    if repro is None:
        tiny = build_tiny(model_class, seed)
        return Reproducer(entry.id if entry else None, model_class, tiny.model, tiny.inputs,
                          builder_export_options(tiny.static_dims), seed=seed)
    seed = seed if repro.seed is None else repro.seed
    options = {k: v for k, v in repro.export.items() if k != "dynamic"}
    if repro.script is not None:
        model, inputs = _run_script(entry, repro.script, model_class, seed)
        source = f"script {repro.script.name}"
    else:
        config = _config(entry, model_class, repro.config) if repro.config else None
        batch, sequence = repro.inputs.get("batch", BATCH), repro.inputs.get("sequence", SEQUENCE)
        tiny = build_tiny(model_class, seed, batch=batch, sequence=sequence, config=config)
        model, inputs = tiny.model, _reshaped(entry, tiny.model, tiny.inputs, repro, seed)
        _reinitialised(entry, model, inputs, repro.init, seed)
        options = builder_export_options(tiny.static_dims) | options
        given = [k for k in ("config", "inputs", "init", "export") if getattr(repro, k)]
        source = f"tiny model with {', '.join(given)}" if given else "default tiny model"  # [entry.repro] of budget_s only
    return Reproducer(entry.id, model_class, model, inputs, options, seed, source)


def builder_export_options(static_dims: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The export options a tiny model's builder asks for: the axes it knows a dynamic export must keep static
    (``exporters.tiny.inputs.noise_static_dims``); none for most models."""
    return {"static_dims": static_dims} if static_dims else {}


def exporter_options(reproducer: Reproducer) -> dict[str, Any]:
    """The reproducer's export options as exporter-config field names (``et_backend`` → ``backend``; a
    ``quantize`` scheme → its ``QuantizeConfig``)."""
    from exporters.quantize.schemes import QuantizeConfig

    options = {_CONFIG_FIELD.get(k, k): v for k, v in reproducer.export.items() if k != "optimize"}
    if "quantize" in options:
        options["quantize"] = QuantizeConfig(options["quantize"])
    return options


def run_eager(reproducer: Reproducer) -> Any:
    """Run the reproducer's model once on its inputs (what ``exportbot lint`` checks): it must work in eager,
    or no export of it can ever show a fix."""
    with torch.no_grad():
        return reproducer.model(**reproducer.inputs)


# ── Config overrides ──
def _config(entry: LedgerEntry, model_class: str, overrides: Mapping[str, Any]) -> Any:
    """The shrunk default config rebuilt with ``overrides`` merged in, so that the fields its constructor
    derives (per-layer lists, head sizes) follow them at tiny sizes, and the config's own validation runs."""
    from exporters.tiny import model_class as find_class
    from exporters.tiny import shrink_config

    config_class = find_class(model_class).config_class
    _check_fields(entry, config_class(), overrides, "")
    shrunk = shrink_config(config_class())
    try:
        config = config_class.from_dict(_merged(shrunk.to_dict(), overrides))
    except Exception as error:
        raise ReproError(
            f"entry {entry.id!r}: the tiny {config_class.__name__} with [entry.repro.config] is invalid: "
            f"{_one_line(error)}"
        ) from error
    _apply(config, overrides)  # a field from_dict does not take as a constructor argument still gets set
    return config


def _merged(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(data)
    for key, value in overrides.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if nested else value
    return merged


def _check_fields(entry: LedgerEntry, config: Any, overrides: Mapping[str, Any], where: str) -> None:
    """Every override names a field the default config has (configs accept unknown keys silently)."""
    from transformers import PretrainedConfig

    for key, value in overrides.items():
        if not hasattr(config, key):
            raise ReproError(
                f"entry {entry.id!r}: config.{where}{key}: {type(config).__name__} has no field {key!r}"
            )
        current = getattr(config, key)
        if isinstance(value, dict) and isinstance(current, PretrainedConfig):
            _check_fields(entry, current, value, f"{where}{key}.")


def _apply(config: Any, overrides: Mapping[str, Any]) -> None:
    from transformers import PretrainedConfig

    for key, value in overrides.items():
        current = getattr(config, key, None)
        if isinstance(value, dict) and isinstance(current, PretrainedConfig):
            _apply(current, value)
        else:
            setattr(config, key, value)


# ── Input overrides ──
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.long,
           "int32": torch.int32, "bool": torch.bool}  # fmt: skip


def _reshaped(
    entry: LedgerEntry, model: torch.nn.Module, inputs: dict[str, Any], repro: Repro, seed: int
) -> dict[str, Any]:
    """The sample inputs with ``image_size``, per-input ``shapes`` and ``values`` applied.

    An input named in ``shapes`` or ``values`` is drawn fresh (same kind as the sample's; a forward argument
    the tiny builder does not make, such as SegGPT's ``prompt_pixel_values``, at its ``shapes`` entry and
    ``values.NAME.dtype``): floats from a normal distribution (or uniform in ``range``), integers within
    ``range`` (else the sample's own range), masks all ones unless ``padding`` says left or right."""
    shapes = {name: tuple(shape) for name, shape in repro.inputs.get("shapes", {}).items()}
    values: Mapping[str, Mapping[str, Any]] = repro.inputs.get("values", {})
    size = repro.inputs.get("image_size")
    if size is not None:
        pixels = inputs.get("pixel_values")
        if not isinstance(pixels, torch.Tensor) or pixels.dim() != 4:
            raise ReproError(f"entry {entry.id!r}: inputs.image_size needs a 4-d pixel_values input")
        height, width = (size, size) if isinstance(size, int) else size
        shapes.setdefault("pixel_values", (*pixels.shape[:2], height, width))
    generator = torch.Generator().manual_seed(seed)
    reshaped = dict(inputs)
    accepted = _forward_arguments(model)
    for name in dict.fromkeys([*shapes, *values]):
        old = inputs.get(name)
        if old is not None and not isinstance(old, torch.Tensor):
            raise ReproError(f"entry {entry.id!r}: inputs.{name}: the sample's {name!r} is not a tensor")
        if old is None and name not in accepted:
            known = ", ".join(sorted(accepted)) or "none"
            raise ReproError(f"entry {entry.id!r}: inputs.{name}: {type(model).__name__}.forward takes no {name!r} "
                             f"(it takes {known})")  # fmt: skip
        shape = shapes.get(name, tuple(old.shape) if old is not None else None)
        if shape is None:
            raise ReproError(f"entry {entry.id!r}: inputs.values.{name}: the sample has no {name!r}; give its shape "
                             f"in inputs.shapes.{name}")  # fmt: skip
        reshaped[name] = _fresh(entry, name, old, shape, values.get(name, {}), generator)
    return reshaped


def _forward_arguments(model: torch.nn.Module) -> set[str]:
    """The keyword arguments the model's forward accepts (a ``**kwargs`` forward accepts any name it lists)."""
    return {name for name in inspect.signature(model.forward).parameters if name not in ("self", "kwargs")}


def _fresh(
    entry: LedgerEntry, name: str, like: torch.Tensor | None, shape: tuple[int, ...], value: Mapping[str, Any],
    generator: torch.Generator,
) -> torch.Tensor:  # fmt: skip
    dtype = _DTYPES[value["dtype"]] if "dtype" in value else like.dtype if like is not None else torch.float32
    if "padding" in value:
        if len(shape) != 2:
            raise ReproError(f"entry {entry.id!r}: inputs.values.{name}.padding needs a 2-d mask, the shape is {list(shape)}")
        return padded_mask(shape[0], shape[1], value["padding"], value.get("padded")).to(dtype)
    if dtype.is_floating_point:
        if "range" in value:
            low, high = value["range"]
            return (torch.rand(shape, generator=generator) * (high - low) + low).to(dtype)
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    if name.endswith("mask") and "range" not in value:
        return torch.ones(shape, dtype=dtype)
    if "range" in value:
        low, high = (int(bound) for bound in value["range"])
    elif like is not None:
        low, high = int(like.min()), int(like.max()) + 1
    else:
        raise ReproError(f"entry {entry.id!r}: inputs.values.{name}: an integer input the sample lacks needs a 'range'")
    return torch.randint(low, high, shape, generator=generator, dtype=dtype)


# ── Weight re-initialisation ──
def _reinitialised(
    entry: LedgerEntry, model: torch.nn.Module, inputs: dict[str, Any], rules: Sequence[Mapping[str, Any]], seed: int
) -> None:
    """Apply ``[[entry.repro.init]]`` rules in order (seeded), to every module whose class is named; then
    recalibrate BatchNorm statistics on the inputs, which the new weights changed (exporters.tiny)."""
    if not rules:
        return
    from exporters.tiny.initialisation import calibrate_batch_norms

    generator = torch.Generator().manual_seed(seed + 1)
    for number, rule in enumerate(rules, start=1):
        wanted, parameter = set(rule["modules"]), rule.get("parameter", "weight")
        targets = [module for module in model.modules() if type(module).__name__ in wanted]
        tensors = [getattr(m, parameter) for m in targets if isinstance(getattr(m, parameter, None), torch.Tensor)]
        if not tensors:
            raise ReproError(f"entry {entry.id!r}: init #{number}: no {'/'.join(sorted(wanted))} module with a "
                             f"{parameter!r} tensor in {type(model).__name__}")  # fmt: skip
        with torch.no_grad():
            for tensor in tensors:
                tensor.copy_(_drawn(rule, tensor, generator))
    calibrate_batch_norms(model, inputs)


def _drawn(rule: Mapping[str, Any], like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """New values for one parameter by ``rule`` (kaiming: fan-in, ReLU gain, as torch.nn.init computes it)."""
    kind = rule["rule"]
    if kind == "constant":
        return torch.full_like(like, float(rule["value"]))
    if kind == "uniform":
        low, high = rule["range"]
        return torch.rand(like.shape, generator=generator, dtype=like.dtype) * (high - low) + low
    if kind == "normal":
        return torch.randn(like.shape, generator=generator, dtype=like.dtype) * rule["std"] + rule.get("mean", 0.0)
    fan_in = like[0].numel() if like.dim() > 1 else like.numel()
    std = math.sqrt(2.0 / fan_in)
    if kind == "kaiming_normal":
        return torch.randn(like.shape, generator=generator, dtype=like.dtype) * std
    bound = math.sqrt(3.0) * std  # kaiming_uniform
    return (torch.rand(like.shape, generator=generator, dtype=like.dtype) * 2 - 1) * bound


# ── Scripts ──
def _run_script(entry: LedgerEntry, script: Path, model_class: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """``build(model_class, seed)`` of ``registry/repro/<id>.py``: for cases that need code (no downloads)."""
    spec = importlib.util.spec_from_file_location(f"exportbot_repro_{entry.id.replace('-', '_')}", script)
    if spec is None or spec.loader is None:
        raise ReproError(f"entry {entry.id!r}: cannot load {script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, SCRIPT_FUNCTION, None)
    if not callable(build):
        raise ReproError(f"entry {entry.id!r}: {script} defines no {SCRIPT_FUNCTION}(model_class, seed)")
    result = build(model_class, seed)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ReproError(f"entry {entry.id!r}: {script}: {SCRIPT_FUNCTION}() must return (model, inputs)")
    model, inputs = result
    if not isinstance(inputs, dict):
        raise ReproError(f"entry {entry.id!r}: {script}: the inputs must be a dict of keyword arguments")
    return model.eval(), inputs


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
