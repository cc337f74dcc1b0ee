"""The Dynamo exporter: a transformers model through ``torch.export`` to a validated ``.pt2``.

``exporter`` runs the six stages every backend shares (the ONNX and ExecuTorch exporters call its
``export_program``); ``patches`` holds the workarounds registered at those stages.
"""
