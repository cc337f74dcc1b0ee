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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from exporters.ledger import LedgerEntry, Repro

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
        model, inputs = tiny.model, _reshaped(entry, tiny.inputs, repro, seed)
        options = builder_export_options(tiny.static_dims) | options
        source = "tiny model with " + ", ".join(k for k in ("config", "inputs", "export") if getattr(repro, k))
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
def _reshaped(entry: LedgerEntry, inputs: dict[str, Any], repro: Repro, seed: int) -> dict[str, Any]:
    """The sample inputs with ``image_size`` and per-input ``shapes`` applied (fresh values, same kinds)."""
    shapes = {name: tuple(shape) for name, shape in repro.inputs.get("shapes", {}).items()}
    size = repro.inputs.get("image_size")
    if size is not None:
        pixels = inputs.get("pixel_values")
        if not isinstance(pixels, torch.Tensor) or pixels.dim() != 4:
            raise ReproError(f"entry {entry.id!r}: inputs.image_size needs a 4-d pixel_values input")
        height, width = (size, size) if isinstance(size, int) else size
        shapes.setdefault("pixel_values", (*pixels.shape[:2], height, width))
    generator = torch.Generator().manual_seed(seed)
    reshaped = dict(inputs)
    for name, shape in shapes.items():
        old = inputs.get(name)
        if not isinstance(old, torch.Tensor):
            known = ", ".join(inputs)
            raise ReproError(f"entry {entry.id!r}: inputs.shapes.{name}: the model takes no tensor {name!r} ({known})")
        reshaped[name] = _fresh(name, old, shape, generator)
    return reshaped


def _fresh(name: str, like: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    if like.is_floating_point():
        return torch.randn(shape, generator=generator, dtype=like.dtype)
    if name.endswith("mask"):
        return torch.ones(shape, dtype=like.dtype)
    low, high = int(like.min()), int(like.max()) + 1
    return torch.randint(low, high, shape, generator=generator, dtype=like.dtype)


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
