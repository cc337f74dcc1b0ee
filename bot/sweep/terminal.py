"""Terminal output of a sweep: rich tables of the summary and the failure groups, and the progress bar."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from bot.outcome import PASS, SKIPPED
from bot.sweep.reports import summarize, summary_statuses
from bot.sweep.tasks import Task
from bot.sweep.triage import triage


def summary_table(records: Sequence[Mapping[str, Any]], title: str) -> Table:
    rows = summarize(records)
    statuses = summary_statuses(rows)
    table = Table(title=title)
    for column in ("backend", "mode", "total", *statuses, "pass rate"):
        table.add_column(column, justify="left" if column in ("backend", "mode") else "right")
    for row in rows:
        table.add_row(
            row.backend, row.mode, str(row.total), *(str(row.counts[s]) for s in statuses), f"{row.pass_rate:.0%}"
        )
    return table


def triage_table(records: Sequence[Mapping[str, Any]], top: int) -> Table:
    groups = triage(records)
    table = Table(title=f"Top failure groups ({min(top, len(groups))} of {len(groups)})")
    table.add_column("count", justify="right")
    table.add_column("signature", overflow="fold")
    table.add_column("examples", overflow="fold")
    for group in groups[:top]:
        table.add_row(str(group.count), Text(group.signature), Text("\n".join(group.examples())))  # no markup
    return table


class SweepProgress:
    """The progress bar: exports in flight, done/total, elapsed time and counts by outcome."""

    def __init__(self, console: Console, total: int) -> None:
        self._progress = Progress(
            TextColumn("{task.description}", style="cyan"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[counts]}"),
            console=console,
        )
        self._total = total
        self._task = self._progress.add_task("starting", total=total, counts="")
        self._running: list[str] = []
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __enter__(self) -> SweepProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def _refresh(self) -> None:
        shown = ", ".join(self._running[:2]) + (f" +{len(self._running) - 2}" if len(self._running) > 2 else "")
        failed = sum(n for status, n in self._counts.items() if status not in (PASS, SKIPPED))
        counts = f"pass {self._counts[PASS]}  fail {failed}  skip {self._counts[SKIPPED]}"
        idle = "done" if sum(self._counts.values()) == self._total else "waiting"
        self._progress.update(self._task, description=shown or idle, counts=counts)

    def started(self, task: Task) -> None:
        with self._lock:
            self._running.append(task.label)
            self._refresh()

    def finished(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            label = Task(record["model"], record["backend"], record["mode"]).label
            if label in self._running:
                self._running.remove(label)
            self._counts[record["status"]] += 1
            self._refresh()
            self._progress.advance(self._task)


