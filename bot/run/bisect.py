"""``exportbot bisect TARGET --dependency PKG``: the first release of PKG in which TARGET is no longer needed.

TARGET is a ledger entry id or a registered workaround name. The audit says *whether* a workaround can go
at the current pins; bisect says *since when*, which is what ``fixed_in`` records ("onnxscript>=0.7.3")
and what a pin bump needs to know.

How it works:

* **Versions.** ``pip index versions PKG`` (through the same index and configuration as every install)
  lists the released versions; the candidates are those newer than PKG's pin in ``constraints.txt``.
  The pinned version is taken as failing: that is why the entry or workaround exists.
* **Search.** :func:`first_passing` (pure) probes the newest candidate first (one probe answers "not
  fixed in any release yet"), then bisects, assuming that once fixed it stays fixed. A version that
  cannot be installed together with the other pins is reported and skipped, never counted as a failure;
  the nearest untried version in the open range is probed instead. When skipped versions lie between the
  last failing and the first passing one, the fix may be in any of them: the result lists them.
* **Isolation.** Each candidate gets its own virtual environment, ``.exportbot-cache/venvs/PKG-VER``
  (bot.run.venvs): every other package stays at its pin, and nothing leaks in from the development
  environment. When the running environment holds every other pin exactly, the environment is layered on
  it (``PKG-VER-layered``: seconds to build, only PKG and what it moves installed); else a fresh full
  stack (a few GB and minutes each), about log2(n) + 1 of them for n candidates.
* **Probe.** The target's exports (a ledger entry's reproducer, ``--repro ID``, in each of its modes; a
  workaround's probes from the workaround index with ``--without NAME``) run once each in that
  environment, as ``exportbot audit`` runs them; every export must pass for the version to pass.
* **Versions exportbot cannot run with** (bot.audit.window) are ``unsupported``, skipped like uninstallable
  ones and never read as "still failing": a version below the measured window, or an export that failed
  on an import or attribute error inside exportbot's own code. Each says so in one line.

The result is written as ``fixed_in`` into a ledger entry (a minimal diff, ``exporters.ledger.set_fixed_in``);
for a workaround it is reported, for its removal PR to cite. The command around this search is
``bot.cli.bisect``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.pins import (
    PinFileError,
    constraints_with,
    find_pin_file,
    normalize_name,
    read_pins,
    same_release,
)
from bot.audit.plan import WORKAROUND, Subject, entry_subject
from bot.audit.releases import newer_versions
from bot.audit.verdict import error_excerpt
from bot.audit.window import own_incompatibility, unsupported_reason
from bot.audit.workaround_index import (
    WorkaroundIndexError,
    load_index,
    probe_subject,
)
from bot.config import DEFAULT_TIMEOUT
from bot.errors import UsageProblem
from bot.outcome import PASS
from bot.run.index import IndexFailure, IndexSession
from bot.run.reruns import RunExport, subprocess_runner
from bot.run.venvs import (
    DEFAULT_CACHE,
    REPO_ROOT,
    EnvironmentFailure,
    Uninstallable,
    ensure_venv,
    layering_base,
    project_dependencies,
)
from exporters.ledger import LedgerEntry, load_ledger

PASSED, FAILED, UNINSTALLABLE, UNSUPPORTED = "pass", "fail", "uninstallable", "unsupported"
SKIPPED_OUTCOMES = (UNINSTALLABLE, UNSUPPORTED)  # says nothing about the bug: skipped, never a failure


class BisectError(EnvironmentFailure):
    """The bisection cannot go on (no versions, the index unreachable, a broken environment)."""


# ── The search (pure) ──
@dataclass(frozen=True)
class Probe:
    """One version tried: ``PASSED``, ``FAILED``, ``UNINSTALLABLE`` or ``UNSUPPORTED`` (exportbot itself cannot
    run with it: bot.audit.window), and what was seen."""

    version: str
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class BisectResult:
    """``first_passing`` None: no candidate passes. ``untested``: skipped versions where the fix may be."""

    first_passing: str | None
    last_failing: str | None  # None: only the pinned version is known to fail
    probes: tuple[Probe, ...] = ()
    untested: tuple[str, ...] = ()

    @property
    def skipped(self) -> list[str]:
        return [p.version for p in self.probes if p.outcome in SKIPPED_OUTCOMES]


def first_passing(versions: Sequence[str], probe: Callable[[str], Probe]) -> BisectResult:
    """The first of ``versions`` (ascending, all newer than a failing baseline) for which ``probe`` passes.

    Probes the newest installable version first, then bisects the open range between the last failing
    and the first passing version; an uninstallable version is skipped and the nearest untried one in the
    range is probed instead. Assumes monotonicity (once passing, later versions pass).
    """
    low, high = -1, len(versions)  # indices: last known failing, first known passing
    skipped: set[int] = set()
    probes: list[Probe] = []
    while True:
        open_range = [i for i in range(low + 1, high) if i not in skipped]
        if not open_range:
            break
        if high == len(versions):
            index = open_range[-1]
        else:
            middle = (low + high) // 2
            index = min(open_range, key=lambda i: (abs(i - middle), i))
        result = probe(versions[index])
        probes.append(result)
        if result.outcome == PASSED:
            high = index
        elif result.outcome == FAILED:
            low = index
        elif result.outcome in SKIPPED_OUTCOMES:
            skipped.add(index)
        else:
            raise ValueError(f"probe of {versions[index]} answered {result.outcome!r}")
    return BisectResult(
        first_passing=versions[high] if high < len(versions) else None,
        last_failing=versions[low] if low >= 0 else None,
        probes=tuple(probes),
        untested=tuple(versions[i] for i in sorted(skipped) if low < i < high),
    )


# ── Versions and environments (I/O) ──
def released_versions(package: str, python: str | Path = sys.executable) -> list[str]:
    """Every released version of ``package`` the configured index has, through ``pip index versions``."""
    try:
        return IndexSession(Path(python), timeout=300).versions(package)
    except IndexFailure as error:
        raise BisectError(str(error)) from None


@dataclass
class ExportProbe:
    """Probe one version: build (or reuse) its environment and run the subject's exports there."""

    subject: Subject
    package: str
    constraints_text: str
    cache_dir: Path = DEFAULT_CACHE
    timeout: float = DEFAULT_TIMEOUT
    requirements: list[str] = field(default_factory=project_dependencies)
    base: Path | None = None  # a pinned environment to layer on (bot.run.venvs), None: fresh environments
    registry: Path | None = None  # the ledger the exports read (an entry's reproducer comes from it)
    seen: list[dict[str, Any]] = field(default_factory=list)  # every outcome record, for the report

    def runner(self, python: Path) -> RunExport:
        """An entry's reproducer without the entry (``--repro ID``); a workaround's probe without it."""
        where = {"python": python, "pythonpath": REPO_ROOT, "registry": self.registry}
        if self.subject.kind == WORKAROUND:
            return subprocess_runner(self.timeout, without=(self.subject.id,), **where)
        return subprocess_runner(self.timeout, repro=self.subject.id, budget_s=self.subject.budget_s, **where)

    def __call__(self, version: str) -> Probe:
        refused = unsupported_reason(self.package, version)
        if refused is not None:
            return Probe(version, UNSUPPORTED, refused)
        layered = "-layered" if self.base is not None else ""
        directory = self.cache_dir / f"{normalize_name(self.package)}-{version}{layered}"
        try:
            python = ensure_venv(directory, constraints_with(self.constraints_text, self.package, version),
                                 self.requirements, base=self.base)  # fmt: skip
        except Uninstallable as error:
            return Probe(version, UNINSTALLABLE, str(error))
        run = self.runner(python)
        for export in self.subject.exports:
            outcome = run(export.model, export.backend, export.dynamic)
            self.seen.append(outcome | {"probed_version": version})
            ran = (outcome.get("versions") or {}).get(self.package)
            if ran is not None and not same_release(ran, version):
                raise BisectError(
                    f"{directory} ran {self.package} {ran}, not {version}: delete it to rebuild"
                )
            ours = own_incompatibility(outcome, self.package, version)
            if ours is not None:
                return Probe(version, UNSUPPORTED, ours)
            if outcome.get("status") != PASS:
                where = f"{export.model} {export.backend}/{export.mode} {outcome.get('status')}"
                return Probe(version, FAILED, f"{where}: {error_excerpt(outcome, 200)}")
        return Probe(version, PASSED, f"{len(self.subject.exports)} export(s) pass")


# ── The search of a target (I/O) ──
def target_subject(
    target: str, registry_dir: Path, index_file: Path, probes: int
) -> tuple[Subject, LedgerEntry | None]:
    """The subject for a ledger id (with its entry) or a workaround name (with None)."""
    ledger = load_ledger(registry_dir)
    entry = next((e for e in ledger.entries if e.id == target), None)
    if entry is not None:
        return entry_subject(entry), entry
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    workaround = next((w for w in all_workarounds() if w.name == target), None)
    if workaround is None:
        raise UsageProblem(
            f"{target!r} is neither a ledger entry in {registry_dir} nor a registered workaround"
        )
    try:
        subject = probe_subject(workaround, load_index(index_file), probes)
    except WorkaroundIndexError as error:
        raise UsageProblem(str(error)) from None
    if not subject.exports:
        raise UsageProblem(f"{target!r} fired in no passing export of {index_file}: nothing to probe")
    return subject, None


def pinned_and_newer(package: str, registry_dir: Path, pin_file: Path | None) -> tuple[Path, str, list[str]]:
    """(the pin file, PKG's pinned version, the released versions newer than it)."""
    pin_path = pin_file or find_pin_file(registry_dir)
    try:
        pinned = read_pins(pin_path)[normalize_name(package)]
    except KeyError:
        raise UsageProblem(f"{pin_path} pins no version of {package}") from None
    except PinFileError as error:
        raise UsageProblem(str(error)) from None
    return pin_path, pinned, newer_versions(released_versions(package), pinned)


def probe_releases(subject: Subject, package: str, pin_path: Path, candidates: Sequence[str], cache_dir: Path | None,
                   timeout: float, registry_dir: Path,
                   announce: Callable[[Callable[[str], Probe]], Callable[[str], Probe]]) -> tuple[BisectResult, list]:  # fmt: skip
    """Probe ``candidates`` (each in its own environment) until the first passing one; (the result, every
    export outcome the probes saw). ``announce`` wraps each probe (the command prints a line per probe)."""
    text = pin_path.read_text(encoding="utf-8")
    probe = ExportProbe(subject, package, text, cache_dir or DEFAULT_CACHE, timeout,
                        base=layering_base(read_pins(pin_path), [package]), registry=registry_dir)  # fmt: skip
    return first_passing(candidates, announce(probe)), probe.seen


def bisect_json(target: str, subject: Subject, package: str, pinned: str, candidates: Sequence[str], *,
                dry_run: bool) -> dict[str, Any]:  # fmt: skip
    """``bisect --json`` before any probe: every key present (docs/audit-report.md, "exportbot bisect --json");
    the search fills ``first_passing`` … ``outcomes``, a fix ``fixed_in`` and, written to an entry, ``written_to``."""
    return {
        "target": target, "kind": subject.kind, "package": package, "pinned": pinned,
        "candidates": list(candidates), "dry_run": dry_run,
        "exports": [{"model": e.model, "backend": e.backend, "mode": e.mode} for e in subject.exports],
        "first_passing": None, "last_failing": None, "probes": [], "untested": [], "outcomes": [],
        "fixed_in": None, "written_to": None,
    }  # fmt: skip
