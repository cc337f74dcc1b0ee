"""Which stage an export is in, as it runs: for progress displays and for naming the stage that failed.

The exporters time their stages (``StageClock``) but report nothing while a stage runs, and ExecuTorch's
``to_edge_transform_and_lower`` is one call of 15-75 s made of several steps. ``stage_events(report)``
wraps the library entry points that start each step (torch.export, run_decompositions, the backend
partition/preprocess, to_executorch, torch.onnx.export) for the duration of one export and calls
``report(name)`` as each starts; the tracker it yields remembers the innermost stage an exception left.

``interrupts_recorded()`` keeps a Ctrl-C that Python swallowed (below) for the next stage to raise.

``quiet_native_noise()`` drops the ExecuTorch runtime's ``cpuinfo`` diagnostics (five lines such as
``[cpuinfo_utils.cpp:87] Failed to open midr file`` per program load on x86), which the C++ runtime writes
straight to file descriptor 2, past Python's logging.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# (module, attribute path, stage name), outermost first. Missing modules (no ExecuTorch) are skipped.
_ENTRY_POINTS = (
    ("torch.export", "export", "torch.export"),
    ("torch.export", "ExportedProgram.run_decompositions", "run_decompositions"),
    ("torch.onnx", "export", "torch.onnx.export"),
    ("executorch.exir.program._program", "EdgeProgramManager.to_backend", "partition/preprocess"),
    ("executorch.exir.program._program", "EdgeProgramManager.to_executorch", "to_executorch"),
)


@dataclass
class StageTracker:
    """The stages started so far; ``failed`` is the innermost one an exception propagated out of.

    A stage entered after a failure means the caller handled that exception and went on (a retry:
    ``generation_export.export_component``), so ``failed`` is cleared then: it names the failure that ended
    the export, not one that was recovered from."""

    report: Callable[[str], None]
    started: list[str] = field(default_factory=list)
    active: list[str] = field(default_factory=list)
    failed: str | None = None

    @property
    def stopped_at(self) -> str | None:
        """Where an interrupted export was: the stage an exception left, else the innermost one running, else
        the last one started (a Ctrl-C Python swallowed is raised again as the next stage starts)."""
        return self.failed or next(reversed(self.active), None) or next(reversed(self.started), None)

    def enter(self, name: str) -> None:
        raise_if_interrupted()  # a Ctrl-C that Python swallowed while the last stage ran
        self.failed = None
        self.started.append(name)
        self.active.append(name)
        self.report(name)

    def leave(self, failed: bool) -> None:
        name = self.active.pop()
        if failed and self.failed is None:
            self.failed = name

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """A stage of the caller's own (building the model, validating, writing files)."""
        self.enter(name)
        try:
            yield
        except BaseException:
            self.leave(failed=True)
            raise
        self.leave(failed=False)


# Stages whose insides are not stages of their own: XNNPACK's preprocess re-exports every delegated
# subgraph (torch.export and run_decompositions, dozens of times), which is still "partition/preprocess".
_OPAQUE = frozenset({"torch.export", "run_decompositions", "partition/preprocess", "to_executorch"})


def _wrapped(function: Callable, name: str, tracker: StageTracker) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _OPAQUE.intersection(tracker.active):
            return function(*args, **kwargs)
        with tracker.stage(name):
            return function(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def stage_events(report: Callable[[str], None] = lambda _name: None) -> Iterator[StageTracker]:
    """Report every export stage as it starts, for the duration of the ``with`` block."""
    tracker = StageTracker(report)
    restore: list[tuple[Any, str, Any]] = []
    try:
        for module_name, path, name in _ENTRY_POINTS:
            if module_name.startswith("executorch") and module_name not in sys.modules:
                continue  # only an ExecuTorch export imports it; importing it here would cost ~3 s
            try:
                owner: Any = importlib.import_module(module_name)
            except ImportError:
                continue
            *parents, attribute = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = vars(owner).get(attribute, getattr(owner, attribute))
            restore.append((owner, attribute, original))
            setattr(owner, attribute, _wrapped(getattr(owner, attribute), name, tracker))
        yield tracker
    finally:
        for owner, attribute, original in reversed(restore):
            setattr(owner, attribute, original)


def preload_executorch() -> None:
    """Import ExecuTorch's program module so that ``stage_events`` can follow its lowering steps."""
    with contextlib.suppress(ImportError):
        importlib.import_module("executorch.exir.program._program")


# ── Ctrl-C that Python swallowed ──
# Python drops an exception raised inside a weakref callback or a ``__del__`` ("Exception ignored in: …"), and
# torch.export's tracer runs such callbacks all the time: a SIGINT that lands in one raises KeyboardInterrupt
# there, which is lost, and the export went on to publish its bundle (seen: 1 of 4 Ctrl-C's during a tiny
# Llama's ONNX export). ``interrupts_recorded`` remembers every SIGINT, so that the next stage, or publishing,
# raises it again (``raise_if_interrupted``).
_interrupted = threading.Event()


def _record_interrupt(signum: int, frame: Any) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_recorded() -> Iterator[None]:
    """Within the block, Ctrl-C raises KeyboardInterrupt as usual and is also remembered (main thread only)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _record_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _interrupted.clear()


def interrupted_behind(error: BaseException) -> bool:
    """Whether ``error`` is a Ctrl-C in disguise: a KeyboardInterrupt in its chain (torch.export re-raises one
    that lands in its tracer as ``RuntimeError``; seen in the Ctrl-C test under load), or a SIGINT recorded
    while it was raised. The flag is cleared, as ``raise_if_interrupted`` clears it."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            _interrupted.clear()
            return True
        seen = seen.__cause__ or seen.__context__
    if _interrupted.is_set():
        _interrupted.clear()
        return True
    return False


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C received since the last call, if Python swallowed it."""
    if _interrupted.is_set():
        _interrupted.clear()
        raise KeyboardInterrupt


# ── Native noise ──
NOISE = re.compile(r"^\[cpuinfo_utils\.cpp:\d+\]")
_PREFIX = "[cpuinfo_utils.cpp"


@contextlib.contextmanager
def quiet_native_noise(pattern: re.Pattern[str] = NOISE) -> Iterator[None]:
    """Drop lines matching ``pattern`` written to fd 2 inside the block; everything else passes through."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters)
        yield
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    reader = threading.Thread(target=_forward, args=(read_end, saved, pattern), daemon=True)
    reader.start()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError):
            sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the reader sees EOF and drains
        reader.join(timeout=5)
        os.close(saved)


def _forward(read_end: int, target: int, pattern: re.Pattern[str]) -> None:
    pending = ""
    try:
        while chunk := os.read(read_end, 4096):
            pending += chunk.decode(errors="replace")
            *lines, pending = pending.split("\n")
            kept = "".join(line + "\n" for line in lines if not pattern.match(line))
            if pending and not _PREFIX.startswith(pending[: len(_PREFIX)]) and not pattern.match(pending):
                kept, pending = kept + pending, ""  # a partial line that cannot be noise (a spinner frame)
            if kept:
                os.write(target, kept.encode())
        if pending and not pattern.match(pending):
            os.write(target, pending.encode())
    finally:
        os.close(read_end)
