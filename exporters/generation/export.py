"""``export_for_generation``: export every component of a generative model and ship them as one bundle.

The components (``exporters.generation.components``) go through the exporter's own ``export()`` one by one, so every
workaround, stage and metadata record of a single-graph export applies to each. The bundle is the format of
docs/export-format.md with one artifact per component (``prefill.onnx``, ``decode.onnx``) and a
``generation`` section in ``export.json`` (components, cache layout, special tokens, the eager comparison).

What ships is what was validated: the bundle is written to a staging directory, loaded back with
``exporters.load`` (fresh runtime objects), every component is compared with its eager wrapper at two
shapes, then ``generate()`` runs on the loaded bundle and is compared token for token with eager
``generate()``; only then is the directory renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from exporters.base import ExportResult, StageClock, validate_loaded
from exporters.bundle.format import (
    MANIFEST_FILE,
    RUNTIMES,
    Manifest,
    exportbot_identity,
    publish,
    staged_directory,
    write_manifest,
    write_model_configs,
)
from exporters.generation.components import (
    IN_PLACE,
    ComponentPlan,
    GenerationExportConfig,
    cache_layout,
    plan_components,
)
from exporters.generation.inplace import check_in_place, in_place_layout, plan_in_place
from exporters.generation.support import check_supported
from exporters.validation import MISMATCH, PASS, ValidationError

__all__ = ["GenerationExport", "GenerationExportError", "export_for_generation"]

EXTENSIONS = {"dynamo": ".pt2", "onnx": ".onnx", "executorch": ".pte"}


class GenerationExportError(RuntimeError):
    """One component could not be exported; names the component, backend and the first line of the cause.

    ``component`` is the component's name (``prefill``, ``decode``): failure records put it before the stage
    that raised (``prefill: torch.export``)."""

    def __init__(self, message: str, component: str | None = None):  # default: unpickles from args alone
        super().__init__(message)
        self.component = component


@dataclass
class GenerationExport:
    """The exported components of one model, the cache layout that links them, and their validation."""

    backend: str
    model: torch.nn.Module = field(repr=False)
    inputs: dict[str, torch.Tensor] = field(repr=False)
    plans: list[ComponentPlan] = field(repr=False)
    results: dict[str, ExportResult] = field(repr=False)
    layout: dict[str, Any]
    new_tokens: int = 16
    check: Any = None  # GenerationCheck once validated
    tokens: Any = None  # quantized bundles: greedy tokens against float greedy (exporters.quantize.quality.TokenQuality)

    @property
    def quantization(self) -> Any:
        """The first component's quantization record (every component is quantized alike), or None."""
        return next(iter(self.results.values())).quantization

    @property
    def status(self) -> str:
        """``pass`` only when every component and the token-for-token comparison passed, and a quantized
        bundle's greedy tokens did not fall below its threshold against float."""
        for result in self.results.values():
            if result.validation is None:
                return "not validated"
            if result.validation.status != PASS:
                return result.validation.status
        if self.tokens is not None and self.tokens.status == MISMATCH:
            return MISMATCH
        return self.check.status if self.check is not None else "not validated"

    def save(self, out_dir: Path, validate: bool = True) -> Path:
        """Write the bundle to ``out_dir``; with ``validate`` (default) only if it reproduces eager."""
        out_dir = Path(out_dir)
        with staged_directory(out_dir) as staging:
            self._write(staging)
            if validate:
                self._validate_written(staging)
                if self.status != PASS:
                    raise ValidationError(f"generation export {self.status}: " + "; ".join(self.problems()[:5]))
            publish(staging, out_dir)
        return out_dir

    def validate(self, raise_on_failure: bool = True) -> str:
        """Write the bundle to a scratch directory, load it back and validate it there (see ``save``)."""
        import tempfile

        with staged_directory(Path(tempfile.gettempdir()) / "exportbot-generation") as staging:
            self._write(staging)
            self._validate_written(staging)
        if raise_on_failure and self.status != PASS:
            raise ValidationError(f"generation export {self.status}: " + "; ".join(self.problems()[:5]))
        return self.status

    def problems(self) -> list[str]:
        found = [f"{name}: {p}" for name, r in self.results.items() if r.validation for p in r.validation.problems()]
        if self.check is not None and self.check.status != PASS:
            found.append(f"generate: {self.check.detail}")
        if self.tokens is not None and self.tokens.status == MISMATCH:
            found.append(f"quality: tokens: {self.tokens.detail}")
        return found

    # ── writing ──
    def manifest(self) -> Manifest:
        first = next(iter(self.results.values()))
        meta = first.metadata
        components = {}
        for name, result in self.results.items():
            spec = dataclasses.replace(result.component, file=f"{name}{EXTENSIONS[self.backend]}")
            if result.validation is not None:
                spec.validation = result.validation.as_dict() | {"loaded_from": spec.file}
            components[name] = spec
        fired: dict[str, int] = {}
        stages: dict[str, float] = {}
        for name, result in self.results.items():
            for workaround, count in result.metadata.workarounds_fired.items():
                fired[workaround] = fired.get(workaround, 0) + count
            stages.update({f"{name}: {stage}": s for stage, s in result.metadata.stage_seconds.items()})
        generation = dict(self.layout)
        if self.check is not None:
            generation["validation"] = self.check.as_dict()
        return Manifest(
            backend=self.backend, model_class=type(self.model).__name__, components=components, dynamic=True,
            exportbot=exportbot_identity(), config=meta.config, versions=meta.versions, workarounds_fired=fired,
            workarounds_disabled=meta.workarounds_disabled, stage_seconds=stages,
            notes=[*dict.fromkeys(n for r in self.results.values() for n in r.metadata.notes),
                   "generation export: components " + ", ".join(self.results)],
            generation=generation, quantization=self.quantization_record(),
        )

    def quantization_record(self) -> dict[str, Any]:
        """The manifest's ``quantization`` section: the scheme once, each component's fidelity and quality, and
        the greedy tokens against float (docs/quantization.md); {} for a float bundle."""
        if self.quantization is None:
            return {}
        records = {name: result.quantization_record() for name, result in self.results.items()}
        first = next(iter(records.values()))
        shared = {key: value for key, value in first.items() if key not in ("fidelity", "quality")}
        return shared | {
            "components": {name: {"fidelity": r["fidelity"], "quality": r["quality"]} for name, r in records.items()},
            "tokens": None if self.tokens is None else dataclasses.asdict(self.tokens),
        }

    def _write(self, directory: Path) -> None:
        for name, result in self.results.items():
            result.save_artifact(directory / f"{name}{EXTENSIONS[self.backend]}")  # its exporter's writer
        manifest = self.manifest()
        manifest.files = write_model_configs(directory, self.model)
        write_manifest(directory, manifest)

    def _validate_written(self, directory: Path) -> None:
        from exporters.bundle.loading import load
        from exporters.generation.check import check_generation, check_quantized_generation, token_quality

        loaded = load(directory)
        for plan in self.plans:
            result = self.results[plan.name]
            with StageClock(result.metadata.stage_seconds)("validation"):
                cases = [("sample shape", plan.inputs)]
                if plan.second_inputs is not None:
                    cases.append(("second shape", plan.second_inputs))
                result.validation = validate_loaded(cases, plan.module, loaded.components[plan.name], result.atol,
                                                    result.rtol, result.quantization, quality_gates=False)
                result.check_smaller_shapes(plan.module, loaded.components[plan.name], result.validation)
        quantization = self.quantization
        if quantization is None:
            self.check = check_generation(self.model, loaded, self.inputs, max_new_tokens=self.new_tokens)
        else:  # fidelity: token for token against the same quantization in PyTorch; quality: against float
            references = {name: (result.quantization.reference, result.quantization.requantized)
                          for name, result in self.results.items()}
            self.check = check_quantized_generation(loaded, self.inputs, self.new_tokens, references)
            self.tokens = token_quality(self.model, loaded.metadata.generation, self.inputs,
                                        torch.tensor(self.check.exported_tokens),
                                        quantization.config.thresholds(self.backend)["min_equal_tokens"],
                                        quantization.random_weights)
        manifest = self.manifest()
        manifest.files = loaded.metadata.files
        write_manifest(directory, manifest)
        if not (directory / MANIFEST_FILE).is_file():
            raise RuntimeError(f"{directory}: manifest was not written")


def check_quantize_for_generation(exporter: Any) -> None:
    """Refuse a static scheme: it calibrates each component's activation ranges on that component's own inputs,
    so prefill and decode would not be quantized alike, and its reference (a converted program) cannot
    ``generate()``."""
    from exporters.quantize.schemes import SCHEMES, QuantizeError

    quantize = getattr(exporter.config, "quantize", None)
    if quantize is not None and SCHEMES[exporter.backend, quantize.scheme].static:
        raise QuantizeError(f"--quantize {quantize.scheme} on {exporter.backend} is static (calibrated per graph): "
                         "generation bundles take a dynamic scheme (executorch 8da4w or 8da8w, onnx int8 or int4)")


def size_oblivious_tracing() -> Any:
    """Trace with ``backed_size_oblivious``: a ``Dim.AUTO`` dim then covers size 1 too.

    Without it torch.export assumes a dynamic dim is at least 2 (its 0/1 specialisation) and records its
    range from 2; an encoder-decoder's first decode step has a self-attention past of exactly 1 (the start
    token). Size-oblivious tracing proves the graph for size 1 as well (the token comparison runs that
    step). A decoder-only decode uses it for its named ``past`` dim (one symbol shared by every cache input):
    traced the usual way, the cache ``cat``'s contiguity guard ``Min(8*past + 8, 16*past + 16) == 8*past + 8``
    is one torch 2.13's solver cannot prove over the named range; size-oblivious, it is not emitted. Only
    decode components use it: on a decoder-only prefill it turns Llama's ``batch != 1`` mask shortcut into a
    guard that the named batch dim (min 1) violates.
    """
    import torch.fx.experimental._config as fx_config

    return fx_config.patch(backed_size_oblivious=True)


def export_component(exporter: Any, plan: ComponentPlan) -> ExportResult:
    """One component through the exporter's own ``export()``; once more with the named dims that torch's
    constraint solver refused relaxed to ``Dim.AUTO`` (same bounds), if it refused any.

    Why: a named ``Dim`` makes torch.export *prove* every guard for the whole range, and its solver cannot
    simplify a ``Min``: the contiguity check of a reshape over flattened tokens (``tokens * Min(32, 32 *
    tokens) == 32 * tokens``, true for every ``tokens >= 1``; Aria's and Llama4's MoE routing, prefill's
    ``sequence`` and decode's ``batch``) is reported as ``Constraints violated (sequence)!``. ``Dim.AUTO``
    keeps the dim dynamic without the proof (as for the past length, docs/generation.md); what the program
    then accepts is checked, not assumed: the bundle is validated at a second shape, and the dims' ranges
    are the program's own in the manifest. The retry is recorded in the component's ``notes``.
    """
    def run(spec: dict[str, Any]) -> ExportResult:
        component_config = dataclasses.replace(exporter.config, dynamic=True, dynamic_shapes=spec)
        with size_oblivious_tracing() if plan.size_oblivious else contextlib.nullcontext():
            return type(exporter)(component_config).export(plan.module, plan.inputs)

    try:
        return run(plan.dynamic_shapes)
    except Exception as error:
        names = violated_dims(error)
        relaxed = relax_named_dims(plan.dynamic_shapes, names)
        if not names or relaxed == plan.dynamic_shapes:
            raise
    result = run(relaxed)
    result.metadata.notes.append(f"{plan.name}: dims {', '.join(sorted(names))} exported as Dim.AUTO: torch's "
                                 "constraint solver could not prove a guard over the named range")
    return result


_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")


def violated_dims(error: BaseException) -> set[str]:
    """The dim names of a ``Constraints violated (a, b)!`` anywhere in ``error``'s cause chain."""
    names: set[str] = set()
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for match in _VIOLATED.finditer(str(current)):
            names.update(name.strip() for name in match.group(1).split(",") if name.strip())
        current = current.__cause__ or current.__context__
    return names


def relax_named_dims(spec: Any, names: set[str]) -> Any:
    """``spec`` with every named ``Dim`` in ``names`` replaced by ``Dim.AUTO`` with the same bounds."""
    from torch.export import Dim
    from torch.export.dynamic_shapes import _Dim

    if isinstance(spec, _Dim) and spec.__name__ in names:
        return Dim.AUTO(min=spec.min, max=spec.max)
    if isinstance(spec, dict):
        return {key: relax_named_dims(value, names) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(relax_named_dims(value, names) for value in spec)
    return spec


def export_for_generation(
    exporter: Any,
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    config: GenerationExportConfig | None = None,
    new_tokens: int = 16,
    on_component: Callable[[str], None] | None = None,
) -> GenerationExport:
    """Export ``model``'s generation components with ``exporter`` (a Dynamo, ONNX or ExecuTorch exporter).

    ``inputs`` are what ``model.generate`` takes (``input_ids`` and ``attention_mask``, or
    ``input_features`` for Whisper); a left-padded batch of different prompt lengths is the best sample,
    since validation then covers padding. A model that keeps no KV cache in transformers' ``Cache`` raises
    ``GenerationUnsupported`` (exporters.generation.support) naming why, before any tracing. Nothing is
    validated here: call ``.save(dir)`` (validates the written bundle first) or ``.validate()``.
    ``on_component(name)`` is told as each component's export starts (progress displays).
    """
    config = config or GenerationExportConfig()
    backend = exporter.backend
    if backend not in RUNTIMES:
        raise ValueError(f"unknown backend {backend!r}")
    check_quantize_for_generation(exporter)
    model.eval()
    check_supported(model)  # one clear reason before anything runs: no KV cache, state outside Cache
    if config.cache == IN_PLACE:  # what the in-place cache does not serve: one line, before any tracing
        check_in_place(model, inputs, backend, quantized=getattr(exporter.config, "quantize", None) is not None)
        plans = plan_in_place(model, inputs, config.cache_len(model), backend)
        layout = in_place_layout(model, plans, config.cache_len(model), backend)
    else:
        plans = plan_components(model, inputs, config, backend)
        layout = cache_layout(model, plans, config, backend)
    results: dict[str, ExportResult] = {}
    for plan in plans:
        if on_component is not None:
            on_component(plan.name)
        try:
            result = export_component(exporter, plan)
        except Exception as error:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise GenerationExportError(
                f"{type(model).__name__}: component {plan.name!r} failed on {backend}: "
                f"{type(error).__name__}: {first_line}", plan.name) from error
        result.second_inputs = plan.second_inputs
        result.smaller_inputs = plan.smaller_inputs
        result.metadata.model_class = type(model).__name__
        results[plan.name] = result
    return GenerationExport(backend, model, dict(inputs), plans, results, layout, new_tokens=new_tokens)
