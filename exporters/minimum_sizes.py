"""Sizes below the range torch.export proved (batch 1, a one-token prompt): validated, then recorded.

torch.export assumes that a dynamic dim is never 0 or 1 (its 0/1 specialisation: a sample of size 1 would be
specialised to 1, and the symbolic range starts at 2), so a dynamic program's range starts at 2 although its
graph usually computes size 1 exactly as eager does: ONNX Runtime, the ExecuTorch runtime and the ``.pt2``
module all run a BERT at batch 1 and sequence 1 within 1e-6 of eager. Batch 1 is the commonest deployment
shape, so a bundle must not refuse it for a reason that belongs to the tracer and not to the artifact.

What ships is what was validated: each smaller shape (one per dim role, ``exporters.dynamo.exporter
.size_one_inputs``; a one-token prompt and batch 1 for generation components) runs on the *written* bundle,
its range widened for that one call, against eager. A pass lowers the ``min`` of every dim it moved to the
size it ran at; a failure keeps the program's ``min`` and records why in the dim's ``min_reason``, which the
loader's refusal quotes (where the 0/1 specialisation made the program wrong at 1, that says so). A shape
that eager itself cannot run says nothing about the artifact and is not tried.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch

from exporters.bundle.format import ComponentSpec, DimRange
from exporters.validation import MISMATCH, PASS, OutputCheck, ShapeCheck

__all__ = ["check_smaller_shape", "sizes_to_validate"]


def sizes_to_validate(spec: ComponentSpec, inputs: Mapping[str, Any]) -> dict[str, int]:
    """``{dim name: size}`` for every named dim of ``spec`` that ``inputs`` give a size the trace did not
    cover: below the dim's ``min``, or 1 where the range includes it (a named ``Dim(min=1)`` is traced assuming
    it is not 1 all the same). Top-level tensor inputs only, by the leaf names the manifest gives them."""
    sizes: dict[str, int] = {}
    for tensor in spec.inputs:
        value = inputs.get(tensor.name)
        if not isinstance(value, torch.Tensor) or value.dim() != len(tensor.shape):
            continue
        for size, dim in zip(map(int, value.shape), tensor.shape):
            bounds = spec.dims.get(dim) if isinstance(dim, str) else None
            if bounds is not None and (size == 1 or (bounds.min is not None and size < bounds.min)):
                sizes[dim] = min(size, sizes.get(dim, size))
    return sizes


@contextlib.contextmanager
def _widened(dims: dict[str, DimRange], below: Mapping[str, int]) -> Iterator[None]:
    """``dims`` (a loaded component's) accepting the sizes in ``below`` for the duration of one check."""
    saved = {name: dims[name] for name in below}
    dims.update({name: replace(saved[name], min=size) for name, size in below.items()})
    try:
        yield
    finally:
        dims.update(saved)


RAISED = "raised"  # the name of the OutputCheck that stands for a bundle that raised instead of answering


def _why_refused(label: str, name: str, size: int, traced_min: int, check: ShapeCheck) -> str:
    """The ``min_reason`` of a dim whose smaller size did not validate: what was seen, and why it can be."""
    failed = [o for o in check.outputs if o.status != PASS]
    problem = next((f"{o.name}: {o.status}{': ' + o.detail if o.detail else ''}" for o in failed), check.status)
    verdict = ("refuses" if any(o.name == RAISED for o in failed) else "is wrong at") \
        if check.status == MISMATCH else "is not shown right at"
    return (f"torch.export traced the program assuming {name} >= {traced_min} (its 0/1 specialisation), and it "
            f"{verdict} {size} (validated at the {label} shape: {problem})")


def check_smaller_shape(
    label: str,
    inputs: dict[str, Any],
    spec: ComponentSpec,
    loaded_dims: dict[str, DimRange],
    run_eager: Callable[[dict[str, Any]], Any],
    run_check: Callable[[str, dict[str, Any]], ShapeCheck],
) -> ShapeCheck | None:
    """Validate the written bundle at ``inputs`` (some dims below ``spec``'s minimum) and record the outcome
    in ``spec``: a pass lowers those dims' ``min`` to the sizes run, anything else keeps the sizes out of the
    range (``min`` above them) and sets ``min_reason``.

    ``loaded_dims`` are the dims of the loaded component that ``run_check`` calls (widened for this call
    only); ``run_eager`` runs the eager model once first, so that a shape the model itself refuses is left
    out (None) instead of being blamed on the artifact. An error raised by the bundle is a mismatch.
    """
    below = sizes_to_validate(spec, inputs)
    if not below:
        return None
    try:
        with torch.no_grad():
            run_eager(copy.deepcopy(inputs))
    except Exception:  # the model itself does not take this shape: nothing to claim either way
        return None
    with _widened(loaded_dims, below):
        try:
            check = run_check(label, inputs)
        except Exception as error:
            shapes = {n: list(v.shape) for n, v in inputs.items() if isinstance(v, torch.Tensor)}
            first = (str(error).strip().splitlines() or [""])[0][:200]
            check = ShapeCheck(label, shapes, [OutputCheck(RAISED, MISMATCH, None, None,
                                                           f"the bundle raised {type(error).__name__}: {first}")])
    for name, size in below.items():
        traced = spec.dims[name]
        low = traced.min if traced.min is not None else size
        if check.status == PASS:
            spec.dims[name] = DimRange(min(size, low), traced.max)
        else:
            reason = _why_refused(label, name, size, max(low, size + 1), check)
            spec.dims[name] = DimRange(max(low, size + 1), traced.max, reason)
    return check
