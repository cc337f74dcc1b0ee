"""Isolated exports, the child's side: the warm worker that forks one supervised child per export, and the
fresh-interpreter child of ``--no-fork``.

Every export runs in its own process group under an address-space cap (``RLIMIT_AS``) and a wall-clock
timeout after which the whole group is killed, so a segfault, a hang or a memory blow-up becomes a record.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib
import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from bot.audit.verification import exporter_version
from bot.outcome import ExportRequest
from bot.run.runner import export_one

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # children inherit it: a sweep never reaches the hub

TEST_CRASH_ENV = "EXPORTBOT_SWEEP_TEST_CRASH"  # comma-separated classes whose child raises SIGSEGV (tests)
TEST_HANG_ENV = "EXPORTBOT_SWEEP_TEST_HANG"  # comma-separated classes whose child sleeps forever (tests)


@dataclass
class ChildTask:
    """What a child process needs to run one export and say how it went; travels as JSON."""

    model: str
    backend: str
    dynamic: bool
    ignore_ledger: list[str]
    timeout: float
    memory_gb: float
    threads: int
    log_file: str
    result_file: str
    generate: bool = False  # a generation export (bot.run.generation), not a single-graph one
    without: list[str] = field(default_factory=list)  # workarounds left out (sweep run --without)
    quantize: str | None = None  # the scheme every export is quantized with (sweep run --quantize)


@dataclass
class ChildReport:
    """How one export process ended, as seen by the process that waited for it."""

    child_pid: int | None
    wait_status: int | None  # from os.wait4; None when there was no child to wait for
    timed_out: bool
    max_rss_kb: int
    wall_seconds: float
    worker_pid: int | None = None
    worker_rss_mb: float | None = None
    problem: str | None = None  # the sweep's machinery failed (a warm worker died), not the export
    exporters_loaded: str | None = None  # exporter_version() of the code the export ran (see preload)


def _rss_mb(usage: resource.struct_rusage) -> float:
    return round(usage.ru_maxrss / 1024, 1)  # Linux reports kilobytes


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this child if its supervisor dies, so no export outlives the sweep unwatched."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(70)


# What nearly every tiny-model export imports (measured: what forked children still imported without it).
_PRELOAD = (
    "torch", "transformers.modeling_utils", "transformers.modeling_layers", "transformers.masking_utils",
    "transformers.generation.utils", "transformers.processing_utils", "transformers.models.auto.modeling_auto",
    "exporters.ledger", "exporters.tiny",
)  # fmt: skip


_loaded_exporters: str | None = None  # exporter_version() when preload imported the exporters


def preload(backends: Iterable[str]) -> None:
    """Import what every export needs, so a fork starts with it and a spawned child's start-up is measurable.

    Also notes the hash of ``exporters/**/*.py`` as imported: a warm worker runs that code for hours, and a record
    must name it, not whatever the files hold when the record is written (an edit during a sweep).
    """
    global _loaded_exporters
    for module in _PRELOAD:
        importlib.import_module(module)
    for backend in backends:
        # A backend whose exporter cannot be imported is reported by each of its exports, as a failure.
        with contextlib.suppress(ImportError):
            importlib.import_module(f"exporters.{backend}.exporter")
    _loaded_exporters = exporter_version()


def _apply_test_hooks(model: str) -> None:
    """Let tests make one class's child crash or hang, to check that the sweep records it and goes on."""
    if model in os.environ.get(TEST_CRASH_ENV, "").split(","):
        os.kill(os.getpid(), signal.SIGSEGV)
    if model in os.environ.get(TEST_HANG_ENV, "").split(","):
        while True:
            time.sleep(60)


def _write_json_atomically(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data), encoding="utf-8")
    temporary.replace(path)  # a child killed mid-write leaves no half a result behind


def _dump_stack_before_the_deadline(seconds: float) -> None:
    """A hang leaves a Python stack in the log: dumped ``seconds`` from now (90% of the supervisor's timeout).

    By SIGALRM, which the kernel delivers to the main thread, where faulthandler's handler dumps the frames of
    the thread it interrupted. Not ``faulthandler.dump_traceback_later``: its watchdog thread reads the main
    thread's frames while they change, and in a deep recursion (sympy printing a long guard) that read
    segfaults; every SIGSEGV the sweeps recorded was at exactly 90% of the timeout (540 s of 600, 1,620 of
    1,800), a slow export reported as a crash.
    """
    faulthandler.register(signal.SIGALRM, all_threads=False)
    signal.setitimer(signal.ITIMER_REAL, max(0.1, seconds))


def _child_body(task: ChildTask, spawned_at: float, spawned: bool) -> NoReturn:
    """Run one export under the memory cap and write its outcome; always ends the process, never returns.

    A ``spawned`` child (``--no-fork``) imports torch and the exporters here, under the cap and counted in
    ``startup_seconds``; a forked child inherited them.
    """
    code = 70  # EX_SOFTWARE: the export machinery itself broke; the traceback is in the log
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        faulthandler.enable()  # a segfault leaves a Python traceback in the log
        _dump_stack_before_the_deadline(task.timeout * 0.9 - (time.time() - spawned_at))
        if task.memory_gb > 0:
            limit = int(task.memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _apply_test_hooks(task.model)
        if spawned:
            preload([task.backend])
        import torch

        torch.set_num_threads(task.threads)
        startup_seconds = round(time.time() - spawned_at, 3)
        if task.generate:
            from bot.run.generation import sweep_generation_outcome

            outcome = sweep_generation_outcome(task.model, task.backend, task.ignore_ledger, task.quantize)
        else:
            from exporters.export_options import ExportOptions
            from exporters.quantize.schemes import QuantizeConfig

            quantize = QuantizeConfig(task.quantize) if task.quantize is not None else None
            request = ExportRequest(task.model, task.backend, task.dynamic, without=tuple(task.without),
                                    ignore_ledger=tuple(task.ignore_ledger), options=ExportOptions(quantize=quantize))
            outcome = export_one(request)
        record = {**outcome.as_dict(), "exporter_version": _loaded_exporters}
        _write_json_atomically(Path(task.result_file), {"outcome": record, "startup_seconds": startup_seconds})
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect_stdio(log_file: Path) -> None:
    """The child's stdout and stderr go to its log; stdin is closed off so it cannot eat the worker's tasks."""
    log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def supervise(pid: int, timeout: float, started: float) -> ChildReport:
    """Wait for child ``pid`` (leader of its own process group) at most ``timeout`` seconds, then reap it.

    The group is killed before reaping in every case: on a timeout that ends the export, otherwise it ends
    whatever the export left behind; while the child is an unreaped zombie its group id cannot be reused.
    """
    pidfd = os.pidfd_open(pid)
    reaped = False
    try:
        exited, _, _ = select.select([pidfd], [], [], timeout)
        kill_group(pid)
        _, status, usage = os.wait4(pid, 0)
        reaped = True
    finally:
        os.close(pidfd)
        if not reaped:  # interrupted (SIGTERM, Ctrl-C): take the export down too
            kill_group(pid)
            os.waitpid(pid, 0)
    return ChildReport(pid, status, not exited, usage.ru_maxrss, round(time.perf_counter() - started, 3))


def _fork_export(task: ChildTask, protocol_fd: int) -> ChildReport:
    """In a warm worker: fork a child that runs ``task`` and supervise it."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent, spawned_at, started = os.getpid(), time.time(), time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            _die_with_parent(parent)
            os.close(protocol_fd)
            _redirect_stdio(Path(task.log_file))
            _child_body(task, spawned_at, spawned=False)
        finally:
            os._exit(70)
    with contextlib.suppress(OSError):  # the child may already have done it (or exited)
        os.setpgid(pid, pid)
    report = supervise(pid, task.timeout, started)
    report.worker_pid = parent
    report.worker_rss_mb = _rss_mb(resource.getrusage(resource.RUSAGE_SELF))
    report.exporters_loaded = _loaded_exporters
    return report


def _warm_up(backends: Iterable[str]) -> None:
    """Pay torch.export's one-time initialisation once, in the worker, instead of in every child.

    One thread only: libgomp's thread pool does not survive ``fork()``, so the worker never starts one;
    each child sets its own thread count.
    """
    import torch

    torch.set_num_threads(1)
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    if "executorch" in backends:
        build_xnnpack_pattern_graphs()


def build_xnnpack_pattern_graphs() -> None:
    """Build the graphs XNNPACK's pattern passes match against, so every forked child inherits them.

    Why: XNNPACK's ``preprocess`` runs ConvertToSDPAPass and ConvertToUpsampleBilinear2d on every lowering, and
    each pass first exports and lowers its own reference modules (``partition/graphs/sdpa.py`` and
    ``bilinear_2d.py`` in executorch 1.5.1, behind ``functools.lru_cache``): 2 SDPA and 4 bilinear graphs, about
    17 s and 14 s of wall time in a fresh process here. The cache lives for one process, so a child forked
    before it is filled pays that in every ExecuTorch export (benchmarks/bench_worker_warmup.py measures it).
    """
    with contextlib.suppress(ImportError):  # no executorch: its exports report that themselves
        from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

        sdpa.get_graphs()
        bilinear_2d.get_graphs_dict()


def _raise_system_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def worker_main() -> None:
    """The warm worker: import and warm up once, then fork one supervised child per task read from stdin.

    Protocol: JSON lines. The worker first writes ``{"ready": pid}``, then answers each ``ChildTask`` line
    with one ``ChildReport`` line. Its stdout is reserved for that protocol (anything else printed goes to
    stderr, i.e. the worker's log). It exits at end of input; SIGTERM ends it after killing its child. argv:
    the backends (JSON) and the sweep's pid, whose death kills the worker (and so its child) even by SIGKILL.
    """
    _die_with_parent(int(sys.argv[2]))
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    backends = json.loads(sys.argv[1])
    preload(backends)
    _warm_up(backends)
    protocol.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        report = _fork_export(ChildTask(**json.loads(line)), protocol.fileno())
        protocol.write(json.dumps(asdict(report)) + "\n")


def spawned_child_main() -> None:
    """``--no-fork``: a fresh interpreter per export; argv is the task JSON, spawn time and supervisor pid."""
    task, spawned_at, parent = ChildTask(**json.loads(sys.argv[1])), float(sys.argv[2]), int(sys.argv[3])
    _die_with_parent(parent)
    _child_body(task, spawned_at, spawned=True)


