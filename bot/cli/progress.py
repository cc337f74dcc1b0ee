"""Progress on stderr for long work: the stage running and its elapsed time, a bar for counted work.

On a terminal a live line (spinner, stage, elapsed) replaces itself and finished stages stay as short
``stage 3.1s`` lines; in a log (not a terminal) each stage is one plain line when it starts, so logs do
not fill with spinner frames or wrapped titles.
"""

from __future__ import annotations

import time
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


class CountedProgress:
    """A bar over steps whose count grows as work is planned: ``add(n)``, then ``step(text)`` per step.

    On a terminal: spinner, bar, done/total, the step running, elapsed. In a log: one line per step.
    """

    def __init__(self, console: Console, title: str):
        self.console, self.title = console, title
        self.total = self.done = 0
        self.progress: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> CountedProgress:
        if self.console.is_terminal:
            self.progress = Progress(
                SpinnerColumn(), TextColumn(self.title), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True,
            )  # fmt: skip
            self.progress.start()
            self.task = self.progress.add_task("", total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()

    def add(self, steps: int) -> None:
        self.total += steps
        if self.progress is not None:
            self.progress.update(self.task, total=self.total)

    def step(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=self.done, description=text)
        else:
            of = f"/{self.total}" if self.total else ""
            self.console.print(f"{self.title} {self.done + 1}{of}: {text}", highlight=False, soft_wrap=True)
        self.done += 1
