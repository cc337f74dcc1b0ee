"""The ONNX exporter: the Dynamo pipeline, then ``torch.onnx.export``, validated in ONNX Runtime.

``exporter`` holds the stages in order; the optimizer's passes are patched in ``folding`` (stage 1, constant
folding) and ``rewriter`` (stage 2, pattern rewrites), and aten translations live in ``translations``
(stage 4, ``_ONNX_TRANSLATION_TABLE``).
"""
