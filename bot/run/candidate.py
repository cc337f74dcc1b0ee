"""``exportbot audit --candidate PKG==VER``: try a release before bumping its pin, in both directions.

A maintainer wants two answers before moving a pin: which ledger entries and workarounds the release
makes unnecessary, and which exports that work today it breaks. Both come from the same isolated
environment (bot.run.venvs), so the development environment is never touched:

* **Environment.** ``.exportbot-cache/venvs/candidate-PKG-VER``: layered on the running (pinned)
  environment when that holds every other pin exactly (seconds to build for a pure-Python package), else
  a fresh one from ``constraints.txt`` with ``PKG==VER`` (minutes). It is checked to really import VER,
  and to import this repository's exporters for PKG's backends. A release that cannot be installed with
  the other pins, that lies outside the measured window (bot.audit.window, docs/version-window.md) or with
  which the exporters cannot be imported ends the audit with that reason, in one line (exit 1).
* **Removals.** The audit re-runs every due entry and workaround (those whose backend stack has PKG)
  in that environment; ``removable`` there means "removable once the pin moves".
* **Regressions.** A sample of exports that work at the pins is exported again with the candidate;
  bot.audit.regression_sample chooses it, where regressions are likely first: every ledger reproducer whose
  stack has PKG, every single-graph export of the sweep results (``--regression-results``, default the
  committed record set: the shard files of ``sweeps/catalogue`` and ``sweeps/generation``) that fired a
  workaround declaring ``dependency = PKG``, the classes of ``--regression-classes FILE``, then the fastest
  passing exports up to ``--regression-sample`` (default 8). Each row says why it was chosen. An export
  that fails with the candidate is exported once more at the pins: failing there too means the record or
  reproducer is stale (``fails at the pins too``), not a regression.

Nothing of a candidate audit is proposed for removal by the shrink PR (``exportbot pr`` refuses such a
report: the pins have not moved yet; ``exportbot watch`` carries the removals on the bump PR that moves the
pin). With ``--update-verification`` its re-runs are recorded in ``verified.toml`` at the candidate's stack,
each record marked ``candidate = "PKG==VER"`` (recorded at a stack that is not the pinned one).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.pins import constraints_with, normalize_name, same_release
from bot.audit.plan import Export, parse_candidate
from bot.audit.regression_sample import (
    ReproducerSource,
    SampleChoice,
    SampledExport,
    backends_of,
    choose_sample,
    parse_class_list,
)
from bot.audit.verdict import error_excerpt, evidence_of
from bot.audit.window import own_incompatibility, unsupported_reason
from bot.errors import UsageProblem
from bot.outcome import PASS
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
from bot.sweep.results import ResultsError, default_results, read_results
from exporters.ledger import Ledger, default_registry_dir, load_ledger

RunSampled = Callable[[SampledExport], dict[str, Any]]

REGRESSION, STALE, HOLDS, UNSUPPORTED = "regression", "fails at the pins too", "pass", "unsupported"


@dataclass(frozen=True)
class CandidateEnvironment:
    """Where the candidate runs; ``python`` is None when it could not be installed (``problem`` says why).

    ``specs``: every (package, version) it moves, one for ``--candidate PKG==VER``, several for a coupled
    group (``torch==2.14.0,executorch==1.6.0``, as ``exportbot watch`` tries one)."""

    specs: tuple[tuple[str, str], ...]
    python: Path | None
    layered: bool
    problem: str | None = None

    @property
    def spec(self) -> str:
        return ",".join(f"{package}=={version}" for package, version in self.specs)

    @property
    def packages(self) -> list[str]:
        return [package for package, _ in self.specs]

    def runner(self, timeout: float, **leave_out: Any) -> RunExport:
        """Exports in the candidate's environment, leaving out what :func:`bot.run.reruns.subprocess_runner` says
        (``without``, ``plain``, ``repro``, ``registry``, ``budget_s``)."""
        assert self.python is not None, "no environment: check .problem first"
        return subprocess_runner(timeout, python=self.python, pythonpath=REPO_ROOT, **leave_out)


def prepare_environment(
    candidate: str, pin_text: str, pins: Mapping[str, str], cache_dir: Path = DEFAULT_CACHE
) -> CandidateEnvironment:
    """Build (or reuse) the candidate's environment; an uninstallable release is a result, not an error.
    Raises :class:`bot.run.venvs.EnvironmentFailure` when no environment can be built at all (no index)."""
    specs = tuple(parse_candidate(candidate))
    base = layering_base(pins, [package for package, _ in specs])
    layered = base is not None
    for package, version in specs:
        refused = unsupported_reason(package, version)
        if refused is not None:
            return CandidateEnvironment(specs, None, layered, f"is not supported: {refused}")
    name = "candidate-" + "+".join(f"{normalize_name(p)}-{v}" for p, v in specs) + ("-layered" if layered else "")
    constraints = pin_text
    for package, version in specs:
        constraints = constraints_with(constraints, package, version)
    try:
        python = ensure_venv(cache_dir / name, constraints, project_dependencies(), base=base)
    except Uninstallable as refused:
        return CandidateEnvironment(specs, None, layered, f"cannot be installed beside the other pins: {refused}")
    found = subprocess.run(
        [str(python), "-c", "import sys\nfrom importlib.metadata import version\nfor p in sys.argv[1:]: print(version(p))",
         *(package for package, _ in specs)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    installed = found.stdout.split()
    wrong = [f"{p} {i}" for (p, v), i in zip(specs, [*installed, *[""] * len(specs)]) if not same_release(i, v)]
    if found.returncode != 0 or wrong:
        raise EnvironmentFailure(
            f"{cache_dir / name} imports {', '.join(wrong) or found.stderr.strip()[-200:]}, not {candidate}: "
            "delete it to rebuild"
        )
    ours = import_problem(python, specs)
    if ours is not None:
        return CandidateEnvironment(specs, None, layered, f"is not supported: {ours}")
    return CandidateEnvironment(specs, python, layered)


_EXPORTER_MODULES = {"dynamo": "exporters.dynamo.exporter", "onnx": "exporters.onnx.exporter",
                     "executorch": "exporters.executorch.exporter"}  # fmt: skip


def import_problem(python: Path, specs: Sequence[tuple[str, str]]) -> str | None:
    """One line when this repository's exporters for the moved packages' backends cannot even be imported in
    the candidate's environment (bot.audit.window.own_incompatibility), so no export there says anything of it."""
    backends = dict.fromkeys(backend for package, _ in specs for backend in backends_of(package))
    modules = [_EXPORTER_MODULES[backend] for backend in backends]
    done = subprocess.run(
        [str(python), "-c", "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)", *modules],
        capture_output=True, text=True, timeout=600, env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    error_type, _, error = (lines[-1] if lines else "").partition(": ")
    outcome = {"status": "failed", "error_type": error_type.rsplit(".", 1)[-1], "error": error,
               "traceback_tail": done.stderr[-2000:]}  # fmt: skip
    return own_incompatibility(outcome, ", ".join(f"{package} {version}" for package, version in specs))


@dataclass
class RegressionRow:
    """One sampled export: how it ran with the candidate and, when that failed, at the pins again."""

    sampled: SampledExport
    candidate: dict[str, Any]
    ran_with: str | None  # the candidate package's version the export process really imported
    pinned: dict[str, Any] | None = None
    unsupported: str | None = None  # bot.audit.window.own_incompatibility: exportbot's failure, not the release's

    @property
    def export(self) -> Export:
        return self.sampled.export

    @property
    def result(self) -> str:
        if self.candidate.get("status") == PASS:
            return HOLDS
        if self.unsupported is not None:
            return UNSUPPORTED
        return STALE if self.pinned is not None and self.pinned.get("status") != PASS else REGRESSION

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.export.model, "backend": self.export.backend, "mode": self.export.mode,
            "repro": self.sampled.repro, "why": list(self.sampled.reasons),
            "result": self.result, "ran_with": self.ran_with, "candidate": self.candidate, "pinned": self.pinned,
            "unsupported": self.unsupported,
        }  # fmt: skip


def check_regressions(
    sample: Sequence[SampledExport],
    packages: Sequence[str],
    with_candidate: RunSampled,
    at_pins: RunSampled,
    progress: Callable[[Export], None] = lambda export: None,
) -> list[RegressionRow]:
    """Export each sampled item with the candidate (moving ``packages``); re-check a failure at the pins."""
    rows = []
    for item in sample:
        progress(item.export)
        outcome = with_candidate(item)
        versions = {normalize_name(k): v for k, v in (outcome.get("versions") or {}).items()}
        ran = [(package, versions.get(normalize_name(package))) for package in packages]
        ran_with = ran[0][1] if len(ran) == 1 else ", ".join(f"{p} {v or '(unknown)'}" for p, v in ran)
        row = RegressionRow(item, evidence_of(outcome), ran_with)
        row.unsupported = own_incompatibility(outcome, ", ".join(f"{p} {v or '(unknown)'}" for p, v in ran))
        if row.candidate.get("status") != PASS and row.unsupported is None:
            row.pinned = evidence_of(at_pins(item))
        rows.append(row)
    return rows


def sampled_runner(make: Callable[[Sequence[str]], RunExport]) -> RunSampled:
    """Run a sampled item with a runner made for its extra ``exportbot export`` arguments (``--repro ID``)."""

    def run(item: SampledExport) -> dict[str, Any]:
        return make(item.args)(item.export.model, item.export.backend, item.export.dynamic)

    return run


@dataclass
class CandidateCheck:
    """The ``candidate_check`` block of the audit report (docs/audit-report.md)."""

    environment: CandidateEnvironment
    sources: list[str] = field(default_factory=list)
    rows: list[RegressionRow] = field(default_factory=list)
    removable: list[str] = field(default_factory=list)  # entry ids and workaround names
    left_out: list[str] = field(default_factory=list)  # considered for the sample, and why not run

    @property
    def regressions(self) -> list[RegressionRow]:
        return [row for row in self.rows if row.result == REGRESSION]

    def as_dict(self) -> dict[str, Any]:
        env = self.environment
        return {
            "candidate": env.spec,
            "environment": "layered on the pinned environment" if env.layered else "fresh from constraints.txt",
            "problem": env.problem,
            "removable": self.removable,
            "regression_sources": self.sources,
            "sample": [row.as_dict() for row in self.rows],
            "left_out": self.left_out,
            "regressions": len(self.regressions),
        }


def reproducer_sources(ledger: Ledger) -> list[ReproducerSource]:
    """Every ledger entry's reproducer, run as a user gets it: with the optimizer off for an
    ``ONNX_DISABLE_OPTIMIZE`` entry (its workaround). An ``EXPORT_SKIPS`` entry's reproducer runs only in
    the modes the entry skips (``--repro`` allows no other), so the sample leaves it out and says so."""
    sources = []
    for entry in ledger.entries:
        keeps_workaround = ("--no-optimize",) if entry.list_name == "ONNX_DISABLE_OPTIMIZE" else ()
        sources.append(ReproducerSource(entry.id, entry.backend, entry.models, tuple(entry.modes()),
                                        ("--repro", entry.id, *keeps_workaround)))  # fmt: skip
    return sources


def workaround_dependencies() -> dict[str, str | None]:
    """Registered workaround name → the package it declares (``dependency = PKG``)."""
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    return {w.name: w.dependency for w in all_workarounds()}


def read_class_list(path: Path | None) -> list[tuple[str, str | None, bool | None]]:
    """``--regression-classes FILE``; a malformed line is a usage problem naming ``file:line``."""
    if path is None:
        return []
    try:
        return parse_class_list(path.read_text(encoding="utf-8"), str(path))
    except ValueError as error:
        raise UsageProblem(str(error)) from None


def run_candidate_check(
    environment: CandidateEnvironment,
    removable: list[str],
    results: Sequence[Path],
    pins: Mapping[str, str],
    limit: int,
    timeout: float,
    progress: Callable[[Export], None] = lambda export: None,
    *,
    registry: Path | None = None,
    classes_file: Path | None = None,
    pinned_python: Path | None = None,
) -> CandidateCheck:
    """The regression half of a candidate audit (the removal half is the audit's own re-runs).
    ``results``: sweep result files to sample from; empty means the committed record set (``default_results``);
    ``registry``: the ledger whose reproducers to include, and which every export reads (default: the
    default registry); ``pinned_python``: the interpreter holding the pins, where a failure is re-checked
    (default: this one, bot.run.venvs.pinned_environment builds one when it does not hold them)."""
    results = results or default_results(REPO_ROOT)
    try:
        # A generation record (mode generate) is no single-graph export to re-run at the candidate.
        records = [r for path in results for r in read_results(path) if r["mode"] != "generate"]
    except ResultsError as error:
        raise EnvironmentFailure(f"regression sample: {error}") from None
    registry = registry or default_registry_dir()
    ledger = load_ledger(registry)

    def skipped(model: str, backend: str, dynamic: bool) -> str | None:
        entry = ledger.skip(model, backend, dynamic)
        return None if entry is None else entry.id

    choice = SampleChoice()
    for package in environment.packages:  # a coupled group: each moved package's likely places, one budget
        found = choose_sample(
            package, pins, records, reproducers=reproducer_sources(ledger), dependencies=workaround_dependencies(),
            listed=read_class_list(classes_file), skipped=skipped, limit=limit,
        )  # fmt: skip
        for item in found.chosen:
            choice.add(item)
        choice.left_out += [line for line in found.left_out if line not in choice.left_out]
    choice.chosen = choice.chosen[:limit]
    python = pinned_python or Path(sys.executable)

    def at_pins(args: Sequence[str]) -> RunExport:
        return subprocess_runner(timeout, plain=True, registry=registry, extra_args=args, python=python,
                                 pythonpath=REPO_ROOT)  # fmt: skip

    rows = check_regressions(
        choice.chosen,
        environment.packages,
        sampled_runner(lambda args: environment.runner(timeout, plain=True, registry=registry, extra_args=args)),
        sampled_runner(at_pins),
        progress,
    )
    sources = [str(p) for p in results] + ([str(classes_file)] if classes_file else [])
    return CandidateCheck(environment, sources, rows, removable, choice.left_out)


def describe_row(row: RegressionRow) -> str:
    """One line for the terminal and the Markdown report."""
    if row.result == HOLDS:
        diff = row.candidate.get("max_abs_diff")
        return "passes" + (f" (max abs diff {diff:.3g})" if diff is not None else "")
    if row.unsupported is not None:
        return row.unsupported
    error = error_excerpt(row.candidate, 200)
    return f"{row.candidate.get('status')}: {error}" + ("; fails at the pins too" if row.result == STALE else "")
