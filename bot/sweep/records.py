"""Sweep records: the schema, the statuses a sweep adds, merging, and classification against the ledger.

Pure and record-based (dicts as read from JSON Lines), shared with the audit bot.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.outcome import BUILD_ERROR, FAILED, INCONCLUSIVE, MISMATCH, NONDETERMINISTIC, PASS, SKIPPED
from bot.sweep.tasks import Key, Task, keyed_mode

if TYPE_CHECKING:
    from exporters.ledger import Ledger, LedgerEntry

SCHEMA = 1  # bump when a field changes meaning or goes away; see docs/sweep-results.md
CRASHED = "crashed"  # the child died (signal, non-zero exit, no result) instead of reporting an outcome
TIMEOUT = "timeout"  # no outcome within --timeout; the child's process group was killed
STATUSES = (PASS, FAILED, MISMATCH, INCONCLUSIVE, NONDETERMINISTIC, BUILD_ERROR, CRASHED, TIMEOUT, SKIPPED)
SAME_FAILURE, DIFFERENT_FAILURE, PASSES = "same-failure", "different-failure", "passes"


# What an export that ran out of time reads as: the audit's re-run kills its child, the sweep its process group.
RERUN_TIMEOUT = "timed out after {seconds:g} s"
SWEEP_TIMEOUT = "no outcome within {seconds:g} s; the export's process group was killed"


def is_timeout_failure(failure: str) -> bool:
    """Whether a ledger entry's ``failure`` regex matches what a timed-out export reads as (status ``timeout``,
    or either text): a slowness entry, which needs its own ``budget_s`` (``exportbot lint``)."""
    texts = (TIMEOUT, RERUN_TIMEOUT.format(seconds=600), SWEEP_TIMEOUT.format(seconds=600))
    return any(re.search(failure, text) for text in texts)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended_without_outcome(signal_number: int | None, exit_code: int | None) -> str:
    """The one text for an export process that died before writing its outcome, whoever ran it.

    Why one: a ledger entry's ``failure`` is often copied from a sweep record; if the audit's re-run said the
    same crash another way (``exit -11`` for ``killed by signal 11 (SIGSEGV)``), the entry would read as
    ``changed`` the first time it was re-run. ``exit_code`` as ``subprocess`` reports it: negative for a signal.
    """
    if signal_number is None and exit_code is not None and exit_code < 0:
        signal_number = -exit_code
    if signal_number is not None:
        return f"killed by signal {signal_number} ({signal_name(signal_number)})"
    if exit_code:
        return f"exited with code {exit_code} without an outcome"
    return "exited without writing an outcome"


def record_key(record: Mapping[str, Any]) -> Key:
    return (record["model"], record["backend"], keyed_mode(record["mode"], record.get("quantize")))


def started_at(record: Mapping[str, Any]) -> datetime | None:
    """When the record's export started (``started_at``, ISO 8601; without an offset, UTC); None when the record
    has none (made before the field existed). ``ValueError`` for a value that is not an ISO 8601 time."""
    value = record.get("started_at")
    if value is None or value == "":
        return None
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"started_at {value!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def merge_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per key, the newest winning, sorted by key for stable diffs (docs/sweep-results.md, "Merging").

    Newest by ``started_at``. A record without one loses to any record with one; between records that started
    at the same instant, or that both lack the field, the one seen last wins, so the order of the input only
    breaks ties."""
    latest: dict[Key, tuple[datetime | None, dict[str, Any]]] = {}
    for record in records:
        key, moment = record_key(record), started_at(record)
        kept = latest.get(key)
        if kept is None or kept[0] is None or (moment is not None and moment >= kept[0]):
            latest[key] = (moment, dict(record))
    return [latest[key][1] for key in sorted(latest)]


def _error_texts(outcome: Mapping[str, Any]) -> list[str]:
    error, error_type = outcome.get("error"), outcome.get("error_type")
    texts = [error, f"{error_type}: {error}" if error and error_type else None]
    texts += [outcome.get("traceback_tail"), outcome.get("stderr_tail")]
    return [text for text in texts if text]


def classify_against_entry(outcome: Mapping[str, Any], entry: LedgerEntry) -> str:
    """How an export that a ledger entry would have gated (run anyway with ``--ignore-ledger``) went.

    ``"passes"`` when it passed (the entry may be obsolete), ``"same-failure"`` when the entry's ``failure``
    regex is found (``re.search``) in the error, the error prefixed with its type, the traceback tail or the
    crash's stderr tail (the entry still describes reality), ``"different-failure"`` otherwise. A skipped
    outcome never ran and cannot be classified. Shared with the audit bot, hence pure and record-based.
    """
    status = outcome["status"]
    if status == SKIPPED:
        raise ValueError(f"{outcome.get('model')}: a skipped export never ran; there is nothing to classify")
    if status == PASS:
        return PASSES
    pattern = re.compile(entry.failure)
    return SAME_FAILURE if any(pattern.search(text) for text in _error_texts(outcome)) else DIFFERENT_FAILURE


def ignored_entry(ledger: Ledger, task: Task, ignore: Iterable[str]) -> LedgerEntry | None:
    """The entry that would have changed this export (a skip, or ONNX's optimizer switch) if ``--ignore-ledger``
    had not named it (or ``all``); None when no entry applies or the one that applies is still honoured."""
    entry = ledger.skip(task.model, task.backend, task.dynamic, generate=task.generate, quantize=task.quantize)
    if entry is None and task.backend == "onnx" and not task.generate:
        entry = ledger.disable_optimize(task.model, task.dynamic)
    return entry if entry is not None and {"all", entry.id} & set(ignore) else None


