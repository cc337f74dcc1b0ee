"""Compare an exported artifact with the eager model, output by output, and say honestly what was shown.

A comparison can only prove something when it could have failed. Three situations prove nothing and are
reported as such, never as a pass:

* a *degenerate* eager output (non-finite, or so close to zero that ``atol`` alone accepts any answer,
  or constant across all elements), reported ``inconclusive``;
* an eager model that gives different answers for the same input twice (it samples noise), reported
  ``nondeterministic``;
* no output at all to compare;
* a mismatch only where float32 eager is itself off: at every element that misses, eager run again in float64
  (``run_reference``) is farther from float32 eager than the tolerance and within it of the artifact, so the
  elements are ill-conditioned and eager cannot serve as the answer there, reported ``inconclusive``.

Every element must be within ``atol + rtol * |expected|``; there is no "fraction of mismatching elements"
allowance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from exporters.flatten import leaves_with_path

PASS = "pass"
MISMATCH = "mismatch"
INCONCLUSIVE = "inconclusive"
NONDETERMINISTIC = "nondeterministic"


class ValidationError(AssertionError):
    """The exported artifact does not reproduce the eager model (or cannot be shown to)."""


def leaf_name(path: tuple[Any, ...]) -> str:
    """Readable name for a pytree key path: ``logits``, ``past_key_values.layers.0.keys``."""
    parts = []
    for key in path:
        for attribute in ("key", "name", "idx"):
            if hasattr(key, attribute):
                parts.append(str(getattr(key, attribute)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts) or "output"


def named_tensors(outputs: Any) -> list[tuple[str, torch.Tensor]]:
    """Flatten any output structure (ModelOutput, Cache, tuples) to ``(name, tensor)`` pairs in order."""
    leaves = leaves_with_path(outputs)  # not pytree's own: older ModelOutputs register without keys
    return [(leaf_name(path), leaf) for path, leaf in leaves if isinstance(leaf, torch.Tensor)]


@dataclass
class OutputCheck:
    """One output tensor compared with its eager counterpart."""

    name: str
    status: str
    max_abs_diff: float | None
    eager_max_abs: float | None
    detail: str = ""
    atol: float | None = None  # this output's own atol, where it has one (a quantized export's one-step tolerance)


@dataclass
class ShapeCheck:
    """All outputs compared for one set of input shapes."""

    label: str
    input_shapes: dict[str, list[int]]
    outputs: list[OutputCheck] = field(default_factory=list)

    @property
    def status(self) -> str:
        statuses = {check.status for check in self.outputs}
        for status in (MISMATCH, NONDETERMINISTIC, INCONCLUSIVE):
            if status in statuses:
                return status
        return PASS if self.outputs else INCONCLUSIVE


@dataclass
class ValidationReport:
    """The verdict of one validation: pass only when every output at every shape matched."""

    atol: float
    rtol: float
    shapes: list[ShapeCheck] = field(default_factory=list)
    # A quantized export's quality against float eager (exporters.quantize.quality.QualityReport): a conclusive
    # miss of its thresholds fails the export as a mismatch does; an inconclusive one is recorded, not failed.
    quality: Any = None
    # Shapes below the range torch.export proved (batch 1, a one-token prompt): they decide each dim's
    # validated minimum (exporters.minimum_sizes), not the verdict, which is the sample and second shapes'.
    smaller_shapes: list[ShapeCheck] = field(default_factory=list)
    # The sample without each optional argument, on the bundle filling it as eager does
    # (exporters.optional_inputs): they decide the manifest's ``optional``, not the verdict.
    omitted_inputs: list[ShapeCheck] = field(default_factory=list)

    @property
    def status(self) -> str:
        statuses = [shape.status for shape in self.shapes]
        if self.quality is not None and self.quality.failed:
            statuses.append(MISMATCH)
        for status in (MISMATCH, NONDETERMINISTIC, INCONCLUSIVE):
            if status in statuses:
                return status
        return PASS if statuses else INCONCLUSIVE

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def max_abs_diff(self) -> dict[str, float]:
        """Largest absolute difference per output name over all shapes checked."""
        worst: dict[str, float] = {}
        for shape in self.shapes:
            for check in shape.outputs:
                if check.max_abs_diff is not None:
                    worst[check.name] = max(worst.get(check.name, 0.0), check.max_abs_diff)
        return worst

    def problems(self) -> list[str]:
        found = [
            f"{shape.label}: {check.name}: {check.status}: {check.detail}"
            for shape in self.shapes
            for check in shape.outputs
            if check.status != PASS
        ]
        return found + (self.quality.problems() if self.quality is not None else [])

    def raise_for_status(self) -> None:
        if not self.passed:
            problems = self.problems() or ["no output tensor to compare"]
            raise ValidationError(f"validation {self.status}: " + "; ".join(problems[:5]))

    def as_dict(self) -> dict[str, Any]:
        data = {"status": self.status, "atol": self.atol, "rtol": self.rtol, "shapes": [asdict(s) for s in self.shapes]}
        for name in ("smaller_shapes", "omitted_inputs"):
            if getattr(self, name):
                data[name] = [asdict(s) | {"status": s.status} for s in getattr(self, name)]
        if self.quality is not None:
            data["quality"] = self.quality.as_dict()
        return data


def _degenerate(expected: torch.Tensor, atol: float) -> str:
    """Why a comparison against this eager output could not fail, or '' when it can.

    A NaN says eager itself went wrong (0 / 0, a log of a negative), so no answer can be shown right. An
    infinity is different: ``-inf`` is how models mask logits (Grounding DINO's ``enc_outputs_class`` over
    padded text tokens), and :func:`compare_output` already demands the same infinity at the same place; the
    output is then judged by its finite elements, which must themselves be comparable (some, not all near
    zero, not all equal).
    """
    if not expected.is_floating_point() or expected.numel() == 0:
        return ""
    if expected.isnan().any():
        return "eager output holds NaN"
    finite = expected[torch.isfinite(expected)]
    if finite.numel() == 0:
        return "eager output holds no finite element"
    magnitude = finite.abs().max().item()
    if magnitude <= atol:
        return f"eager output is near zero (max |x| = {magnitude:.3g} <= atol {atol:g})"
    if finite.numel() > 1 and (finite == finite[0]).all():
        return "eager output is constant" if finite.numel() == expected.numel() else "eager output's finite elements are constant"
    return ""


def _within(first: torch.Tensor, second: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Elementwise ``|first - second| <= atol + rtol * |second|``, in float64."""
    first, second = first.detach().to(torch.float64).cpu(), second.detach().to(torch.float64).cpu()
    return (first - second).abs() <= atol + rtol * second.abs()


def _max_distance(tensor: torch.Tensor, reference: torch.Tensor) -> float:
    """Largest ``|tensor - reference|`` in float64, over the elements where both are finite."""
    difference = (tensor.detach().to(torch.float64).cpu() - reference.detach().to(torch.float64).cpu()).abs()
    finite = torch.isfinite(difference)
    return difference[finite].max().item() if finite.any() else float("nan")


def compare_output(name: str, expected: torch.Tensor, actual: Any, atol: float, rtol: float) -> OutputCheck:
    """Compare one output; every element must satisfy ``|a - e| <= atol + rtol * |e|``.

    A NaN or inf in the artifact where eager is finite is a mismatch; where eager itself is NaN or inf the
    artifact must give the same value there (an inf accepts no finite answer, which ``inf <= atol + rtol *
    inf`` would). A NaN in eager leaves the output inconclusive at best; an inf does not (``_degenerate``).
    """
    actual = torch.as_tensor(actual)
    if tuple(actual.shape) != tuple(expected.shape):
        return OutputCheck(name, MISMATCH, None, None, f"shape {list(actual.shape)} != eager {list(expected.shape)}")
    if expected.numel() == 0:
        return OutputCheck(name, PASS, 0.0, 0.0, "empty")
    expected_f = expected.detach().to(torch.float64).cpu()
    actual_f = actual.detach().to(torch.float64).cpu()
    finite = torch.isfinite(expected_f)
    diff = (actual_f - expected_f).abs()
    close = torch.where(
        finite,
        _within(actual_f, expected_f, atol, rtol),  # False for a NaN in actual
        (actual_f == expected_f) | (actual_f.isnan() & expected_f.isnan()),
    )
    max_diff = diff[finite].max().item() if finite.any() else 0.0
    eager_max = expected_f[finite].abs().max().item() if finite.any() else 0.0
    if not close.all():
        bad = int((~close).sum())
        return OutputCheck(
            name, MISMATCH, max_diff, eager_max,
            f"{bad} of {close.numel()} elements off (max abs diff {max_diff:.3g}, atol {atol:g}, rtol {rtol:g})",
        )
    reason = _degenerate(expected, atol)
    if reason:
        return OutputCheck(name, INCONCLUSIVE, max_diff, eager_max, reason)
    return OutputCheck(name, PASS, max_diff, eager_max)


def eager_not_accurate_enough(
    check: OutputCheck, expected: torch.Tensor, actual: Any, reference: torch.Tensor, atol: float, rtol: float
) -> OutputCheck:
    """``check`` as ``inconclusive`` when every element missing eager is one where float32 eager misses the
    float64 ``reference`` and the artifact meets it; else still a mismatch (never a pass), with how far float32
    eager and the artifact each are from the float64 run added to its detail.

    Why: the tolerance treats eager as the answer. An element computed as the small difference of large terms
    (a depth head's value of 200 next to 248,000) carries eager's own float32 rounding error; there the
    artifact may be right and eager wrong, and a comparison with eager shows nothing either way. When the
    mismatch stands, the two distances tell a reviewer of the record rounding (the artifact a few times
    eager's own error) from a wrong graph (orders of magnitude beyond it) without re-running anything."""
    actual = torch.as_tensor(actual)
    if check.status != MISMATCH or actual.shape != expected.shape or reference.shape != expected.shape:
        return check
    if not expected.is_floating_point() or not torch.isfinite(reference).all():
        return check
    missed = ~_within(actual, expected, atol, rtol)
    explained = missed & ~_within(expected, reference, atol, rtol) & _within(actual, reference, atol, rtol)
    if not missed.any():
        return check
    if not bool((explained == missed).all()):
        return replace(check, detail=f"{check.detail}; from eager in float64: float32 eager "
                                     f"{_max_distance(expected, reference):.3g}, the artifact "
                                     f"{_max_distance(actual, reference):.3g} at most")
    return OutputCheck(
        check.name, INCONCLUSIVE, check.max_abs_diff, check.eager_max_abs,
        f"{check.detail}, each where float32 eager is itself off its float64 run beyond the tolerance and the "
        "artifact is within it: eager is not accurate enough there to decide",
    )


def _same(first: list[tuple[str, torch.Tensor]], second: list[tuple[str, torch.Tensor]]) -> bool:
    return len(first) == len(second) and all(
        a.shape == b.shape and torch.equal(a.nan_to_num(), b.nan_to_num()) for (_, a), (_, b) in zip(first, second)
    )


def _with_own_tolerance(name: str, expected: torch.Tensor, actual: Any, inputs: Mapping[str, Any],
                        tolerance: Callable[[str, torch.Tensor, Mapping[str, Any]], tuple[float, float]]) -> OutputCheck:
    atol, rtol = tolerance(name, expected, inputs)
    return replace(compare_output(name, expected, actual, atol, rtol), atol=atol)


def check_shape(
    label: str,
    inputs: Mapping[str, Any],
    run_eager: Callable[[Mapping[str, Any]], Any],
    run_exported: Callable[[Mapping[str, Any]], Iterable[Any]],
    atol: float,
    rtol: float,
    run_reference: Callable[[Mapping[str, Any]], Any] | None = None,
    tolerance: Callable[[str, torch.Tensor, Mapping[str, Any]], tuple[float, float]] | None = None,
) -> ShapeCheck:
    """Run eager twice and the artifact once on ``inputs`` and compare every output by position.

    ``run_reference`` (eager in float64) is called only when an output mismatches, to tell an artifact that is
    wrong from eager that is not accurate enough at the elements that miss (``eager_not_accurate_enough``);
    a reference that fails to run, or gives other outputs, leaves the mismatch as it is. ``tolerance`` gives
    each output its own ``(atol, rtol)`` from its name, eager value and the inputs (a quantized export's one
    output step, or its flip envelope on these inputs: exporters.quantize.fidelity), recorded in its check; without it every output takes ``atol``/``rtol``."""
    shapes = {name: list(value.shape) for name, value in inputs.items() if isinstance(value, torch.Tensor)}
    check = ShapeCheck(label, shapes)
    with torch.no_grad():
        expected = named_tensors(run_eager(inputs))
        again = named_tensors(run_eager(inputs))
    if not _same(expected, again):
        check.outputs = [OutputCheck(n, NONDETERMINISTIC, None, None, "eager gives different outputs for the same input")
                         for n, _ in expected]
        return check
    actual = list(run_exported(inputs))
    if len(actual) != len(expected):
        check.outputs = [OutputCheck("outputs", MISMATCH, None, None,
                                     f"{len(actual)} outputs from the artifact, {len(expected)} from eager")]
        return check
    if tolerance is None:
        check.outputs = [compare_output(n, e, a, atol, rtol) for (n, e), a in zip(expected, actual)]
    else:
        check.outputs = [_with_own_tolerance(n, e, a, inputs, tolerance) for (n, e), a in zip(expected, actual)]
    if run_reference is not None and any(output.status == MISMATCH for output in check.outputs):
        try:
            with torch.no_grad():
                reference = named_tensors(run_reference(inputs))
        except Exception:  # a model that cannot run in float64 (a dtype hard-coded inside): no second opinion
            return check
        if [name for name, _ in reference] == [name for name, _ in expected]:
            check.outputs = [eager_not_accurate_enough(c, e, a, r, atol, rtol)
                             for c, (_, e), a, (_, r) in zip(check.outputs, expected, actual, reference, strict=True)]
    return check
