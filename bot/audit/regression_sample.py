"""Which exports ``exportbot audit --candidate PKG==VER`` re-runs to look for regressions (pure: no I/O).

Why not only the fastest passing exports: a release breaks what is unusual, not what is cheap. The places
where a regression of PKG is likely are known to the project, so they come first, each with its reason:

1. **Ledger reproducers** whose backend stack contains PKG: the configs, input sizes and backend options
   that broke once (``[entry.repro]``) are where the same code is fragile. Exported as a user gets them,
   with the ledger applied; a mode the ledger skips outright says nothing and is left out.
2. **Exports that fired a workaround declaring** ``dependency = PKG`` in the committed sweep results: they
   run through code the project patched around PKG, which a release of PKG can change under it.
3. **Classes named in** ``--regression-classes FILE`` (one ``CLASS [BACKEND[/MODE]]`` a line).
4. **The fastest passing exports**, spread over (backend, mode), filling up to the budget.

The budget (``--regression-sample N``) bounds the whole sample, in that order of priority: with onnxscript,
sources 1-3 alone ran past six minutes and ``--regression-sample 0`` did not shrink them. What the budget
leaves out is listed in ``left_out`` with why, so the report says what was not checked. Sources 2 and 4
read sweep records made at exactly the current pins of the backend's stack and passing there: a record
made at other versions says nothing about today's pins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.audit.pins import BACKEND_STACK, normalize_name, same_release, stack_of
from bot.audit.plan import Export
from bot.outcome import PASS

DEFAULT_SAMPLE = 8
REPRODUCER, WORKAROUND_FIRED, LISTED, FASTEST = "ledger reproducer", "workaround", "listed", "fastest"


@dataclass(frozen=True)
class SampledExport:
    """One export of the regression sample and every reason it was chosen.

    ``repro`` is the ledger entry whose reproducer is exported, None for the class's default tiny model;
    ``args`` the extra ``exportbot export`` arguments that run it (``--repro ID``, and ``--no-optimize``
    where the entry's workaround is the optimizer turned off).
    """

    export: Export
    repro: str | None = None
    args: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, bool, tuple[str, ...]]:
        return (self.export.model, self.export.backend, self.export.dynamic, self.args)


@dataclass(frozen=True)
class ReproducerSource:
    """What the sample reads of a ledger entry (kept apart from ``LedgerEntry`` so tests build it plainly)."""

    entry_id: str
    backend: str
    models: tuple[str, ...]
    modes: tuple[bool, ...]  # the ``dynamic`` flags its reproducer runs in
    args: tuple[str, ...]  # ``exportbot export`` arguments running it with the workaround in place


@dataclass
class SampleChoice:
    """The sample, in run order, and what was considered but left out (so the report can say why)."""

    chosen: list[SampledExport] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def add(self, item: SampledExport) -> None:
        for index, old in enumerate(self.chosen):
            if old.key == item.key:
                reasons = old.reasons + tuple(r for r in item.reasons if r not in old.reasons)
                self.chosen[index] = SampledExport(old.export, old.repro, old.args, reasons)
                return
        self.chosen.append(item)

    def __contains__(self, key: object) -> bool:
        return any(item.key == key for item in self.chosen)


def _has(stack: Sequence[str], package: str) -> bool:
    return normalize_name(package) in {normalize_name(name) for name in stack}


def backends_of(package: str) -> list[str]:
    """Backends whose stack contains ``package``, in ``BACKEND_STACK`` order."""
    return [backend for backend, stack in BACKEND_STACK.items() if _has(stack, package)]


def _at_pins(record: Mapping[str, Any], pins: Mapping[str, str]) -> bool:
    """A passing record made at exactly the current pins of its backend's stack."""
    stack = BACKEND_STACK.get(str(record.get("backend")), [])
    if record.get("status") != PASS or not stack:
        return False
    versions = {normalize_name(n): v for n, v in (record.get("versions") or {}).items()}
    return all(same_release(str(versions.get(normalize_name(n))), pins.get(normalize_name(n), "")) for n in stack)


def _export_of(record: Mapping[str, Any]) -> Export:
    return Export(str(record.get("model")), str(record.get("backend")), record.get("mode") == "dynamic")


def parse_class_list(text: str, source: str = "--regression-classes") -> list[tuple[str, str | None, bool | None]]:
    """``CLASS [BACKEND[/MODE]]`` lines (``#`` comments, blank lines ignored) → (class, backend, dynamic).

    A missing backend means every backend whose stack contains the candidate; a missing mode, static.
    Raises ValueError naming ``source:line`` for a malformed line.
    """
    wanted = []
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or not words[0].isidentifier():
            raise ValueError(f"{source}:{number}: expected 'CLASS [BACKEND[/static|dynamic]]', got {raw.strip()!r}")
        backend, dynamic = None, None
        if len(words) == 2:
            backend, _, mode = words[1].partition("/")
            if backend not in BACKEND_STACK or mode not in ("", "static", "dynamic"):
                raise ValueError(f"{source}:{number}: {words[1]!r} is not BACKEND[/static|dynamic] "
                                 f"(backends: {', '.join(BACKEND_STACK)})")  # fmt: skip
            dynamic = mode == "dynamic" if mode else None
        wanted.append((words[0], backend, dynamic))
    return wanted


def choose_sample(
    package: str,
    pins: Mapping[str, str],
    records: Iterable[Mapping[str, Any]],
    *,
    reproducers: Sequence[ReproducerSource] = (),
    dependencies: Mapping[str, str | None] | None = None,
    listed: Sequence[tuple[str, str | None, bool | None]] = (),
    skipped: Callable[[str, str, bool], str | None] = lambda model, backend, dynamic: None,
    limit: int = DEFAULT_SAMPLE,
) -> SampleChoice:
    """The regression sample for ``package``, at most ``limit`` exports (see the module docstring for the order).

    ``dependencies``: workaround name → its declared ``dependency``; ``skipped(model, backend, dynamic)``:
    the id of a ledger entry that skips that export outright, else None.
    """
    records = list(records)
    dependencies = dependencies or {}
    choice = SampleChoice()
    for source in reproducers:
        if not _has(stack_of(source.backend), package):
            continue
        for model in source.models:
            for dynamic in source.modes:
                export = Export(model, source.backend, dynamic)
                gate = skipped(model, source.backend, dynamic)
                if gate is not None:
                    choice.left_out.append(f"{model} {export.backend}/{export.mode} (reproducer of {source.entry_id}): "
                                           f"skipped by ledger entry {gate}")  # fmt: skip
                    continue
                reason = f"{REPRODUCER} {source.entry_id} (stack has {package})"
                choice.add(SampledExport(export, source.entry_id, source.args, (reason,)))
    key = normalize_name(package)
    for record in records:
        fired = sorted(name for name in (record.get("workarounds_fired") or {})
                       if normalize_name(dependencies.get(name) or "") == key)  # fmt: skip
        if fired and _at_pins(record, pins):
            reason = f"{WORKAROUND_FIRED} {', '.join(fired)} (dependency = {package})"
            choice.add(SampledExport(_export_of(record), reasons=(reason,)))
    for model, backend, dynamic in listed:
        backends = [backend] if backend else backends_of(package)
        for name in backends:
            choice.add(SampledExport(Export(model, name, bool(dynamic)), reasons=(LISTED,)))
    over, choice.chosen = choice.chosen[limit:], choice.chosen[:limit]
    choice.left_out += [f"{item.export.model} {item.export.backend}/{item.export.mode} ({'; '.join(item.reasons)}): "
                        f"over the sample's budget of {limit} (--regression-sample)" for item in over]  # fmt: skip
    for export in fastest_passing(records, package, pins):
        if len(choice.chosen) >= limit:
            break
        if (export.model, export.backend, export.dynamic, ()) not in choice:
            choice.add(SampledExport(export, reasons=(FASTEST,)))
    return choice


def fastest_passing(records: Iterable[Mapping[str, Any]], package: str, pins: Mapping[str, str]) -> list[Export]:
    """Every export that passed at the pins through a backend whose stack has ``package``, one per (class,
    backend, mode), round-robin over (backend, mode) buckets in sorted order, fastest first inside each."""
    buckets: dict[tuple[str, str], list[tuple[float, str]]] = {}
    seen: set[Export] = set()
    for record in records:
        if not _has(BACKEND_STACK.get(str(record.get("backend")), []), package) or not _at_pins(record, pins):
            continue
        export = _export_of(record)
        if export in seen:
            continue
        seen.add(export)
        buckets.setdefault((export.backend, export.mode), []).append((float(record.get("seconds") or 0), export.model))
    queues = [sorted(items) for _, items in sorted(buckets.items())]
    keys = [bucket for bucket, _ in sorted(buckets.items())]
    ordered: list[Export] = []
    while any(queues):
        for (backend, mode), queue in zip(keys, queues):
            if queue:
                ordered.append(Export(queue.pop(0)[1], backend, mode == "dynamic"))
    return ordered
