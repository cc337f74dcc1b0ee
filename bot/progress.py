"""Progress on stderr for long work: the stage running and its elapsed time, a bar for counted work.

On a terminal a live line (spinner, stage, elapsed) replaces itself and finished stages stay as short
``stage 3.1s`` lines; in a log (not a terminal) each stage is one plain line when it starts, so logs do
not fill with spinner frames or wrapped titles.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


class StageDisplay:
    """``display(stage)`` as each stage starts; a context manager around the whole job."""

    def __init__(self, console: Console, label: str):
        self.console = console
        self.label = label
        self.stage: str | None = None
        self.stage_started = self.job_started = time.perf_counter()
        self.progress: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> StageDisplay:
        if self.console.is_terminal:
            self.progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                console=self.console, transient=True,
            )  # fmt: skip
            self.progress.start()
            self.task = self.progress.add_task(f"{self.label}: starting")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._finish_stage()
        if self.progress is not None:
            self.progress.stop()

    def __call__(self, stage: str) -> None:
        self._finish_stage()
        self.stage, self.stage_started = stage, time.perf_counter()
        if self.progress is not None:
            self.progress.reset(self.task, description=f"{self.label}: {stage}")
        else:
            total = self.stage_started - self.job_started
            self.console.print(f"[{total:6.1f}s] {self.label}: {stage}", highlight=False, soft_wrap=True)

    def _finish_stage(self) -> None:
        if self.stage is not None and self.progress is not None:
            seconds = time.perf_counter() - self.stage_started
            self.progress.console.print(f"  [dim]{self.stage} {seconds:.1f}s[/dim]", highlight=False)
        self.stage = None


@contextmanager
def counted(console: Console, title: str, total: int | None = None) -> Iterator[Callable[[str], None]]:
    """A progress bar of ``total`` steps (a pulsing one when unknown); ``step(text)`` starts the next step."""
    if not console.is_terminal:
        count = 0

        def plain(text: str) -> None:
            nonlocal count
            count += 1
            of = f"/{total}" if total else ""
            console.print(f"{title} {count}{of}: {text}", highlight=False, soft_wrap=True)

        yield plain
        return
    with Progress(
        SpinnerColumn(), TextColumn(f"{title}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task("", total=total)
        started = False

        def step(text: str) -> None:
            nonlocal started
            if started:
                progress.advance(task)
            started = True
            progress.update(task, description=text)

        yield step
