"""The releases of each dependency the exporter supports beside the pinned torch, and telling an export
that fails because *exportbot* cannot run with a release from one that fails because of the release.

Why: ``exportbot bisect`` and ``audit --candidate`` install other releases of one dependency and read a
failed export as "this release still has the bug" (bisect) or "this release breaks an export"
(candidate). When the failure is the project's own incompatibility with that release (torch.onnx cannot
import that onnxscript at all; our exporter imports something the release does not have), that reading
is false evidence. Two guards, both pure:

* :func:`unsupported_reason`: the window's lower edge of each package, derived from the measured
  version-window probes (``docs/version-window.jsonl``, written by ``scripts/version_window.py``): the
  oldest measured release from which every measured release passes every probe. Nothing is taken on
  trust: a release whose probes fail (transformers 5.12.1 once did, in the project's own output naming)
  moves the edge above it until the project works there and the probes are measured again. A version
  below the edge is refused up front with one line naming the failing probe; packages never measured
  have no edge.
* :func:`own_incompatibility`: an export whose error is an import or attribute error raised by this
  repository's code (its own frame, or the attribute lookup or import it made, is innermost) is reported
  as "exportbot does not support PKG VER", not as the release's failure. A dependency failing deep in its
  own code is left alone: that is what the audit is for.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from bot.audit.pins import normalize_name

WINDOW_DOC = "docs/version-window.md"
WINDOW_RECORDS = Path(__file__).resolve().parents[2] / "docs" / "version-window.jsonl"
_OWN_CODE = re.compile(r'File "[^"]*/(exporters|bot)/[^"/]+\.py", line \d+')
_INCOMPATIBLE = ("ImportError", "ModuleNotFoundError", "AttributeError")


@dataclass(frozen=True)
class Edge:
    """A package's measured lower edge: ``first`` is the oldest supported release (None: none passes)."""

    package: str
    first: str | None
    why: str


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def measured_edges(records: Iterable[Mapping[str, Any]]) -> dict[str, Edge]:
    """Package (normalised) → its edge: the oldest measured release above which no measured release failed a
    probe. ``records``: one per probe export (``scripts/version_window.py``; an uninstallable release is one
    record with status ``uninstallable``)."""
    by_package: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for record in records:
        by_package.setdefault(normalize_name(str(record["package"])), {}).setdefault(str(record["version"]), []).append(record)
    edges = {}
    for package, versions in by_package.items():
        ordered = sorted(versions, key=_version)
        failing = [v for v in ordered if any(r.get("status") != "pass" for r in versions[v])]
        passing_above = [v for v in ordered if not failing or _version(v) > _version(failing[-1])]
        first = passing_above[0] if passing_above else None
        if failing:
            last = failing[-1]
            bad = next(r for r in versions[last] if r.get("status") != "pass")
            probe = f"{bad['model']} {bad.get('backend')}/{bad.get('mode')}" if bad.get("model") else "the install"
            why = f"at {last}, {probe} {bad.get('status')}: {bad.get('error') or 'no error recorded'}"
        else:
            why = f"{first} is the oldest release measured"
        edges[package] = Edge(package, first, why)
    return edges


@functools.cache
def _committed_edges() -> dict[str, Edge]:
    if not WINDOW_RECORDS.is_file():
        return {}
    lines = WINDOW_RECORDS.read_text(encoding="utf-8").splitlines()
    return measured_edges(json.loads(line) for line in lines if line.strip())


def unsupported_reason(package: str, version: str, edges: Mapping[str, Edge] | None = None) -> str | None:
    """One line when ``version`` of ``package`` is below the measured window (``edges``: default the
    committed measurements), else None."""
    edge = (edges if edges is not None else _committed_edges()).get(normalize_name(package))
    if edge is None:
        return None
    if edge.first is not None and _version(version) >= _version(edge.first):
        return None
    where = f">={edge.first}" if edge.first else ": no measured release passes"
    return (f"{package} {version} is outside the window exportbot supports ({package}{where}; {edge.why}; "
            f"see {WINDOW_DOC})")  # fmt: skip


def own_incompatibility(outcome: Mapping[str, Any], package: str, version: str = "") -> str | None:
    """One line when a failed export failed in exportbot's own code on an import or attribute error:
    the project cannot run with this release, which says nothing about the release's bugs. ``package`` may
    name several moved releases at once (``"torch 2.14.0, executorch 1.6.0"``, ``version`` then empty)."""
    if outcome.get("status") == "pass" or outcome.get("error_type") not in _INCOMPATIBLE:
        return None
    frames = [line for line in (outcome.get("traceback_tail") or "").splitlines() if line.lstrip().startswith('File "')]
    if not any(_OWN_CODE.search(frame) for frame in frames[-2:]):  # ours, or a getattr/import ours made
        return None
    error = (outcome.get("error") or "").strip().splitlines()[0][:200]
    release = f"{package} {version}".strip()
    return (f"exportbot does not support {release}: {outcome.get('error_type')}: {error} "
            f"(raised in exportbot's own code, not an export failure of {release})")  # fmt: skip

