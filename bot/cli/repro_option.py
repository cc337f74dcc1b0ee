"""Checks for ``exportbot export CLASS --repro ENTRY_ID``: the entry exists and the export is one of its re-runs.

Kept out of bot/cli/main.py so the export command gains one line; the audit's re-runs pass the same flag, so a
mistake here would show as a one-line usage error (exit 2), never as an export of something else.
"""

from __future__ import annotations

from bot.errors import UsageProblem
from exporters.ledger import LedgerError, default_registry_dir, load_ledger


def check_repro(entry_id: str, model: str, backend: str, dynamic: bool) -> None:
    """Raise :class:`UsageProblem` unless ``model`` through ``backend`` in this mode re-runs ``entry_id``."""
    registry = default_registry_dir()
    try:
        entry = load_ledger(registry).by_id(entry_id)
    except KeyError:
        raise UsageProblem(f"--repro: no ledger entry {entry_id!r} in {registry}") from None
    except LedgerError as error:
        raise UsageProblem(f"--repro: the ledger in {registry} is invalid: {error.problems[0]}") from None
    if model not in entry.models:
        raise UsageProblem(f"--repro {entry_id}: {model} is not one of its models ({', '.join(entry.models)})")
    if backend != entry.backend:
        raise UsageProblem(f"--repro {entry_id}: a {entry.backend} entry; pass --backend {entry.backend}")
    if dynamic not in entry.modes():
        wanted = "--dynamic" if entry.modes() == [True] else "--static"
        raise UsageProblem(f"--repro {entry_id}: it does not re-run in this shape mode; pass {wanted}")
