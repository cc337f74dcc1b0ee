"""ONNX Runtime's fused operators in a finished ONNX graph: ``OnnxConfig(ort_fusions=True)``, ``--ort-fusions``.

onnxscript's ORT fusion rewrites (``onnxscript.rewriter.ort_fusions.optimize_for_ort``) replace the subgraphs
ONNX Runtime has one kernel for: RMS norms (``SimplifiedLayerNormalization``), a residual add and its norm
(``SkipSimplifiedLayerNormalization``), rotary embeddings (``RotaryEmbedding``), attention (``MultiHeadAttention``
/ ``GroupQueryAttention`` where the pattern matches), GELU. The fused graph runs only in ONNX Runtime (the ops
are in its ``com.microsoft`` domain), which is what an ONNX bundle is validated in and loaded with.

It runs after the IR fixes, on the graph exactly as it will be saved, so the export's validation (from the
written file, against eager, at every shape) covers the fused kernels: a fusion that changes numerics beyond the
tolerance fails that export, and is then registered as a workaround (the rule left out) or the option left off.
Upstream behaviour this relies on: https://github.com/microsoft/onnxscript/tree/main/onnxscript/rewriter/ort_fusions
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["fuse_for_onnxruntime"]


def fuse_for_onnxruntime(model: ir.Model) -> dict[str, int]:
    """Fuse ``model`` in place; returns how many of each fusion applied (those that did)."""
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    fused, counts = optimize_for_ort(model)
    assert fused is model  # onnxscript rewrites in place; the caller keeps its model object
    return {name: count for name, count in counts.items() if count}
