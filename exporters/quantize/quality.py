"""Quality: how far the quantized artifact is from the *float* eager model, and whether that could be told.

Per output (over the rows the attention mask keeps: padded positions compute nothing anyone reads):

* ``cosine``: cosine similarity of the flattened output with float eager's, in float64;
* ``max_abs_diff``: the largest absolute difference;
* ``top1_agreement`` (logits): the fraction of positions whose arg-max token is float eager's.

For generation bundles, ``TokenQuality``: how many greedy steps produce float eager's tokens in every row
before the first divergence, and where that is.

A number is only a verdict when it could have come out otherwise, so each is ``inconclusive`` rather than a
pass where the float model itself gives it nothing to measure:

* top-1 agreement and the logits' cosine, when float eager predicts nothing: its next-token distributions are
  near-uniform (mean entropy at least ``UNIFORM_ENTROPY`` of ``log(vocab)``), as a tiny random model's are, or
  its arg-max is one token everywhere;
* cosine, when float eager's rows are already that similar to each other: the cosine between each row and
  another position's row reaches the threshold, so a quantized model that lost every input-dependent
  signal would still pass;
* greedy tokens, when float greedy repeats one token in every row (``exporters.generation.check.degenerate``).

Where the bundle has logits, quality is judged on the logits (and tokens): caches and hidden states are
intermediates whose change shows there. The verdict (``QualityReport.status``) is ``mismatch`` when a
conclusive number is below its threshold (``exporters.quantize.schemes``), ``pass`` when at least one is
conclusive and none is below, else ``inconclusive``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

PASS = "pass"
MISMATCH = "mismatch"
INCONCLUSIVE = "inconclusive"
UNIFORM_ENTROPY = 0.9  # mean next-token entropy, as a fraction of log(vocab), from which logits predict nothing


@dataclass
class OutputQuality:
    """One output of the quantized artifact against float eager, over the positions of every batch compared."""

    name: str
    status: str
    cosine: float | None = None
    max_abs_diff: float | None = None
    top1_agreement: float | None = None
    positions: int = 0
    detail: str = ""


@dataclass
class TokenQuality:
    """Greedy generation on the quantized bundle against float eager greedy generation."""

    status: str
    new_tokens: int
    equal_steps: int  # steps from the first on which every row's token is float eager's
    first_divergence: dict[str, int] | None = None  # {"step", "row"}, None when all steps agree
    detail: str = ""
    float_tokens: list[list[int]] = field(default_factory=list)
    quantized_tokens: list[list[int]] = field(default_factory=list)


@dataclass
class QualityReport:
    """Every output's quality and, for generation bundles, the tokens; with the thresholds in force."""

    thresholds: dict[str, float]
    outputs: list[OutputQuality] = field(default_factory=list)
    tokens: TokenQuality | None = None
    # False for a generation bundle's components: each is compared on its validated inputs and recorded, and
    # the bundle is judged on its greedy tokens (a decode step's logits on a few rows say little alone).
    gates: bool = True

    @property
    def status(self) -> str:
        statuses = [o.status for o in self.outputs] + ([self.tokens.status] if self.tokens else [])
        if MISMATCH in statuses:
            return MISMATCH
        return PASS if PASS in statuses else INCONCLUSIVE

    @property
    def failed(self) -> bool:
        return self.gates and self.status == MISMATCH

    def problems(self) -> list[str]:
        if not self.gates:
            return []
        found = [f"quality: {o.name}: {o.detail}" for o in self.outputs if o.status == MISMATCH]
        if self.tokens is not None and self.tokens.status == MISMATCH:
            found.append(f"quality: tokens: {self.tokens.detail}")
        return found

    def summary(self) -> str:
        """One line: the judged numbers and the verdict (what ``exportbot export`` prints)."""
        parts = [f"{o.name}: " + ", ".join(_numbers(o)) + f" ({o.status})" for o in self.outputs]
        if self.tokens is not None:
            parts.append(f"tokens: {self.tokens.equal_steps}/{self.tokens.new_tokens} equal ({self.tokens.status})")
        recorded = "" if self.gates else " (recorded, not gating)"
        return f"quality {self.status}{recorded}: " + "; ".join(parts)

    def worst(self) -> dict[str, Any]:
        """The lowest cosine and top-1 agreement, the largest difference and the tokens (sweep records, tables)."""
        def lowest(values: list[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return min(present) if present else None

        return {"status": self.status, "cosine": lowest([o.cosine for o in self.outputs]),
                "top1_agreement": lowest([o.top1_agreement for o in self.outputs]),
                "max_abs_diff": max((o.max_abs_diff for o in self.outputs if o.max_abs_diff is not None), default=None),
                "equal_tokens": None if self.tokens is None else self.tokens.equal_steps}

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "gates": self.gates, "thresholds": self.thresholds,
                "outputs": [asdict(o) for o in self.outputs], "tokens": None if self.tokens is None else asdict(self.tokens)}


def _numbers(output: OutputQuality) -> list[str]:
    numbers = []
    if output.cosine is not None:
        numbers.append(f"cosine {output.cosine:.5f}")
    if output.top1_agreement is not None:
        numbers.append(f"top-1 {output.top1_agreement:.1%}")
    if output.max_abs_diff is not None:
        numbers.append(f"max diff {output.max_abs_diff:.3g}")
    return numbers


def judged(names: list[str]) -> list[str]:
    """The outputs quality is judged on: the logits where there are any, else every output."""
    logits = [name for name in names if is_logits(name)]
    return logits or list(names)


def is_logits(name: str) -> bool:
    return name.split(".")[-1].endswith("logits")


def rows_of(output: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``output`` as ``[rows, features]`` in float64: its positions the mask keeps, when it is laid out by it."""
    output = output.detach().double()
    if mask is not None and output.dim() >= 2 and tuple(output.shape[: mask.dim()]) == tuple(mask.shape):
        output = output[mask.bool()]
    if output.dim() < 2:
        return output.reshape(1, -1)
    return output.reshape(-1, output.shape[-1])


def cosine(first: torch.Tensor, second: torch.Tensor) -> float:
    """Cosine similarity of two flattened float64 tensors over the elements finite in both (1 for two zeros)."""
    first, second = first.reshape(-1), second.reshape(-1)
    finite = torch.isfinite(first) & torch.isfinite(second)
    first, second = first[finite], second[finite]
    norms = float(first.norm() * second.norm())
    if norms == 0.0:
        return 1.0 if float(first.norm()) == float(second.norm()) else 0.0
    return float((first * second).sum()) / norms


def predicts_nothing(logits: torch.Tensor) -> str:
    """Why float logits ``[rows, vocab]`` carry no prediction to agree with, or ''."""
    if logits.shape[-1] < 2 or logits.shape[0] == 0:
        return "fewer than two tokens to choose from"
    probabilities = torch.softmax(logits, dim=-1)
    entropy = -(probabilities * torch.log(probabilities.clamp_min(1e-300))).sum(-1).mean()
    fraction = float(entropy) / math.log(logits.shape[-1])
    if fraction >= UNIFORM_ENTROPY:
        return (f"float eager predicts nothing: its next-token distributions are near-uniform (mean entropy "
                f"{fraction:.0%} of log vocab), as a random model's are")
    if logits.shape[0] > 1 and bool((logits.argmax(-1) == logits[0].argmax()).all()):
        return "float eager's arg-max is one token at every position"
    return ""


def compare_output(name: str, float_output: torch.Tensor, quantized: torch.Tensor, mask: torch.Tensor | None,
                   thresholds: dict[str, float]) -> OutputQuality:
    """One output's quality numbers and verdict (see the module docstring)."""
    expected, actual = rows_of(float_output, mask), rows_of(torch.as_tensor(quantized), mask)
    if expected.shape != actual.shape:
        return OutputQuality(name, MISMATCH, detail=f"shape {list(actual.shape)} != float {list(expected.shape)}")
    if bool((torch.isfinite(expected) & ~torch.isfinite(actual)).any()):
        return OutputQuality(name, MISMATCH, detail="non-finite where float eager is finite")
    finite = torch.isfinite(expected)
    difference = (expected - actual).abs()[finite]
    quality = OutputQuality(name, INCONCLUSIVE, cosine=cosine(expected, actual),
                            max_abs_diff=float(difference.max()) if difference.numel() else 0.0,
                            positions=int(expected.shape[0]))
    verdicts: list[tuple[bool | None, str]] = []  # (passed, or None when it says nothing; the words)
    nothing = predicts_nothing(expected) if is_logits(name) else ""
    floor = thresholds["min_cosine"]
    alike = cosine(expected, expected.roll(1, dims=0)) if expected.shape[0] > 1 else 1.0
    if nothing:
        verdicts.append((None, f"cosine {quality.cosine:.5f} says nothing: {nothing}"))
    elif alike >= floor:
        verdicts.append((None, f"cosine {quality.cosine:.5f} says nothing: float eager's rows are already cosine "
                               f"{alike:.4f} from one another, at or above the threshold {floor:g}"))
    else:
        verdicts.append((quality.cosine >= floor, f"cosine {quality.cosine:.5f} "
                                                   f"{'>=' if quality.cosine >= floor else '<'} {floor:g}"))
    if is_logits(name):
        quality.top1_agreement = float((expected.argmax(-1) == actual.argmax(-1)).double().mean())
        floor = thresholds["min_top1"]
        agreement = f"top-1 agreement {quality.top1_agreement:.1%}"
        verdicts.append((None, f"{agreement} says nothing: {nothing}") if nothing else
                        (quality.top1_agreement >= floor,
                         f"{agreement} {'>=' if quality.top1_agreement >= floor else '<'} {floor:.0%}"))
    quality.detail = "; ".join(words for _, words in verdicts)
    outcomes = [passed for passed, _ in verdicts if passed is not None]
    quality.status = MISMATCH if False in outcomes else PASS if outcomes else INCONCLUSIVE
    return quality


def compare_tokens(float_tokens: torch.Tensor, quantized_tokens: torch.Tensor, min_equal: int,
                   says_nothing: str = "") -> TokenQuality:
    """Greedy tokens ``[batch, new]`` of the quantized bundle against float eager's; ``says_nothing``: why the
    float path gives the count no meaning ('' when it does: see ``token_meaning``)."""
    steps = min(float_tokens.shape[1], quantized_tokens.shape[1])
    differing = (float_tokens[:, :steps] != quantized_tokens[:, :steps]).any(0).nonzero().flatten().tolist()
    equal = differing[0] if differing else steps
    first = None
    if differing:
        row = int((float_tokens[:, equal] != quantized_tokens[:, equal]).nonzero()[0])
        first = {"step": equal, "row": row}
    new = int(float_tokens.shape[1])
    where = f"first divergence at step {first['step']}, row {first['row']}" if first else "no divergence"
    report = TokenQuality(INCONCLUSIVE, new, equal, first, float_tokens=float_tokens.tolist(),
                          quantized_tokens=quantized_tokens.tolist())
    if says_nothing:
        report.detail = f"{equal} of {new} greedy steps equal float eager's ({where}), which says nothing: {says_nothing}"
        return report
    needed = min(min_equal, new)
    report.status = PASS if equal >= needed else MISMATCH
    report.detail = f"{equal} of {new} greedy steps equal float eager's ({where}); at least {needed} required"
    return report


def token_meaning(float_tokens: torch.Tensor, float_logits: list[torch.Tensor], repeats_one_token: bool) -> str:
    """Why float greedy generation gives a token count no meaning, or '': float greedy repeats one token in
    every row, or float eager predicts nothing at its steps (``predicts_nothing`` over every step's logits)."""
    if repeats_one_token:
        return "float greedy repeats one token in every row"
    return predicts_nothing(torch.cat([logits.double() for logits in float_logits])) if float_logits else ""
