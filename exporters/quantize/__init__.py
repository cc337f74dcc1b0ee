"""Quantized exports: the schemes, and the two checks every quantized bundle gets (docs/quantization.md).

What is shared by the backends lives here and is pure (no runtime, no quantizer): ``schemes`` (what ``--quantize
SCHEME`` means per backend, ``QuantizeConfig``, the quality thresholds), ``fidelity`` (the tolerance of the
artifact against the same quantization applied in PyTorch: one quantization step of each output),
``quality`` (the artifact against float eager: cosine, max abs diff, top-1 agreement, greedy tokens),
``calibration`` (the batches a static scheme calibrates on) and ``record`` (what one quantized export keeps
for its validation and its manifest). Quantizing is each backend's own stage: ``exporters/executorch/quantize.py``
(torchao, PT2E with XNNPACK's quantizer), ``exporters/onnx/quantize.py`` (ONNX Runtime's quantizers).
"""

from exporters.quantize.schemes import SCHEMES, QuantizeConfig, QuantizeError, Scheme

__all__ = ["SCHEMES", "QuantizeConfig", "QuantizeError", "Scheme"]
