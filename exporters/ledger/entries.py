"""The ledger's records: schema constants, problems and the entry/ledger dataclasses.

Split out of ``exporters.ledger`` (which re-exports every public name) so that validation, reading and
editing all build on one set of types and constants without importing each other in circles; nothing
here reads a file.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

LIST_FILES: dict[str, str] = {
    "ONNX_DISABLE_OPTIMIZE": "onnx_disable_optimize.toml",
    "EXPORT_SKIPS": "export_skips.toml",
}
BACKENDS = ("onnx", "executorch", "dynamo")
# generate: only generation exports (docs/generation.md); quantize: only quantized exports, of the scheme its
# reproducer's ``export.quantize`` names (docs/quantization.md)
SCOPES = ("all", "dynamic", "static", "generate", "quantize")
# The shape modes (``dynamic`` flags) each scope's re-runs export in.
SCOPE_MODES = {"all": [False, True], "static": [False], "dynamic": [True], "generate": [True], "quantize": [False, True]}
# Schema order: also the order in which add_entry writes keys.
_KEYS = (
    "id", "models", "backend", "scope", "upstream", "dependency", "reason", "model_change", "failure", "added",
    "fixed_in", "repro",
)  # fmt: skip
_OPTIONAL = {
    "ONNX_DISABLE_OPTIMIZE": frozenset({"fixed_in", "repro"}),
    "EXPORT_SKIPS": frozenset({"upstream", "fixed_in", "repro"}),
}
_ALLOWED = {
    "ONNX_DISABLE_OPTIMIZE": frozenset(_KEYS) - {"model_change"},
    "EXPORT_SKIPS": frozenset(_KEYS),
}

_GITHUB_ITEM = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/(issues|pull)/(\d+)/?(?:#[\w-]+)?")


# ── Problems ──
@dataclass(frozen=True)
class LedgerProblem:
    """One thing wrong with a ledger file, located so an editor can jump to it."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class LedgerError(ValueError):
    """The ledger cannot be used: one ``file:line: message`` per problem, never a raw traceback."""

    def __init__(self, problems: Sequence[LedgerProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(map(str, self.problems)))


# ── Entries ──
class UpstreamRef(NamedTuple):
    """A GitHub issue or pull request, parsed so the bot can ask the API whether it is closed."""

    owner: str
    repo: str
    number: int
    kind: str  # "issue" | "pull"


def parse_github_url(url: str) -> UpstreamRef | None:
    """The issue/PR a GitHub URL points at, or None when it is no single issue or pull request."""
    match = _GITHUB_ITEM.fullmatch(url)
    if match is None:
        return None
    owner, repo, kind, number = match.groups()
    return UpstreamRef(owner, repo, int(number), "issue" if kind == "issues" else "pull")


@dataclass(frozen=True)
class Repro:
    """How to reproduce an entry's failure, when the class's default tiny model is not the failing case.

    Real upstream bugs often need a config field the tiny default leaves off, another input size or a
    backend option; without the reproducer a re-run exports a model that never failed and "passes".
    ``exporters.ledger.repro`` builds the model, inputs and export options from this; ``script`` (resolved to a
    file under the registry's ``repro/``) replaces ``config`` and ``inputs`` for cases that need code.
    """

    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    export: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed: int | None = None
    script: Path | None = None
    # A slowness entry's failure is "too slow": its export fails once it runs past this many seconds (a
    # re-run is killed then, whatever the audit's --timeout), so a long --timeout never reads as a fix.
    budget_s: float | None = None
    # Weight re-initialisations applied to the built model, in order ([[entry.repro.init]] tables).
    init: tuple[Mapping[str, Any], ...] = ()

    def modes(self, scope: str) -> list[bool]:
        """The ``dynamic`` flags to re-run: the scope's, narrowed by ``export.dynamic`` when given."""
        return [self.export["dynamic"]] if "dynamic" in self.export else SCOPE_MODES[scope]


@dataclass(frozen=True)
class LedgerEntry:
    """One ``[[entry]]`` table, validated, with where it lives so messages and edits can point at it."""

    id: str
    list_name: str  # "ONNX_DISABLE_OPTIMIZE" | "EXPORT_SKIPS"
    models: tuple[str, ...]
    backend: str
    scope: str
    dependency: str
    reason: str
    failure: str
    added: datetime.date
    path: Path
    line: int  # the ``[[entry]]`` header
    upstream: str | None = None
    upstream_ref: UpstreamRef | None = None
    model_change: str | None = None
    fixed_in: str | None = None
    repro: Repro | None = dataclasses.field(default=None, hash=False)
    key_lines: Mapping[str, int] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    model_lines: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def model_line(self, model_class: str) -> int:
        """The line naming ``model_class``, so a message about one class points at it, not the header."""
        return dict(zip(self.models, self.model_lines, strict=False)).get(model_class, self.line)

    def applies_to(self, model_class: str | type, backend: str, dynamic: bool, generate: bool = False,
                   quantize: str | None = None) -> bool:
        """Whether this entry gates ``model_class`` exported by ``backend`` with/without dynamic shapes.

        A ``dynamo`` entry covers every backend: torch.export runs under each exporter, so a class that
        cannot pass it cannot reach ONNX or ExecuTorch either. A generation export (``generate``) has dynamic
        shapes, so ``all``, ``dynamic`` and ``generate`` entries gate it; ``generate`` entries gate nothing else.
        A ``quantize`` entry gates the exports quantized with its reproducer's scheme (``quantize``), in every
        shape mode, and nothing else; a quantized export is gated by the other scopes as a float one is.
        """
        name = model_class if isinstance(model_class, str) else model_class.__name__
        if name not in self.models or self.backend not in (backend, "dynamo"):
            return False
        if self.scope == "quantize":
            return quantize is not None and quantize == self.quantize_scheme
        scopes = ("all", "dynamic", "generate") if generate else ("all", "dynamic" if dynamic else "static")
        return self.scope in scopes

    @property
    def quantize_scheme(self) -> str | None:
        """The scheme a ``quantize`` entry gates and re-runs with (its reproducer's ``export.quantize``)."""
        return (self.repro.export.get("quantize") if self.repro is not None else None) or None

    def modes(self) -> list[bool]:
        """The shape modes (``dynamic`` flags) a re-run of this entry exports in."""
        return (self.repro or Repro()).modes(self.scope)


@dataclass(frozen=True)
class Ledger:
    """Both lists, loaded together because ids are unique across them."""

    entries: tuple[LedgerEntry, ...]

    def by_id(self, entry_id: str) -> LedgerEntry:
        """The entry called ``entry_id``; ``KeyError`` when there is none."""
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        raise KeyError(entry_id)

    def gate(
        self, model_class: str | type, backend: str, dynamic: bool, list_name: str, generate: bool = False,
        quantize: str | None = None,
    ) -> LedgerEntry | None:
        """The first entry of ``list_name`` that applies to this export, or None to export normally."""
        return next(
            (
                e
                for e in self.entries
                if e.list_name == list_name and e.applies_to(model_class, backend, dynamic, generate, quantize)
            ),
            None,
        )

    def disable_optimize(self, model_class: str | type, dynamic: bool) -> LedgerEntry | None:
        """The entry turning the onnxscript optimizer off for this class, if any."""
        return self.gate(model_class, "onnx", dynamic, "ONNX_DISABLE_OPTIMIZE")

    def skip(self, model_class: str | type, backend: str, dynamic: bool, generate: bool = False,
             quantize: str | None = None) -> LedgerEntry | None:
        """The entry saying this class cannot be exported this way (``generate``: for generation; ``quantize``:
        quantized with that scheme), if any."""
        return self.gate(model_class, backend, dynamic, "EXPORT_SKIPS", generate, quantize)

    def by_class(self, list_name: str) -> dict[str, list[LedgerEntry]]:
        """Class name → entries of ``list_name`` naming it, in file order."""
        found: dict[str, list[LedgerEntry]] = {}
        for entry in self.entries:
            if entry.list_name == list_name:
                for model in entry.models:
                    found.setdefault(model, []).append(entry)
        return found
