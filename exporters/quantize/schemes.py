"""What ``--quantize SCHEME`` means on each backend, and the quality each scheme is held to.

A scheme is named per backend: ``int8`` on ExecuTorch is PT2E *static* quantization (XNNPACK's quantizer,
activations calibrated), on ONNX it is ONNX Runtime's *dynamic* quantization (activations quantized per call).
``QuantizeConfig`` is the record the exporters' configs carry (``ExecutorchConfig(quantize=...)``,
``OnnxConfig(quantize=...)``) and the manifest records.

Quality thresholds (docs/quantization.md says how they were measured): the artifact against *float* eager
must reach ``min_cosine`` on every output, ``min_top1`` top-1 agreement on logits and, for generation bundles,
``min_equal_tokens`` greedy tokens equal to float greedy before the first divergence. They are floors measured
on the trained Llama fixture and the encoders of the acceptance matrix, with margin; a user tightens (or
loosens) them with ``--min-cosine``, ``--min-top1``, ``--min-equal-tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


class QuantizeError(ValueError):
    """A quantization request that cannot work (unknown scheme for the backend, a bad option)."""


@dataclass(frozen=True)
class Scheme:
    """One ``--quantize`` scheme of one backend."""

    name: str
    backend: str
    weights: str  # what the weights become, in words (recorded)
    activations: str  # what the activations become
    min_cosine: float
    min_top1: float
    min_equal_tokens: int
    static: bool = False  # activations calibrated ahead of time (a calibration set is needed)


SCHEMES: dict[tuple[str, str], Scheme] = {
    ("executorch", "8da4w"): Scheme(
        "8da4w", "executorch", "int4, symmetric, one bf16 scale per group of --group-size input channels",
        "int8, asymmetric, per token, quantized at run time", 0.98, 0.85, 4),
    ("executorch", "8da8w"): Scheme(
        "8da8w", "executorch", "int8, symmetric, one scale per output channel",
        "int8, asymmetric, per token, quantized at run time", 0.995, 0.90, 8),
    ("executorch", "int8"): Scheme(
        "int8", "executorch", "int8, symmetric, one scale per output channel (PT2E, XNNPACK's quantizer)",
        "int8, per tensor, scales calibrated ahead of time", 0.98, 0.85, 4, static=True),
    ("onnx", "int8"): Scheme(
        "int8", "onnx", "int8, symmetric, one scale per tensor (ONNX Runtime quantize_dynamic)",
        "uint8, asymmetric, per tensor, quantized at run time (DynamicQuantizeLinear)", 0.995, 0.90, 8),
    ("onnx", "int4"): Scheme(
        "int4", "onnx", "int4, symmetric, one scale per --block-size input channels (MatMulNBits)",
        "float", 0.98, 0.85, 4),
}

# The group and block sizes XNNPACK's and ONNX Runtime's kernels take.
GROUP_SIZES = (16, 32, 64, 128, 256)
# XNNPACK's int4 weights come in groups of a multiple of 32 input channels, a per-channel one included (a group
# spanning the whole row): executorch/backends/xnnpack/operators/node_visitor.py, _check_per_channel_group_params.
XNNPACK_INT4_GROUP_MULTIPLE = 32


def schemes_of(backend: str) -> list[str]:
    return [name for (owner, name) in SCHEMES if owner == backend]


@dataclass(frozen=True)
class QuantizeConfig:
    """How to quantize one export; ``None`` thresholds take the scheme's own (``Scheme``).

    ``calibration`` random batches are added to the sample inputs (and to ``calibration_inputs``, a user's own
    batches from Python) for the static ExecuTorch ``int8``; the dynamic schemes need none.
    ``embeddings``: also quantize the token embedding table (ONNX: ``Gather`` → int8 / ``GatherBlockQuantized``).
    """

    scheme: str
    group_size: int = 32
    block_size: int = 32
    calibration: int = 4
    embeddings: bool = False
    min_cosine: float | None = None
    min_top1: float | None = None
    min_equal_tokens: int | None = None
    calibration_inputs: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, repr=False)

    def check(self, backend: str) -> Scheme:
        """The scheme this config names on ``backend``; ``QuantizeError`` for anything that cannot work."""
        scheme = SCHEMES.get((backend, self.scheme))
        if scheme is None:
            offered = schemes_of(backend)
            raise QuantizeError(
                f"--quantize {self.scheme}: no such scheme for --backend {backend}"
                + (f"; choose from {', '.join(offered)}" if offered else "; quantized exports need --backend "
                   "executorch or onnx"))
        if self.group_size not in GROUP_SIZES or self.block_size not in GROUP_SIZES:
            raise QuantizeError(f"--group-size and --block-size take {', '.join(map(str, GROUP_SIZES))}; got "
                                f"{self.group_size} and {self.block_size}")
        if backend == "executorch" and self.scheme == "8da4w" and self.group_size % XNNPACK_INT4_GROUP_MULTIPLE:
            raise QuantizeError(f"--group-size {self.group_size}: XNNPACK's int4 kernels take groups of a multiple "
                                f"of {XNNPACK_INT4_GROUP_MULTIPLE} input channels")
        if self.calibration < 0:
            raise QuantizeError(f"--calibration must be 0 or more, got {self.calibration}")
        for name in ("min_cosine", "min_top1"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise QuantizeError(f"--{name.replace('_', '-')} must be in (0, 1], got {value}")
        if self.min_equal_tokens is not None and self.min_equal_tokens < 0:
            raise QuantizeError(f"--min-equal-tokens must be 0 or more, got {self.min_equal_tokens}")
        if self.embeddings and backend != "onnx":
            raise QuantizeError("--quantize-embeddings: only the ONNX schemes quantize the embedding table "
                                "(XNNPACK has no quantized embedding kernel; ExecuTorch keeps it float)")
        return scheme

    @classmethod
    def recorded(cls, config: Mapping[str, Any]) -> QuantizeConfig:
        """The config a bundle was exported with, from its ``export.json`` (``quantization.config``; a user's
        calibration batches are counted there, not stored, and are not needed again)."""
        return cls(**{name: value for name, value in config.items() if name != "calibration_inputs"})

    def thresholds(self, backend: str) -> dict[str, float]:
        """The quality floors in force: the user's where given, else the scheme's."""
        scheme = self.check(backend)
        return {
            "min_cosine": scheme.min_cosine if self.min_cosine is None else self.min_cosine,
            "min_top1": scheme.min_top1 if self.min_top1 is None else self.min_top1,
            "min_equal_tokens": scheme.min_equal_tokens if self.min_equal_tokens is None else self.min_equal_tokens,
        }

    def as_dict(self) -> dict[str, Any]:
        """The config as recorded in ``export.json``: a user's calibration batches are counted, not stored."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "calibration_inputs"}
        data["calibration_inputs"] = len(self.calibration_inputs)
        return data
