"""Fidelity: the quantized artifact against the same quantization applied in PyTorch, within one quantization
step, or within what rounding flips measurably do to this model, whichever is larger.

The reference is the eager model with the export's own quantization: torchao's quantized modules (ExecuTorch
``8da4w``/``8da8w``), PT2E's converted program (ExecuTorch ``int8``), or, for ONNX Runtime's quantizers, the
eager model with each quantized weight replaced by its dequantized value read from the quantized graph, and
activations put through the same quantize-dequantize (exporters/onnx/quantize.py). Both sides then compute the
same function; what may still differ is where a float difference of the order of rounding moves an activation
across a rounding boundary of its quantization: that element differs by one activation step, which the layers
after it carry on. So each output is allowed, besides the backend's float tolerance, one step of its own 8-bit
grid: ``(max - min) / 255`` of the reference output.

On a deep model whose activations are quantized at run time, flips compound: each layer's flips move the next
layer's inputs, which flip more codes (benchmarks/quantize_layers.py, BERT 512 x 8, ONNX ``int8``: 2 codes of
65536 flip in the first layer that has any, each by one code at the same scale and zero point; 29 % of the
last FFN input's). There the reference is nudged against itself: each layer whose input is quantized at run
time gets that input moved by at most one float32 ulp (a kernel's other accumulation order does as much), for
as many draws as it takes for ``FLIP_SEEDS`` of them to flip a code (at most ``MAX_DRAWS``), and the largest
change of each output is the model's **flip envelope** for those inputs. The same rule holds each validated
shape of a generation bundle's components, and each step of its token loop (exporters.generation.check).
The artifact is allowed ``FLIP_MARGIN`` times it where that exceeds one step. Measured on that BERT
(benchmarks/results/quantize-layers-onnx-int8.json): the nudged runs 0.98 to 1.12 steps from the reference,
the artifact 1.04, a reference with a zero point off by one 5.3, so a margin of 2 keeps such a bug caught.
docs/quantization.md gives the derivation and the rows the benchmark measured.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from exporters.validation import named_tensors

GRID = 255  # an 8-bit grid: the activations' own quantization
FLIP_SEEDS = (0, 1, 2)  # the first draws of the one-ulp nudge; the envelope waits for this many that flip a code
# A draw that flips no code changes the outputs by float rounding only (~1e-7 of a step); one that flips one moves
# some element by a fraction of a step at least. Where few activations are quantized (a decode step of 2 tokens:
# 2 x 512 per layer), most draws flip nothing: drawing goes on until FLIP_SEEDS draws flipped, at most MAX_DRAWS.
FLIPPED = 0.01  # a draw flipped a code if some output moved by more than this many of its steps
MAX_DRAWS = 32
FLIP_MARGIN = 2.0  # the artifact is one more draw: the measured ones came within 0.93x the envelope's largest

Tolerance = Callable[[str, torch.Tensor, Mapping[str, Any]], tuple[float, float]]


def output_step(reference: torch.Tensor) -> float:
    """One step of ``reference``'s 8-bit grid: ``(max - min) / 255`` over its finite elements (0 for none)."""
    if not reference.is_floating_point() or reference.numel() == 0:
        return 0.0
    finite = reference.detach()[torch.isfinite(reference.detach())].double()
    if finite.numel() == 0:
        return 0.0
    return float(finite.max() - finite.min()) / GRID


@contextlib.contextmanager
def nudged(targets: Sequence[tuple[torch.nn.Module, list[str]]], seed: int) -> Iterator[None]:
    """Within it, each of ``layers``' inputs (of each ``(module, layers)`` target) is moved by -1, 0 or +1
    float32 ulp per element, drawn from ``seed``, before the layer quantizes it."""
    generator = torch.Generator().manual_seed(seed)

    def nudge(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        ulp = x.abs() * torch.finfo(torch.float32).eps
        return (x + ulp * torch.randint(-1, 2, x.shape, generator=generator).to(x.dtype), *args[1:])

    handles = [module.get_submodule(layer).register_forward_pre_hook(nudge, prepend=True)
               for module, layers in targets for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def nudged_run(reference: torch.nn.Module, layers: list[str], inputs: Mapping[str, Any], seed: int) -> Any:
    """``reference`` on ``inputs`` with ``layers``' inputs nudged (``nudged``)."""
    with nudged([(reference, layers)], seed), torch.no_grad():
        return reference(**copy.deepcopy(dict(inputs)))  # a copy: a decode step updates its cache in place


def flip_envelope(run: Callable[[], list[tuple[str, torch.Tensor]]],
                  targets: Sequence[tuple[torch.nn.Module, list[str]]]) -> dict[str, float]:
    """Per named output of ``run()``, the largest change one-ulp nudges of the targets' layers' inputs make
    to it, over draws until ``len(FLIP_SEEDS)`` of them flipped a code or ``MAX_DRAWS`` were made (empty
    without such layers: nothing is quantized at run time, nothing flips). ``run`` is one forward of a
    reference, or a whole teacher-forced generation over the components' references
    (exporters.generation.check): the envelope is measured on the shape and steps it is applied to, and as
    often as it takes to see flips there: a decode step has far fewer activations to flip than a prefill."""
    if not any(layers for _module, layers in targets):
        return {}
    with torch.no_grad():
        plain = dict(run())
    steps = {name: output_step(tensor) for name, tensor in plain.items()}
    envelope: dict[str, float] = {}
    flipped = 0
    for seed in range(MAX_DRAWS):
        with nudged(targets, seed), torch.no_grad():
            changes = {name: float((tensor.double() - plain[name].double()).abs().nan_to_num(0.0).max())
                       for name, tensor in run() if tensor.is_floating_point() and tensor.numel()}
        for name, change in changes.items():
            envelope[name] = max(envelope.get(name, 0.0), change)
        flipped += any(change > FLIPPED * steps[name] for name, change in changes.items())
        if flipped == len(FLIP_SEEDS):
            break
    return envelope


def flip_tolerance(step: float, envelope: float) -> float:
    """What an output may differ from its reference by, besides the backend's float tolerance: one step of
    its 8-bit grid, or ``FLIP_MARGIN`` x its flip envelope where that is larger. The one rule of every
    fidelity comparison: a single forward, each validated shape of a generation bundle's components, and
    each step of its token loop."""
    return max(step, FLIP_MARGIN * envelope)


def fidelity_tolerance(atol: float, rtol: float, reference: torch.nn.Module, layers: list[str],
                       on_output: Callable[[str, float, float], None] | None = None) -> Tolerance:
    """``(atol + max(one output step, FLIP_MARGIN x the flip envelope), rtol)`` for each output; the envelope is
    measured once per set of inputs. ``on_output(name, step, envelope)`` records what each output was given."""
    measured: dict[str, Any] = {"inputs": None, "envelope": {}}

    def tolerance(name: str, expected: torch.Tensor, inputs: Mapping[str, Any]) -> tuple[float, float]:
        if measured["inputs"] is not inputs:
            def forward() -> list[tuple[str, torch.Tensor]]:
                return named_tensors(reference(**copy.deepcopy(dict(inputs))))  # decode updates its cache in place

            measured["inputs"], measured["envelope"] = inputs, flip_envelope(forward, [(reference, layers)])
        step, envelope = output_step(expected), measured["envelope"].get(name, 0.0)
        if on_output is not None:
            on_output(name, step, envelope)
        return atol + flip_tolerance(step, envelope), rtol

    return tolerance
