"""What onnxscript's ONNX Runtime fusions (the pass ``--ort-fusions`` runs) match on a decode graph, and the
operators left: the measurement behind docs/generation.md's "ONNX Runtime side" note (issue 48). ONNX Runtime
shares a past/present cache buffer only inside ``GroupQueryAttention``, so its count is the one that matters.

    python benchmarks/bench_decode.py ...   # or any generation export: its decode.onnx (--cache dynamic)
    python benchmarks/ort_fusion_counts.py .exportbot-cache/bench/decode/llama-512x8/ours-onnx/decode.onnx \\
        --out benchmarks/results/ort-fusion-counts.json
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

OPERATORS = ("GroupQueryAttention", "MultiHeadAttention", "RotaryEmbedding", "Concat", "Transpose")


def fusion_counts(decode: Path) -> dict[str, object]:
    """``fuse_xformers``'s count per rule on ``decode``, and the fused graph's count of ``OPERATORS``."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions._core import fuse_xformers

    model, counts = fuse_xformers(ir.load(decode))
    operators = collections.Counter(node.op_type for node in model.graph)
    return {"graph": str(decode), "fusions": dict(counts), "operators_after": {op: operators[op] for op in OPERATORS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decode", type=Path, help="a generation bundle's decode.onnx")
    parser.add_argument("--out", type=Path, help="also write the counts here as JSON")
    args = parser.parse_args()
    result = fusion_counts(args.decode)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
