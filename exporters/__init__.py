"""exportbot's exporter library: transformers models through torch.export to ONNX and ExecuTorch.

Exporters are imported lazily (``from exporters import OnnxExporter``) so that a Dynamo-only user does not
pay for importing ONNX or ExecuTorch. ``load_all_workarounds()`` imports every exporter module, which is
what fills the workaround registry completely (for listing and linting).
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTER_MODULES = ("exporters.dynamo.exporter", "exporters.onnx.exporter", "exporters.executorch.exporter")

_LAZY = {
    "DynamoConfig": "exporters.dynamo.exporter",
    "DynamoExporter": "exporters.dynamo.exporter",
    "OnnxConfig": "exporters.onnx.exporter",
    "OnnxExporter": "exporters.onnx.exporter",
    "ExecutorchConfig": "exporters.executorch.exporter",
    "ExecutorchExporter": "exporters.executorch.exporter",
    "ONNX_DISABLE_OPTIMIZE": "exporters.ledger",
    "EXPORT_SKIPS": "exporters.ledger",
    "build_tiny": "exporters.tiny",
    "ExportOptions": "exporters.export_options",
    "DynamicDim": "exporters.export_options",
    "load": "exporters.bundle.loading",
    "register_bundle_types": "exporters.bundle.loading",
    "ExportedModel": "exporters.bundle.loading",
    "InputError": "exporters.bundle.loading",
    "BundleError": "exporters.bundle.format",
}

__all__ = [*_LAZY, "load_all_workarounds"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'exporters' has no attribute {name!r}")


def load_all_workarounds() -> None:
    """Import every exporter module so every ``@register_*`` decorator has run."""
    for module in EXPORTER_MODULES:
        importlib.import_module(module)
