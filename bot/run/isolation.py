"""Isolated exports, the sweep's side: runners (warm fork worker or fresh interpreter), settings, the record
built from a child's report, and ``run_sweep``, which keeps ``--jobs`` runners busy."""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import queue
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bot.audit.verification import exporter_version
from bot.outcome import PASS, SKIPPED, ExportOutcome
from bot.run.worker import ChildReport, ChildTask, kill_group, supervise
from bot.sweep.records import (
    CRASHED,
    SCHEMA,
    SWEEP_TIMEOUT,
    TIMEOUT,
    classify_against_entry,
    ended_without_outcome,
    ignored_entry,
)
from bot.sweep.tasks import Task

if TYPE_CHECKING:
    from exporters.ledger import Ledger

STDERR_TAIL_LINES = 20
WORKER_START_TIMEOUT = 300.0  # seconds for a warm worker to import torch/transformers and warm up
WORKER_GRACE = 60.0  # beyond --timeout, how long a warm worker may take to answer before it is replaced


class Runner(Protocol):
    """Runs one ``ChildTask`` in an isolated process; ``close`` ends whatever it still runs."""

    name: str

    def run(self, task: ChildTask) -> ChildReport: ...

    def close(self) -> None: ...


class SweepError(RuntimeError):
    """The sweep's machinery cannot go on (a warm worker does not start); exports are not to blame."""


def _read_line(fd: int, timeout: float) -> bytes | None:
    """One protocol line from ``fd`` within ``timeout`` seconds; None on timeout or end of file."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        chunks.append(chunk)
        if chunk.endswith(b"\n"):  # request/response: a line is never followed by another
            return b"".join(chunks)


_WORKER_CODE = "from bot.run.worker import worker_main; worker_main()"
_SPAWN_CODE = "from bot.run.worker import spawned_child_main; spawned_child_main()"


class WarmWorker:
    """A ``worker_main`` process; replaced by a fresh one if it dies, so one bad export costs one record."""

    name = "fork"

    def __init__(self, backends: Sequence[str], log_file: Path) -> None:
        self._backends, self._log_file = list(backends), log_file
        self._closed = False
        self._start()

    def _start(self) -> None:
        with self._log_file.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, json.dumps(self._backends), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._ready = False

    def run(self, task: ChildTask) -> ChildReport:
        if self._closed:
            raise SweepError("the sweep is shutting down")
        if self._process.poll() is not None:
            self._start()
        stdout = self._process.stdout
        stdin = self._process.stdin
        assert stdout is not None and stdin is not None
        if not self._ready:
            if _read_line(stdout.fileno(), WORKER_START_TIMEOUT) is None:
                self._stop()
                raise SweepError(f"a warm worker did not start; see {self._log_file}")
            self._ready = True
        started = time.perf_counter()
        try:
            stdin.write(json.dumps(asdict(task)).encode() + b"\n")
            stdin.flush()
            line = _read_line(stdout.fileno(), task.timeout + WORKER_GRACE)
        except BrokenPipeError:
            line = None
        if line is not None:
            return ChildReport(**json.loads(line))
        pid = self._process.pid
        self._stop()
        return ChildReport(
            None, None, False, 0, round(time.perf_counter() - started, 3), worker_pid=pid,
            problem=f"warm worker {pid} died or stopped answering (see {self._log_file})",
        )  # fmt: skip

    def _stop(self) -> None:
        """SIGTERM lets the worker kill its child's group first; SIGKILL if it does not go within 10 s."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()  # end of input: an idle worker exits by itself
        try:
            self._process.wait(1)
        except subprocess.TimeoutExpired:
            self._stop()


class SpawnRunner:
    """``--no-fork``: a fresh ``python`` per export (posix_spawn, its own process group, log as stdout/err)."""

    name = "spawn"

    def __init__(self) -> None:
        self._running: int | None = None

    def run(self, task: ChildTask) -> ChildReport:
        spawned_at, started = time.time(), time.perf_counter()
        argv = [sys.executable, "-c", _SPAWN_CODE, json.dumps(asdict(task)), repr(spawned_at), str(os.getpid())]
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, task.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        self._running = os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setpgroup=0)
        try:
            return supervise(self._running, task.timeout, started)
        finally:
            self._running = None

    def close(self) -> None:
        if self._running is not None:
            kill_group(self._running)


@dataclass
class SweepSettings:
    """How every export of one sweep is run."""

    backends: tuple[str, ...]
    jobs: int = 1
    timeout: float = 600.0
    memory_gb: float = 4.0
    fork: bool = True
    without: tuple[str, ...] = ()  # workarounds left out of every export
    ignore_ledger: tuple[str, ...] = ()
    logs_dir: Path = Path("sweep-results.logs")
    quantize: str | None = None  # every export quantized with this scheme (sweep run --quantize)

    @property
    def threads(self) -> int:
        """Torch threads per export: the CPUs shared out between parallel exports."""
        return max(1, len(os.sched_getaffinity(0)) // self.jobs)

    def log_file(self, task: Task) -> Path:
        return self.logs_dir / f"{task.slug}.log"

    def child_task(self, task: Task) -> ChildTask:
        return ChildTask(
            task.model, task.backend, task.dynamic, list(self.ignore_ledger), self.timeout, self.memory_gb,
            self.threads, str(self.log_file(task)), str(self.logs_dir / f"{task.slug}.result.json"), task.generate,
            list(self.without), task.quantize,
        )  # fmt: skip

    def runner(self, number: int) -> Runner:
        if self.fork:
            return WarmWorker(self.backends, self.logs_dir / f"worker-{number}.log")
        return SpawnRunner()


@dataclass
class SweepInfo:
    """What a sweep adds to an ``ExportOutcome`` in its record (see docs/sweep-results.md)."""

    mode: str
    runner: str
    started_at: str
    wall_seconds: float
    worker_pid: int | None
    child_pid: int | None
    peak_rss_mb: float | None
    worker_rss_mb: float | None
    startup_seconds: float | None = None
    signal: int | None = None
    exit_code: int | None = None
    log_file: str | None = None
    stderr_tail: str | None = None
    ledger_match: str | None = None
    quantize: str | None = None  # the --quantize scheme; part of the key (docs/sweep-results.md)


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str | None:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - (1 << 16)))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-lines:]) or None


def _take_child_result(path: Path) -> dict[str, Any] | None:
    """The outcome a child wrote, removing the file; None if it wrote none (or an unreadable one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)
    return data if isinstance(data, dict) and isinstance(data.get("outcome"), dict) else None


@functools.cache
def _backend_versions(backend: str) -> dict[str, str]:
    from exporters.base import package_versions

    return package_versions(backend)


def build_record(
    task: Task, report: ChildReport, runner: str, started_at: str, settings: SweepSettings, ledger: Ledger
) -> dict[str, Any]:
    """The JSON Lines record of one export: its outcome, or a crash/timeout outcome made from the report."""
    child_task = settings.child_task(task)
    result = _take_child_result(Path(child_task.result_file))
    info = SweepInfo(
        task.mode, runner, started_at, report.wall_seconds, report.worker_pid, report.child_pid,
        round(report.max_rss_kb / 1024, 1) if report.child_pid else None, report.worker_rss_mb,
        quantize=task.quantize,
    )  # fmt: skip
    if report.wait_status is not None:
        if os.WIFSIGNALED(report.wait_status):
            info.signal = os.WTERMSIG(report.wait_status)
        else:
            info.exit_code = os.WEXITSTATUS(report.wait_status)
    entry = ignored_entry(ledger, task, settings.ignore_ledger)
    if result is not None and not report.timed_out and info.exit_code == 0:
        outcome = result["outcome"]
        info.startup_seconds = result.get("startup_seconds")
    else:
        status, error = _abnormal_end(report, info, settings.timeout)
        outcome = ExportOutcome(task.model, task.backend, task.dynamic, status, report.wall_seconds, error=error).as_dict()
        info.stderr_tail = _tail(settings.log_file(task))
    outcome["versions"] = outcome.get("versions") or _backend_versions(task.backend)
    outcome["exporter_version"] = outcome.get("exporter_version") or report.exporters_loaded or exporter_version()
    if entry is not None:  # the record names the entry its ledger_match is about
        outcome["ledger_entry"], outcome["ledger_reason"] = entry.id, entry.reason
        info.ledger_match = classify_against_entry({**outcome, "stderr_tail": info.stderr_tail}, entry)
    if outcome["status"] in (PASS, SKIPPED):
        settings.log_file(task).unlink(missing_ok=True)  # nothing to look into; keeps the logs folder small
    else:
        info.log_file = str(settings.log_file(task))
    return {"schema": SCHEMA, **outcome, **asdict(info)}


def _abnormal_end(report: ChildReport, info: SweepInfo, timeout: float) -> tuple[str, str]:
    """Status and error text of an export that ended without an outcome."""
    if report.problem:
        return CRASHED, report.problem
    if report.timed_out:
        return TIMEOUT, SWEEP_TIMEOUT.format(seconds=timeout)
    return CRASHED, ended_without_outcome(info.signal, info.exit_code)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def run_sweep(
    tasks: Sequence[Task],
    settings: SweepSettings,
    ledger: Ledger,
    on_record: Callable[[dict[str, Any]], None],
    on_start: Callable[[Task], None] = lambda _task: None,
) -> None:
    """Run ``tasks`` on ``settings.jobs`` isolated runners, handing each record to ``on_record`` as it ends.

    ``on_record`` runs in the calling thread, in completion order. On an exception (Ctrl-C included) every
    runner is closed, which kills the exports in flight; their keys have no record, so ``--resume`` redoes them.
    """
    if not tasks:
        return
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    runners = [settings.runner(number) for number in range(min(settings.jobs, len(tasks)))]
    free: queue.Queue[Runner] = queue.Queue()
    for runner in runners:
        free.put(runner)

    def execute(task: Task) -> dict[str, Any]:
        runner = free.get()
        try:
            on_start(task)
            started_at = _now()
            report = runner.run(settings.child_task(task))
            return build_record(task, report, runner.name, started_at, settings, ledger)
        finally:
            free.put(runner)

    pool = ThreadPoolExecutor(len(runners), thread_name_prefix="sweep")
    try:
        for future in as_completed([pool.submit(execute, task) for task in tasks]):
            on_record(future.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for runner in runners:
            runner.close()


