"""What one quantized export keeps: its reference for fidelity, what was quantized, and its two verdicts.

A backend's quantization stage returns a ``QuantizedExport``; the ``ExportResult`` carries it, validation
compares the written artifact with ``reference`` within ``tolerance`` (fidelity, exporters.quantize.fidelity)
and with the float model (``check_quality``), and the manifest records ``as_dict()`` under ``quantization``
(docs/export-format.md).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from exporters.quantize.calibration import random_batch
from exporters.quantize.fidelity import Tolerance, fidelity_tolerance
from exporters.quantize.quality import INCONCLUSIVE, QualityReport, compare_output, judged, rows_of
from exporters.quantize.schemes import QuantizeConfig
from exporters.validation import named_tensors

MASKS = ("attention_mask", "decoder_attention_mask")
QUALITY_BATCHES = 7  # random batches of the sample's shape that quality runs besides the sample
QUALITY_SEED = 1
RANDOM_WEIGHTS = "random weights: a random model's quantization error says nothing about a trained one's"


@dataclass
class QuantizedExport:
    """One export's quantization: how it was done, the PyTorch reference of it, and what validation found."""

    config: QuantizeConfig
    backend: str
    reference: torch.nn.Module = field(repr=False)  # the same quantization, applied in PyTorch
    method: str  # the quantizer and its settings, in words
    quantized: list[str] = field(default_factory=list)  # the layers (modules, or ONNX nodes) quantized
    per_channel: list[str] = field(default_factory=list)  # 8da4w layers whose width the group does not divide
    int8_fallback: list[str] = field(default_factory=list)  # 8da4w layers no int4 layout of XNNPACK takes (int8)
    kept_float: dict[str, str] = field(default_factory=dict)  # a layer left in float, and why
    calibration_batches: int = 0
    # Layers of ``reference`` that quantize their input (ONNX int8, torchao 8da4w/8da8w at run time; PT2E int8 every
    # activation quantize op, exporters.executorch.quantize.ActivationQuantize): where rounding
    # flips arise, nudged to measure the flip envelope (exporters.quantize.fidelity).
    requantized: list[str] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)  # output -> its largest 8-bit step seen (fidelity)
    envelopes: dict[str, float] = field(default_factory=dict)  # output -> its largest flip envelope seen
    quality: QualityReport | None = None
    # Set by a caller that knows the weights are random (the tiny factory, a checkpoint without weights): a random
    # model's quantization error says nothing about a trained one's, so quality is recorded and inconclusive.
    random_weights: bool = False

    def tolerance(self, atol: float, rtol: float) -> Tolerance:
        """The fidelity tolerance: the backend's float one plus one step of each output, or twice its flip
        envelope where that is larger (recording both)."""

        def record(name: str, step: float, envelope: float) -> None:
            self.steps[name] = max(self.steps.get(name, 0.0), step)
            self.envelopes[name] = max(self.envelopes.get(name, 0.0), envelope)

        return fidelity_tolerance(atol, rtol, self.reference, self.requantized, record)

    def check_quality(self, run_loaded: Callable[[Mapping[str, Any]], Any], cases: list[tuple[str, dict[str, Any]]],
                      float_model: torch.nn.Module, gates: bool = True) -> QualityReport:
        """The artifact (``run_loaded``) against ``float_model`` over the positions of every validated shape and of
        ``QUALITY_BATCHES`` random batches of the sample's shape, pooled: the 2 x 8 sample alone has 16 positions,
        so one top-1 disagreement would move the agreement by 6 %. ``gates=False`` (a generation bundle's
        component, whose inputs hold a cache that random draws would make meaningless): the validated shapes
        only, recorded without failing the export."""
        report = QualityReport(self.config.thresholds(self.backend), gates=gates)
        sample = cases[0][1]
        generator = torch.Generator().manual_seed(QUALITY_SEED)
        extra = QUALITY_BATCHES if gates else 0
        batches = [inputs for _label, inputs in cases] + [random_batch(sample, generator) for _ in range(extra)]
        report.outputs = [compare_output(name, expected, actual, None, report.thresholds)
                          for name, expected, actual in _pooled_rows(run_loaded, batches, float_model)]
        if self.random_weights:
            for output in report.outputs:
                output.status, output.detail = INCONCLUSIVE, f"{RANDOM_WEIGHTS}; {output.detail}"
        self.quality = report
        return report

    def fidelity(self, max_abs_diff: Mapping[str, float]) -> dict[str, dict[str, float]]:
        """Per output: the largest difference from the reference, its 8-bit step, their ratio (in steps), and
        the flip envelope in steps (0 where nothing is quantized at run time)."""
        return {name: {"max_abs_diff": diff, "step": self.steps[name],
                       "steps": diff / self.steps[name] if self.steps[name] else 0.0,
                       "envelope_steps": self.envelopes.get(name, 0.0) / self.steps[name] if self.steps[name] else 0.0}
                for name, diff in max_abs_diff.items() if name in self.steps}

    def as_dict(self, max_abs_diff: Mapping[str, float] | None = None) -> dict[str, Any]:
        """The manifest's ``quantization`` section (docs/export-format.md)."""
        return {
            "scheme": self.config.scheme,
            "config": self.config.as_dict(),
            "method": self.method,
            "quantized": len(self.quantized),
            "per_channel_fallback": self.per_channel,
            "int8_fallback": self.int8_fallback,
            "kept_float": self.kept_float,
            "calibration_batches": self.calibration_batches,
            "fidelity": self.fidelity(max_abs_diff or {}),
            "quality": None if self.quality is None else self.quality.worst() | {"summary": self.quality.summary()},
        }


def _pooled_rows(run_loaded: Callable[[Mapping[str, Any]], Any], batches: list[dict[str, Any]],
                 float_model: torch.nn.Module) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(name, float rows, quantized rows)`` for each judged output: every batch's positions the attention mask
    keeps (``rows_of``), concatenated."""
    expected: dict[str, list[torch.Tensor]] = {}
    actual: dict[str, list[torch.Tensor]] = {}
    for inputs in batches:
        with torch.no_grad():
            floats = named_tensors(float_model(**copy.deepcopy(dict(inputs))))
            quantized = named_tensors(run_loaded(inputs))
        mask = next((inputs[name] for name in MASKS if isinstance(inputs.get(name), torch.Tensor)), None)
        names = judged([name for name, tensor in floats if tensor.is_floating_point()])
        for (name, tensor), (_, other) in zip(floats, quantized):
            if name in names:
                expected.setdefault(name, []).append(rows_of(tensor, mask))
                actual.setdefault(name, []).append(rows_of(torch.as_tensor(other), mask))
    return [(name, torch.cat(expected[name]), torch.cat(actual[name])) for name in expected]
