"""``exportbot sweep``: export every transformers model class, each in its own process, and keep the records.

A sweep is how the bot learns what exports today: which classes pass, which fail and how, and whether the
ledger's gates still describe reality. Three constraints shape this module:

* **Isolation.** One export can segfault, hang or eat all memory; that must become a record, never the end of
  the sweep. Every export therefore runs in a child process in its own process group, with an address-space
  cap (``RLIMIT_AS``) and a wall-clock timeout after which the whole group is killed.
* **Start-up cost.** Importing torch and transformers takes seconds, longer than a tiny Dynamo export. A warm
  worker (``worker_main``) imports everything once and forks one child per export (``os.fork``), so children
  start with the imports done. ``--no-fork`` starts a fresh interpreter per export instead (``spawned_child_main``),
  kept for comparison and for when fork-after-import misbehaves.
* **Long runs.** Records are appended to a JSON Lines file and flushed one by one, so an interrupted sweep is
  resumed (``--resume``) and CI shards (``--shard i/n``) are merged afterwards. The record format is documented
  in ``docs/sweep-results.md`` and versioned by its ``schema`` field.

The pure parts (sharding, selection, error normalisation, ledger classification, merging, summaries) come
first and take plain data; the process machinery and the click commands follow.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import faulthandler
import fnmatch
import functools
import hashlib
import importlib
import json
import os
import queue
import re
import resource
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from bot.errors import UsageProblem, report_errors
from bot.runner import (
    BACKENDS,
    BUILD_ERROR,
    FAILED,
    INCONCLUSIVE,
    MISMATCH,
    NONDETERMINISTIC,
    PASS,
    SKIPPED,
    ExportOutcome,
    ExportRequest,
    export_one,
)
from bot.verification import exporter_version

if TYPE_CHECKING:
    from exporters.ledger import Ledger, LedgerEntry

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # children inherit it: a sweep never reaches the hub

SCHEMA = 1  # bump when a field changes meaning or goes away; see docs/sweep-results.md
CRASHED = "crashed"  # the child died (signal, non-zero exit, no result) instead of reporting an outcome
TIMEOUT = "timeout"  # no outcome within --timeout; the child's process group was killed
STATUSES = (PASS, FAILED, MISMATCH, INCONCLUSIVE, NONDETERMINISTIC, BUILD_ERROR, CRASHED, TIMEOUT, SKIPPED)
MODES = ("static", "dynamic")
SAME_FAILURE, DIFFERENT_FAILURE, PASSES = "same-failure", "different-failure", "passes"
STDERR_TAIL_LINES = 20
TEST_CRASH_ENV = "EXPORTBOT_SWEEP_TEST_CRASH"  # comma-separated classes whose child raises SIGSEGV (tests)
TEST_HANG_ENV = "EXPORTBOT_SWEEP_TEST_HANG"  # comma-separated classes whose child sleeps forever (tests)
WORKER_START_TIMEOUT = 300.0  # seconds for a warm worker to import torch/transformers and warm up
WORKER_GRACE = 60.0  # beyond --timeout, how long a warm worker may take to answer before it is replaced

Key = tuple[str, str, str]  # (class, backend, mode): one record per key


# ── Tasks, sharding and selection (pure) ──
@dataclass(frozen=True, order=True)
class Task:
    """One export of the sweep: a class, a backend and a shape mode."""

    model: str
    backend: str
    mode: str

    @property
    def dynamic(self) -> bool:
        return self.mode == "dynamic"

    @property
    def key(self) -> Key:
        return (self.model, self.backend, self.mode)

    @property
    def label(self) -> str:
        return f"{self.model} {self.backend}/{self.mode}"

    @property
    def slug(self) -> str:
        return f"{self.model}-{self.backend}-{self.mode}"


def collect_class_names(mappings: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every class name in transformers' auto mappings, whose values are a name or a tuple of names."""
    names: set[str] = set()
    for mapping in mappings:
        for value in mapping.values():
            names.update(value if isinstance(value, (tuple, list)) else (value,))
    return names


def shard_index(name: str, count: int) -> int:
    """The 0-based shard of ``name``: a hash of the name alone, so that no filter, ordering or transformers
    upgrade can move a class between shards run with the same ``count``; shards never overlap or miss one."""
    return int.from_bytes(hashlib.sha1(name.encode()).digest()[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` with 1 <= i <= n (CI matrices count from one) as ``(i, n)``; ``ValueError`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--shard must look like i/n (for example 2/8), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text}: i must be between 1 and n")
    return index, count


def select_classes(
    classes: Sequence[str],
    patterns: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
    limit: int | None = None,
) -> list[str]:
    """Deduplicate, keep names matching any ``fnmatch`` pattern, keep this shard's, then the first ``limit``.

    The limit comes last so that ``--limit`` with ``--resume`` keeps pointing at the same classes.
    """
    selected = list(dict.fromkeys(classes))
    if patterns:
        selected = [name for name in selected if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    if shard is not None:
        index, count = shard
        selected = [name for name in selected if shard_index(name, count) == index - 1]
    return selected[:limit] if limit is not None else selected


def plan_tasks(classes: Iterable[str], backends: Iterable[str], modes: Iterable[str], done: set[Key]) -> list[Task]:
    """Every (class, backend, mode) not already in ``done``, class by class."""
    backends, modes = tuple(backends), tuple(modes)
    tasks = (Task(model, backend, mode) for model in classes for backend in backends for mode in modes)
    return [task for task in tasks if task.key not in done]


def parse_class_list(text: str) -> list[str]:
    """A ``--classes`` file: one class per line; blank lines and ``#`` comments (whole or trailing) ignored."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


# ── Records, merging and the ledger (pure) ──
def record_key(record: Mapping[str, Any]) -> Key:
    return (record["model"], record["backend"], record["mode"])


def merge_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per key, the last one seen winning (a rerun supersedes), sorted by key for stable diffs."""
    latest = {record_key(record): dict(record) for record in records}
    return [latest[key] for key in sorted(latest)]


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
    entry = ledger.skip(task.model, task.backend, task.dynamic)
    if entry is None and task.backend == "onnx":
        entry = ledger.disable_optimize(task.model, task.dynamic)
    return entry if entry is not None and {"all", entry.id} & set(ignore) else None


# ── Failure triage (pure) ──
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+~-]+){2,}/?")
_SYMBOL = re.compile(r"\b([su])\d+\b")  # torch's shape symbols: s0 (backed), u0 (unbacked)
_NUMBERED_NAME = re.compile(r"(?<=[A-Za-z])_\d+\b")  # FX node and module names: add_3, layer_0
_NUMBER = re.compile(r"(?<!\w)\d+(?:\.\d+)*(?:[eE][-+]?\d+)?(?!\w)")
_STEM = re.compile(r"^(.+?)(?:Model|For[A-Z]|LMHead|Encoder|Decoder|Backbone|PreTrained)")
SIGNATURE_CHARS = 200


def model_stem(model: str) -> str:
    """The family part of a class name (``Bert`` of ``BertForMaskedLM``), which errors repeat in class names."""
    match = _STEM.match(model)
    return match.group(1) if match else model


def normalize_error(text: str, model: str | None = None) -> str:
    """A signature for an error message: the same bug in two models, or at two shapes, gives the same string.

    Addresses become ``0x?``, paths ``<path>``, shape symbols ``s?``/``u?``, numbers ``N`` (so
    ``[2, 8, 64]`` becomes ``[N, N, N]`` and line numbers disappear), numbered node names ``add_N``, and names
    built on the model's family (``BertSelfAttention``, ``modeling_bert``) ``<Model>``/``<model>``. Only the
    first non-blank line is kept, whitespace collapsed: it names the failure; the rest is context.
    """
    normalized = _HEX.sub("0x?", text)
    normalized = _PATH.sub("<path>", normalized)
    if model:
        stem = model_stem(model)
        normalized = re.sub(rf"\b{re.escape(stem)}\w*", "<Model>", normalized)
        normalized = re.sub(rf"(?<![A-Za-z0-9]){re.escape(stem.lower())}(?![A-Za-z0-9])", "<model>", normalized)
    normalized = _SYMBOL.sub(r"\1?", normalized)
    normalized = _NUMBERED_NAME.sub("_N", normalized)
    normalized = _NUMBER.sub("N", normalized)
    line = next((line for line in normalized.splitlines() if line.strip()), "")
    return " ".join(line.split())[:SIGNATURE_CHARS]


def failure_signature(record: Mapping[str, Any]) -> str:
    """The triage group of a record that did not pass: its status, error type and normalised error."""
    status = record["status"]
    if status == CRASHED and record.get("signal"):
        return f"{CRASHED}: {_signal_name(record['signal'])}"
    if status in (CRASHED, TIMEOUT):
        return f"{status}: {normalize_error(record.get('error') or '')}"
    message = normalize_error(record.get("error") or "", record["model"])
    return ": ".join(part for part in (status, record.get("error_type"), message) if part)


@dataclass
class FailureGroup:
    """Records that failed the same way; ``keys`` name them, so a group points at examples to reproduce."""

    signature: str
    keys: list[Key] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.keys)

    def examples(self, limit: int = 3) -> list[str]:
        return [f"{model} ({backend}/{mode})" for model, backend, mode in sorted(self.keys)[:limit]]


def triage(records: Iterable[Mapping[str, Any]]) -> list[FailureGroup]:
    """Group every record that neither passed nor was skipped by ``failure_signature``, biggest group first."""
    groups: dict[str, FailureGroup] = {}
    for record in records:
        if record["status"] not in (PASS, SKIPPED):
            signature = failure_signature(record)
            groups.setdefault(signature, FailureGroup(signature)).keys.append(record_key(record))
    return sorted(groups.values(), key=lambda group: (-group.count, group.signature))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ── Summaries and Markdown (pure) ──
@dataclass
class SummaryRow:
    """Status counts of one backend and mode."""

    backend: str
    mode: str
    counts: Counter[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def pass_rate(self) -> float:
        """Passes over every record, skipped ones included: a skip is never a pass."""
        return self.counts[PASS] / self.total if self.total else 0.0


def summarize(records: Iterable[Mapping[str, Any]]) -> list[SummaryRow]:
    rows: dict[tuple[str, str], SummaryRow] = {}
    for record in records:
        backend, mode = record["backend"], record["mode"]
        rows.setdefault((backend, mode), SummaryRow(backend, mode, Counter())).counts[record["status"]] += 1
    return [rows[key] for key in sorted(rows)]


def _summary_statuses(rows: Sequence[SummaryRow]) -> list[str]:
    """The statuses that occur, in ``STATUSES`` order, then any unknown ones (a newer schema's)."""
    seen = {status for row in rows for status in row.counts}
    return [s for s in STATUSES if s in seen] + sorted(seen - set(STATUSES))


def _md_cell(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in rows]


def summary_markdown(records: Sequence[Mapping[str, Any]], top: int = 10) -> str:
    """The per backend/mode table and the biggest failure groups, for ``--summary-md`` and CI step summaries."""
    rows = summarize(records)
    statuses = _summary_statuses(rows)
    lines = [f"## Sweep summary ({len(records)} exports)", ""]
    lines += _md_table(
        ["backend", "mode", "total", *statuses, "pass rate"],
        ([r.backend, r.mode, r.total, *(r.counts[s] for s in statuses), f"{r.pass_rate:.0%}"] for r in rows),
    )
    groups = triage(records)[:top]
    if groups:
        lines += ["", f"### Top failure groups ({len(groups)} shown)", ""]
        lines += _md_table(
            ["count", "signature", "examples"], ([g.count, g.signature, ", ".join(g.examples())] for g in groups)
        )
    return "\n".join(lines) + "\n"


def first_line(text: str | None, limit: int = 160) -> str:
    line = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _versions_line(records: Iterable[Mapping[str, Any]]) -> str:
    seen: dict[str, set[str]] = {}
    for record in records:
        for package, version in (record.get("versions") or {}).items():
            seen.setdefault(package, set()).add(version)
    return " · ".join(f"{package} {', '.join(sorted(seen[package]))}" for package in sorted(seen)) or "unknown"


def _exporter_line(records: Sequence[Mapping[str, Any]]) -> str:
    """How many records each exporter hash made, most first; records from before the field are counted apart."""
    counts = Counter(record.get("exporter_version") or "" for record in records)
    parts = [f"`{code}` {n}" for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if code]
    if counts.get(""):
        parts.append(f"not recorded {counts['']}")
    return ", ".join(parts) or "none"


def coverage_markdown(records: Sequence[Mapping[str, Any]], command: str) -> str:
    """``docs/coverage.md``: generated from result files by ``command``, never edited by hand."""
    records = merge_records(records)
    lines = [
        f"<!-- Generated by `{command}`. Do not edit by hand: rerun the command. -->",
        "# Export coverage",
        "",
        f"Generated by `{command}` from {len(records)} records.",
        "",
        f"Versions: {_versions_line(records)}.",
        "",
        f"Exporter code (the hash of `exporters/*.py` that audits record): {_exporter_line(records)}. "
        "`scripts/check_generated.py` says how many records are older than the code now.",
        "",
        f"Statuses are those of `docs/sweep-results.md` (schema {SCHEMA}); only `pass` means the artifact was "
        "shown to match eager.",
        "",
    ]
    lines += summary_markdown(records).splitlines()
    lines += ["", "## Every export", ""]
    lines += _md_table(
        ["class", "backend", "mode", "status", "seconds", "workarounds fired", "ledger entry", "error"],
        (
            [
                r["model"],
                r["backend"],
                r["mode"],
                r["status"],
                f"{r.get('seconds') or 0:.1f}",
                ", ".join(f"{name}×{n}" for name, n in sorted((r.get("workarounds_fired") or {}).items())),
                (r.get("ledger_entry") or "") + (f" ({r['ledger_match']})" if r.get("ledger_match") else ""),
                first_line(r.get("error")),
            ]
            for r in records
        ),
    )
    return "\n".join(lines) + "\n"


# ── Result files (I/O) ──
class ResultsError(ValueError):
    """A results file that cannot be used: ``file:line: message``."""


def parse_record(line: str, where: str) -> dict[str, Any]:
    """One JSON Lines record, checked for this schema and its key fields."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ResultsError(f"{where}: not JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise ResultsError(f"{where}: a record must be a JSON object")
    if record.get("schema") != SCHEMA:
        raise ResultsError(f"{where}: schema {record.get('schema')!r}, this exportbot reads schema {SCHEMA}")
    missing = [name for name in ("model", "backend", "mode", "status") if not isinstance(record.get(name), str)]
    if missing:
        raise ResultsError(f"{where}: missing {', '.join(missing)}")
    return record


def read_results(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file, in file order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [parse_record(line, f"{path}:{number}") for number, line in enumerate(lines, 1) if line.strip()]


def repair_tail(path: Path) -> bool:
    """Drop a last line cut short by a killed sweep, so appending continues on a line of its own.

    Returns whether something was dropped. A complete last line that only lacks its newline gets one.
    """
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    start = data.rfind(b"\n") + 1
    try:
        json.loads(data[start:])
    except ValueError:
        with path.open("r+b") as handle:
            handle.truncate(start)
        return True
    with path.open("ab") as handle:
        handle.write(b"\n")
    return False


class ResultsWriter:
    """Appends records to the results file, one flushed line each, so a crash loses at most the one in flight."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def write_records(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace ``path`` with ``records`` (written to a temporary file first, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    temporary.replace(path)


# ── Class enumeration (imports transformers) ──
def enumerate_model_classes() -> list[str]:
    """Every model class named by a ``MODEL_*_MAPPING_NAMES`` auto mapping that ``transformers`` exports.

    Existence is checked with ``dir(transformers)``, which lists the lazy module's names without importing
    hundreds of modeling files (15 s); a class that is listed but cannot be imported shows up as a
    ``build-error`` record, which is the honest outcome for it.
    """
    import transformers
    from transformers.models.auto import modeling_auto

    mappings = [
        value
        for name, value in vars(modeling_auto).items()
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(value, Mapping)
    ]
    return sorted(collect_class_names(mappings) & set(dir(transformers)))


# ── Isolated exports: what runs in the child ──
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


def _preload(backends: Iterable[str]) -> None:
    """Import what every export needs, so a fork starts with it and a spawned child's start-up is measurable."""
    for module in _PRELOAD:
        importlib.import_module(module)
    for backend in backends:
        # A backend whose exporter cannot be imported is reported by each of its exports, as a failure.
        with contextlib.suppress(ImportError):
            importlib.import_module(f"exporters.exporter_{backend}")


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


def _child_body(task: ChildTask, spawned_at: float, preload: bool) -> NoReturn:
    """Run one export under the memory cap and write its outcome; always ends the process, never returns.

    ``preload`` (a spawned child) imports torch and the exporters here, under the cap and counted in
    ``startup_seconds``; a forked child inherited them.
    """
    code = 70  # EX_SOFTWARE: the export machinery itself broke; the traceback is in the log
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        faulthandler.enable()  # a segfault leaves a Python traceback in the log
        # A hang leaves one too: dumped at 90% of the supervisor's timeout, which started at the spawn.
        faulthandler.dump_traceback_later(max(0.1, task.timeout * 0.9 - (time.time() - spawned_at)))
        if task.memory_gb > 0:
            limit = int(task.memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _apply_test_hooks(task.model)
        if preload:
            _preload([task.backend])
        import torch

        torch.set_num_threads(task.threads)
        startup_seconds = round(time.time() - spawned_at, 3)
        request = ExportRequest(task.model, task.backend, task.dynamic, ignore_ledger=tuple(task.ignore_ledger))
        outcome = export_one(request)
        _write_json_atomically(
            Path(task.result_file), {"outcome": outcome.as_dict(), "startup_seconds": startup_seconds}
        )
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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _supervise(pid: int, timeout: float, started: float) -> ChildReport:
    """Wait for child ``pid`` (leader of its own process group) at most ``timeout`` seconds, then reap it.

    The group is killed before reaping in every case: on a timeout that ends the export, otherwise it ends
    whatever the export left behind; while the child is an unreaped zombie its group id cannot be reused.
    """
    pidfd = os.pidfd_open(pid)
    reaped = False
    try:
        exited, _, _ = select.select([pidfd], [], [], timeout)
        _kill_group(pid)
        _, status, usage = os.wait4(pid, 0)
        reaped = True
    finally:
        os.close(pidfd)
        if not reaped:  # interrupted (SIGTERM, Ctrl-C): take the export down too
            _kill_group(pid)
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
            _child_body(task, spawned_at, preload=False)
        finally:
            os._exit(70)
    with contextlib.suppress(OSError):  # the child may already have done it (or exited)
        os.setpgid(pid, pid)
    report = _supervise(pid, task.timeout, started)
    report.worker_pid = parent
    report.worker_rss_mb = _rss_mb(resource.getrusage(resource.RUSAGE_SELF))
    return report


def _warm_up() -> None:
    """Pay torch.export's one-time initialisation once, in the worker, instead of in every child.

    One thread only: libgomp's thread pool does not survive ``fork()``, so the worker never starts one;
    each child sets its own thread count.
    """
    import torch

    torch.set_num_threads(1)
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))


def _raise_system_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def worker_main() -> None:
    """The warm worker: import and warm up once, then fork one supervised child per task read from stdin.

    Protocol: JSON lines. The worker first writes ``{"ready": pid}``, then answers each ``ChildTask`` line
    with one ``ChildReport`` line. Its stdout is reserved for that protocol (anything else printed goes to
    stderr, i.e. the worker's log). It exits at end of input; SIGTERM ends it after killing its child.
    """
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    _preload(json.loads(sys.argv[1]))
    _warm_up()
    protocol.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        report = _fork_export(ChildTask(**json.loads(line)), protocol.fileno())
        protocol.write(json.dumps(asdict(report)) + "\n")


def spawned_child_main() -> None:
    """``--no-fork``: a fresh interpreter per export; argv is the task JSON, spawn time and supervisor pid."""
    task, spawned_at, parent = ChildTask(**json.loads(sys.argv[1])), float(sys.argv[2]), int(sys.argv[3])
    _die_with_parent(parent)
    _child_body(task, spawned_at, preload=True)


# ── Isolated exports: the sweep's side ──
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


_WORKER_CODE = "from bot.sweep import worker_main; worker_main()"
_SPAWN_CODE = "from bot.sweep import spawned_child_main; spawned_child_main()"


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
                [sys.executable, "-c", _WORKER_CODE, json.dumps(self._backends)],
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
            return _supervise(self._running, task.timeout, started)
        finally:
            self._running = None

    def close(self) -> None:
        if self._running is not None:
            _kill_group(self._running)


@dataclass
class SweepSettings:
    """How every export of one sweep is run."""

    backends: tuple[str, ...]
    jobs: int = 1
    timeout: float = 600.0
    memory_gb: float = 4.0
    fork: bool = True
    ignore_ledger: tuple[str, ...] = ()
    logs_dir: Path = Path("sweep-results.logs")

    @property
    def threads(self) -> int:
        """Torch threads per export: the CPUs shared out between parallel exports."""
        return max(1, len(os.sched_getaffinity(0)) // self.jobs)

    def log_file(self, task: Task) -> Path:
        return self.logs_dir / f"{task.slug}.log"

    def child_task(self, task: Task) -> ChildTask:
        return ChildTask(
            task.model, task.backend, task.dynamic, list(self.ignore_ledger), self.timeout, self.memory_gb,
            self.threads, str(self.log_file(task)), str(self.logs_dir / f"{task.slug}.result.json"),
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
    outcome["exporter_version"] = outcome.get("exporter_version") or exporter_version()
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
        return TIMEOUT, f"no outcome within {timeout:g} s; the export's process group was killed"
    if info.signal is not None:
        return CRASHED, f"killed by signal {info.signal} ({_signal_name(info.signal)})"
    if info.exit_code:
        return CRASHED, f"exited with code {info.exit_code} without an outcome"
    return CRASHED, "exited without writing an outcome"


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


# ── Terminal output ──
def summary_table(records: Sequence[Mapping[str, Any]], title: str) -> Table:
    rows = summarize(records)
    statuses = _summary_statuses(rows)
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


# ── Commands ──
@click.group("sweep", context_settings={"help_option_names": ["-h", "--help"]})
def sweep_group() -> None:
    """Export every transformers model class in isolated processes and keep the records.

    \b
    Subcommands:
      run       run a sweep (or a shard of one), writing sweep-results.jsonl
      merge     combine result files (shards) into one
      triage    group failures by normalised error
      coverage  regenerate docs/coverage.md from result files

    `run` is a subcommand rather than the group's default so that the other subcommands never parse its
    options.

    \b
    Examples:
      exportbot sweep run --backend dynamo --static --limit 50 --jobs 2
      exportbot sweep run --shard 3/8 --results shard-3.jsonl
      exportbot sweep run --resume                      # after an interruption
      exportbot sweep merge all.jsonl shard-*.jsonl
      exportbot sweep coverage all.jsonl --out docs/coverage.md
    """


def _load_ledger_for_sweep(ignore: Sequence[str]) -> Ledger:
    from exporters.ledger import LedgerError, load_ledger

    try:
        ledger = load_ledger()
    except LedgerError as error:
        raise UsageProblem(f"the ledger is invalid: {error.problems[0]} (see `exportbot lint`)") from None
    for entry_id in ignore:
        if entry_id != "all":
            try:
                ledger.by_id(entry_id)
            except KeyError:
                raise UsageProblem(f"--ignore-ledger {entry_id}: no ledger entry has that id") from None
    return ledger


def _classes_from(classes_file: Path | None) -> list[str]:
    if classes_file is None:
        return enumerate_model_classes()
    import transformers

    names = parse_class_list(classes_file.read_text(encoding="utf-8"))
    available = set(dir(transformers))
    unknown = [name for name in names if name not in available]
    if unknown:
        raise UsageProblem(f"{classes_file}: not transformers classes: {', '.join(unknown[:5])}"
                           + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))  # fmt: skip
    return names


def _done_keys(results: Path, resume: bool, overwrite: bool, console: Console) -> set[Key]:
    """The keys already recorded when resuming; refuses to clobber a results file by accident."""
    if not results.exists() or results.stat().st_size == 0:
        return set()
    if overwrite:
        results.unlink()
        return set()
    if not resume:
        raise UsageProblem(f"{results} exists: pass --resume to continue it or --overwrite to start again")
    if repair_tail(results):
        console.print(f"{results}: dropped a last line cut short by an interrupted sweep", style="yellow")
    try:
        return {record_key(record) for record in read_results(results)}
    except ResultsError as error:
        raise UsageProblem(str(error)) from None


def _read_all(paths: Iterable[Path]) -> list[dict[str, Any]]:
    try:
        return [record for path in paths for record in read_results(path)]
    except ResultsError as error:
        raise UsageProblem(str(error)) from None


def _publish_summary(records: Sequence[Mapping[str, Any]], summary_md: Path | None) -> None:
    markdown = summary_markdown(records)
    if summary_md is not None:
        summary_md.parent.mkdir(parents=True, exist_ok=True)
        summary_md.write_text(markdown, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with Path(step_summary).open("a", encoding="utf-8") as handle:
            handle.write(markdown)


@sweep_group.command("run")
@click.option("--backend", "backends", multiple=True, type=click.Choice(BACKENDS),
              help="Backend to export with (repeatable)  [default: all three]")
@click.option("--static", "modes", flag_value="static", help="Static shapes only.")
@click.option("--dynamic", "modes", flag_value="dynamic", help="Dynamic shapes only.")
@click.option("--both", "modes", flag_value="both", default=True, help="Static and dynamic  [default]")
@click.option("--classes", "classes_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Export these classes (one per line, # comments) instead of every auto-mapped class.")
@click.option("--match", "patterns", multiple=True, metavar="PATTERN",
              help="Keep classes matching this fnmatch pattern (repeatable, any may match), e.g. 'Bert*'.")
@click.option("--limit", type=click.IntRange(min=1), help="Keep the first N classes (after --match and --shard).")
@click.option("--shard", metavar="I/N",
              help="Run shard I of N (1-based); classes are assigned by a hash of their name, so shards "
                   "partition every selection.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Exports run in parallel.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds per export before its process group is killed (status timeout).")
@click.option("--memory-gb", type=click.FloatRange(min=0), default=4.0, show_default=True,
              help="Address-space cap per export (RLIMIT_AS), in GiB; 0 for none.")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=Path("sweep-results.jsonl"),
              show_default=True, help="JSON Lines file the records are appended to.")
@click.option("--logs", "logs_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the logs of exports that did not pass  [default: RESULTS with suffix .logs]")
@click.option("--resume", is_flag=True, help="Continue RESULTS: skip (class, backend, mode) already recorded.")
@click.option("--overwrite", is_flag=True, help="Delete an existing RESULTS first.")
@click.option("--no-fork", is_flag=True,
              help="Start a fresh interpreter per export instead of forking a warm worker (slower; for comparison).")
@click.option("--ignore-ledger", "ignore", multiple=True, metavar="ID|all",
              help="Export classes gated by this ledger entry anyway (repeatable) and record ledger_match.")
@click.option("--summary-md", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the summary as Markdown (appended to $GITHUB_STEP_SUMMARY when that is set).")
@report_errors
def run_command(backends: tuple[str, ...], modes: str, classes_file: Path | None, patterns: tuple[str, ...],
                limit: int | None, shard: str | None, jobs: int, timeout: float, memory_gb: float, results: Path,
                logs_dir: Path | None, resume: bool, overwrite: bool, no_fork: bool, ignore: tuple[str, ...],
                summary_md: Path | None) -> None:
    """Export every selected (class, backend, mode), each in its own process, appending one record per export.

    Each export runs in a child forked from a warm worker (one per job) that imported torch and transformers
    once. A crash or a hang becomes a record (crashed, timeout), and so does exceeding --memory-gb (usually a
    failed record with the allocation error, or a crash); the sweep goes on. Ledger-gated exports are
    recorded as skipped, never as passed. Exit code 0 once every export has a record, whatever
    its status; 1 if the sweep itself broke; 2 for bad input.
    """
    if resume and overwrite:
        raise UsageProblem("--resume and --overwrite contradict each other")
    try:
        shard_spec = parse_shard(shard) if shard is not None else None
    except ValueError as error:
        raise UsageProblem(str(error)) from None
    console = Console(stderr=True, markup=False)  # class names and paths are printed as they are
    ledger = _load_ledger_for_sweep(ignore)
    classes = select_classes(_classes_from(classes_file), patterns, shard_spec, limit)
    settings = SweepSettings(
        backends=backends or BACKENDS, jobs=jobs, timeout=timeout, memory_gb=memory_gb, fork=not no_fork,
        ignore_ledger=ignore, logs_dir=logs_dir or results.with_suffix(".logs"),
    )  # fmt: skip
    done = _done_keys(results, resume, overwrite, console)
    tasks = plan_tasks(classes, settings.backends, MODES if modes == "both" else (modes,), done)
    console.print(f"{len(classes)} classes, {len(tasks)} exports to run ({len(done)} already recorded), "
                  f"{jobs} job(s), {'warm fork' if settings.fork else 'fresh process'} per export")  # fmt: skip
    writer = ResultsWriter(results)
    try:
        with SweepProgress(console, len(tasks)) as progress:

            def record_done(record: dict[str, Any]) -> None:
                writer.write(record)
                progress.finished(record)

            run_sweep(tasks, settings, ledger, record_done, progress.started)
    except KeyboardInterrupt:
        console.print(f"interrupted; continue with --resume --results {results}")
        sys.exit(130)
    except SweepError as error:
        raise click.ClickException(str(error)) from None
    finally:
        writer.close()
    records = merge_records(_read_all([results]))
    out = Console(markup=False)
    out.print(summary_table(records, f"{results}: {len(records)} records"))
    if triage(records):
        out.print(triage_table(records, top=10))
    _publish_summary(records, summary_md)


@sweep_group.command("merge")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@report_errors
def merge_command(out: Path, files: tuple[Path, ...]) -> None:
    """Combine result FILES (shards, reruns) into OUT: one record per key, later files winning.

    Every record must be of this exportbot's schema; a file of another schema is refused, not converted.
    """
    records = merge_records(_read_all(files))
    write_records(out, records)
    click.echo(f"{out}: {len(records)} records from {len(files)} file(s)")


@sweep_group.command("triage")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Groups to show.")
@report_errors
def triage_command(files: tuple[Path, ...], top: int) -> None:
    """Group the failures in result FILES by normalised error signature, biggest group first."""
    records = merge_records(_read_all(files))
    if triage(records):
        Console(markup=False).print(triage_table(records, top))
    else:
        click.echo(f"no failures among {len(records)} records")


@sweep_group.command("coverage")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("docs/coverage.md"),
              show_default=True, help="Markdown file to (re)generate.")
@report_errors
def coverage_command(files: tuple[Path, ...], out: Path) -> None:
    """Regenerate the coverage table (class, backend, mode, status, seconds, workarounds fired, ledger entry,
    error) from result FILES; the file says which command made it, so nobody edits it by hand."""
    command = shlex.join(["exportbot", "sweep", "coverage", *map(str, files), "--out", str(out)])
    records = _read_all(files)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(coverage_markdown(records, command), encoding="utf-8")
    click.echo(f"{out}: {len(merge_records(records))} exports")
