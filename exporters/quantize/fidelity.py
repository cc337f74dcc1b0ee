"""Fidelity: the quantized artifact against the same quantization applied in PyTorch, within one quantization step.

The reference is the eager model with the export's own quantization: torchao's quantized modules (ExecuTorch
``8da4w``/``8da8w``), PT2E's converted program (ExecuTorch ``int8``), or, for ONNX Runtime's quantizers, the
eager model with each quantized weight replaced by its dequantized value read from the quantized graph, and
activations put through the same quantize-dequantize (exporters/onnx/quantize.py). Both sides then compute the
same function; what may still differ is where a float difference of the order of rounding moves an activation
across a rounding boundary of its quantization, and that element then differs by one quantization step, which
the layers after it carry to the output. So each output is allowed, besides the backend's float tolerance,
one step of its own 8-bit grid: ``(max - min) / 255`` of the reference output (the step the scheme's
activation quantization would give it). A wrong scale, a wrong group size or a kernel bug moves outputs by many
steps; docs/quantization.md gives the measured ratio of the largest difference to the step for each scheme and
model (``benchmarks/results/quantize-*.json``: 0 to 0.0x steps on the acceptance matrix), and the sizes a
known backend mismatch reaches (XNNPACK's bf16 group scales against float32 ones: 1.9 steps on the tiny Llama).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

GRID = 255  # an 8-bit grid: the activations' own quantization

Tolerance = Callable[[str, torch.Tensor], tuple[float, float]]


def output_step(reference: torch.Tensor) -> float:
    """One step of ``reference``'s 8-bit grid: ``(max - min) / 255`` over its finite elements (0 for none)."""
    if not reference.is_floating_point() or reference.numel() == 0:
        return 0.0
    finite = reference.detach()[torch.isfinite(reference.detach())].double()
    if finite.numel() == 0:
        return 0.0
    return float(finite.max() - finite.min()) / GRID


def one_step_tolerance(atol: float, rtol: float) -> Tolerance:
    """``(atol + one output step, rtol)`` for each output: the backend's float tolerance plus one step."""

    def tolerance(_name: str, reference: torch.Tensor) -> tuple[float, float]:
        return atol + output_step(reference), rtol

    return tolerance
