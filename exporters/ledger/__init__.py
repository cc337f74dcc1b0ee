"""The workaround ledger: model classes exported differently, kept as reviewed TOML under ``registry/``.

Two lists live there. ``ONNX_DISABLE_OPTIMIZE`` (``onnx_disable_optimize.toml``) names model classes that
are exported with the onnxscript optimizer off, each tied to one upstream bug. ``EXPORT_SKIPS``
(``export_skips.toml``) names model classes that cannot export as they are, each saying which model-side
change is needed. Keeping them as data instead of Python dicts lets the bot delete an entry with a minimal
diff once the upstream fix ships, and lets a reviewer see why every entry exists.

Reading uses ``tomllib`` (strict, standard types) and finds line numbers by scanning the text, because
every problem must be reported as ``file:line: message``. Editing keeps every byte outside the edited span:
value edits inside one entry go through tomlkit; removing or inserting whole lines is done on the text
because tomlkit files comments placed above an ``[[entry]]`` header under the *previous* table, so its own
delete would take a neighbour's comment along. Every edit is re-parsed and compared with the intended data
before it is written.
"""

from __future__ import annotations

from typing import Any

from exporters.ledger.edit import add_entry, remove_entry, remove_model, set_fixed_in, set_upstream
from exporters.ledger.entries import (
    BACKENDS,
    LIST_FILES,
    SCOPES,
    Ledger,
    LedgerEntry,
    LedgerError,
    LedgerProblem,
    Repro,
    UpstreamRef,
    parse_github_url,
)
from exporters.ledger.reading import check_ledger, default_ledger, default_registry_dir, load_ledger

# The code lives in one module per job, data flowing one way (none of them imports this module):
# ledger_entries (schema, records) → ledger_lines (line lookup) → ledger_validation (per-key checks)
# → ledger_reading (parse, cross-check, load) → ledger_edit (byte-preserving edits).

__all__ = [
    "BACKENDS",
    "EXPORT_SKIPS",
    "LIST_FILES",
    "ONNX_DISABLE_OPTIMIZE",
    "SCOPES",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "LedgerProblem",
    "Repro",
    "UpstreamRef",
    "add_entry",
    "check_ledger",
    "default_ledger",
    "default_registry_dir",
    "load_ledger",
    "parse_github_url",
    "remove_entry",
    "remove_model",
    "set_fixed_in",
    "set_upstream",
]


# Built from the default registry on first access by ``__getattr__`` below (annotated, never assigned here):
# class name → the entry disabling the optimizer, and class name → every skip entry naming the class.
ONNX_DISABLE_OPTIMIZE: dict[str, LedgerEntry]
EXPORT_SKIPS: dict[str, list[LedgerEntry]]


def __getattr__(name: str) -> Any:
    """Build ``ONNX_DISABLE_OPTIMIZE`` / ``EXPORT_SKIPS`` on first use, so importing never reads files."""
    if name == "ONNX_DISABLE_OPTIMIZE":
        # One entry per class; a class listed for dynamic and static separately maps to the first one,
        # so callers that care about the mode use ``default_ledger().disable_optimize``.
        return {model: found[0] for model, found in default_ledger().by_class(name).items()}
    if name == "EXPORT_SKIPS":
        return default_ledger().by_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
