"""The ExecuTorch exporter: the Dynamo pipeline, then lowering to a ``.pte``, run in ``executorch.runtime``.

``exporter`` holds the five stages in order; the rest are that backend's workarounds and internals, one
module per concern: ``core_aten`` and ``ops`` (operators the edge verifier or the portable runtime reject),
``symbolic`` (symbolic sizes through the lowering), ``layout`` and ``xnnpack`` (XNNPACK's passes),
``lowering`` (speed and memory of ``to_backend``), ``program`` (what is handed to ExecuTorch and back).
"""
