"""The releases of each dependency the exporter supports beside the pinned torch, and telling an export
that fails because *exportbot* cannot run with a release from one that fails because of the release.

Why: ``exportbot bisect`` and ``audit --candidate`` install other releases of one dependency and read a
failed export as "this release still has the bug" (bisect) or "this release breaks an export"
(candidate). When the failure is the project's own incompatibility with that release (torch.onnx cannot
import that onnxscript at all; our exporter imports something the release does not have), that reading
is false evidence. Two guards, both pure:

* :data:`SUPPORTED_FROM`: measured lower edges of the window (docs/version-window.md). A version below is
  refused up front with one line.
* :func:`own_incompatibility`: an export whose error is an import or attribute error raised by this
  repository's code (its own frame, or the attribute lookup or import it made, is innermost) is reported
  as "exportbot does not support PKG VER", not as the release's failure. A dependency failing deep in its
  own code is left alone: that is what the audit is for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from bot.audit.pins import normalize_name

# package → (first supported release, why nothing older works), measured with torch 2.13.0; see
# docs/version-window.md for every version tried and its result.
SUPPORTED_FROM: dict[str, tuple[str, str]] = {
    "onnxscript": ("0.6.0", "torch 2.13's torch.onnx imports onnxscript._framework_apis.torch_2_11, first shipped in 0.6.0"),
    "executorch": ("1.4.0", "executorch 1.3.1 is built for torch 2.12: it installs beside torch 2.13.0, but every "
                            "lowering fails with \"No such file or directory: 'flatc'\""),
    "transformers": ("5.0.0", "the exporter targets the transformers 5 API (Cache layers, masking_utils)"),
}
WINDOW_DOC = "docs/version-window.md"
_OWN_CODE = re.compile(r'File "[^"]*/(exporters|bot)/[^"/]+\.py", line \d+')
_INCOMPATIBLE = ("ImportError", "ModuleNotFoundError", "AttributeError")


def unsupported_reason(package: str, version: str) -> str | None:
    """One line when ``version`` of ``package`` is below the supported window, else None."""
    known = SUPPORTED_FROM.get(normalize_name(package))
    if known is None:
        return None
    first, why = known
    try:
        if Version(version) >= Version(first):
            return None
    except InvalidVersion:
        return None
    return f"{package} {version} is outside the window exportbot supports ({package}>={first}: {why}; see {WINDOW_DOC})"


def own_incompatibility(outcome: Mapping[str, Any], package: str, version: str) -> str | None:
    """One line when a failed export failed in exportbot's own code on an import or attribute error:
    the project cannot run with this release, which says nothing about the release's bugs."""
    if outcome.get("status") == "pass" or outcome.get("error_type") not in _INCOMPATIBLE:
        return None
    frames = [line for line in (outcome.get("traceback_tail") or "").splitlines() if line.lstrip().startswith('File "')]
    if not any(_OWN_CODE.search(frame) for frame in frames[-2:]):  # ours, or a getattr/import ours made
        return None
    error = (outcome.get("error") or "").strip().splitlines()[0][:200]
    return (f"exportbot does not support {package} {version}: {outcome.get('error_type')}: {error} "
            f"(raised in exportbot's own code, not an export failure of {package})")  # fmt: skip

