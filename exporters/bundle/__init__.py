"""The bundle: an export directory that ships, and everything needed to run it again.

``format`` is the manifest (``export.json``) and the atomic write; ``signature`` describes a program's inputs
and outputs for it; ``loading`` is ``exporters.load(directory)``; ``runners`` opens one component file per
runtime (ONNX Runtime, the ExecuTorch runtime, ``torch.export.load`` through ``pt2_loading``); ``decoding``
is ``generate()`` over a generation bundle's components.
"""
