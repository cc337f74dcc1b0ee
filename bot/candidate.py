"""``exportbot audit --candidate PKG==VER``: try a release before bumping its pin, in both directions.

A maintainer wants two answers before moving a pin: which ledger entries and workarounds the release
makes unnecessary, and which exports that work today it breaks. Both come from the same isolated
environment (bot.venvs), so the development environment is never touched:

* **Environment.** ``.exportbot-cache/venvs/candidate-PKG-VER``: layered on the running (pinned)
  environment when that holds every pin exactly (seconds to build for a pure-Python package), else a
  fresh one from ``constraints.txt`` with ``PKG==VER`` (minutes). It is checked to really import VER.
  A release that cannot be installed with the other pins ends the audit with that reason (exit 1).
* **Removals.** The audit re-runs every due entry and workaround (those whose backend stack has PKG)
  in that environment; ``removable`` there means "removable once the pin moves".
* **Regressions.** A sample of exports that *passed* at the current pins in the last sweep results
  (``--regression-results``, default the committed ``sweeps/*.jsonl``) is exported again with the
  candidate: at most ``--regression-sample`` of them (default 8), only backends whose stack has PKG,
  only records made at exactly the current pins of that stack, spread round-robin over
  (backend, mode) and the fastest first, so the check stays a few minutes. An export that fails with
  the candidate is exported once more at the pins: failing there too means the sweep record is stale
  (``fails at the pins too``), not a regression.

Nothing of a candidate audit is written to the verification state or proposed for removal: the pins
have not moved yet (``exportbot pr`` refuses such a report).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.pins import BACKEND_STACK, normalize_name
from bot.plan import Export, parse_candidate
from bot.rerun import RunExport, subprocess_runner
from bot.runner import PASS
from bot.sweep import ResultsError, read_results
from bot.venvs import (
    DEFAULT_CACHE,
    REPO_ROOT,
    EnvironmentFailure,
    Uninstallable,
    constraints_with,
    ensure_venv,
    pin_mismatches,
    project_dependencies,
    same_release,
    site_packages,
)
from bot.verdict import error_excerpt, evidence_of

DEFAULT_SAMPLE = 8
SWEEPS_DIR = REPO_ROOT / "sweeps"  # the committed sweep results: the default regression sample source
REGRESSION, STALE, HOLDS = "regression", "fails at the pins too", "pass"


@dataclass(frozen=True)
class CandidateEnvironment:
    """Where the candidate runs; ``python`` is None when it could not be installed (``problem`` says why)."""

    package: str
    version: str
    python: Path | None
    layered: bool
    problem: str | None = None

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    def runner(self, timeout: float, **leave_out: Any) -> RunExport:
        """Exports in the candidate's environment, leaving out what :func:`bot.rerun.subprocess_runner` says
        (``without``, ``plain``, ``repro``, ``registry``)."""
        assert self.python is not None, "no environment: check .problem first"
        return subprocess_runner(timeout, python=self.python, pythonpath=REPO_ROOT, **leave_out)


def prepare_environment(
    candidate: str, pin_text: str, pins: Mapping[str, str], cache_dir: Path = DEFAULT_CACHE
) -> CandidateEnvironment:
    """Build (or reuse) the candidate's environment; an uninstallable release is a result, not an error.
    Raises :class:`bot.venvs.EnvironmentFailure` when no environment can be built at all (no index)."""
    package, version = parse_candidate(candidate)
    layered = not pin_mismatches(pins)
    name = f"candidate-{normalize_name(package)}-{version}{'-layered' if layered else ''}"
    try:
        python = ensure_venv(
            cache_dir / name,
            constraints_with(pin_text, package, version),
            project_dependencies(),
            base=site_packages() if layered else None,
        )
    except Uninstallable as refused:
        return CandidateEnvironment(package, version, None, layered, f"cannot be installed: {refused}")
    found = subprocess.run(
        [str(python), "-c", f"from importlib.metadata import version; print(version({package!r}))"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    installed = found.stdout.strip()
    if found.returncode != 0 or not same_release(installed, version):
        raise EnvironmentFailure(
            f"{cache_dir / name} imports {package} {installed or '(none)'}, not {version}: delete it to rebuild"
        )
    return CandidateEnvironment(package, version, python, layered)


# ── The regression sample (pure) ──
def regression_sample(
    records: Iterable[Mapping[str, Any]], package: str, pins: Mapping[str, str], limit: int = DEFAULT_SAMPLE
) -> list[Export]:
    """Exports that passed at the current pins and that ``package`` can affect, at most ``limit``.

    Spread round-robin over (backend, mode) buckets in sorted order, fastest first inside each, one
    export per (class, backend, mode). Records made at other versions of the backend's stack are left
    out: they say nothing about today's pins.
    """
    key = normalize_name(package)
    buckets: dict[tuple[str, str], list[tuple[float, str]]] = {}
    seen: set[tuple[str, str, str]] = set()
    for record in records:
        backend, mode, model = record.get("backend"), record.get("mode"), record.get("model")
        stack = BACKEND_STACK.get(str(backend), [])
        if record.get("status") != PASS or key not in {normalize_name(n) for n in stack}:
            continue
        versions = {normalize_name(n): v for n, v in (record.get("versions") or {}).items()}
        if any(not same_release(str(versions.get(normalize_name(n))), pins.get(normalize_name(n), "")) for n in stack):
            continue
        if (model, backend, mode) in seen:
            continue
        seen.add((str(model), str(backend), str(mode)))
        buckets.setdefault((str(backend), str(mode)), []).append((float(record.get("seconds") or 0), str(model)))
    queues = {bucket: sorted(items) for bucket, items in sorted(buckets.items())}
    chosen: list[Export] = []
    while len(chosen) < limit and any(queues.values()):
        for (backend, mode), queue in queues.items():
            if queue and len(chosen) < limit:
                _, model = queue.pop(0)
                chosen.append(Export(model, backend, mode == "dynamic"))
    return chosen


@dataclass
class RegressionRow:
    """One sampled export: how it ran with the candidate and, when that failed, at the pins again."""

    export: Export
    candidate: dict[str, Any]
    ran_with: str | None  # the candidate package's version the export process really imported
    pinned: dict[str, Any] | None = None

    @property
    def result(self) -> str:
        if self.candidate.get("status") == PASS:
            return HOLDS
        return STALE if self.pinned is not None and self.pinned.get("status") != PASS else REGRESSION

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.export.model, "backend": self.export.backend, "mode": self.export.mode,
            "result": self.result, "ran_with": self.ran_with, "candidate": self.candidate, "pinned": self.pinned,
        }  # fmt: skip


def check_regressions(
    sample: Sequence[Export],
    package: str,
    with_candidate: RunExport,
    at_pins: RunExport,
    progress: Callable[[Export], None] = lambda export: None,
) -> list[RegressionRow]:
    """Export each sampled class with the candidate; re-check a failure at the pins."""
    rows = []
    for export in sample:
        progress(export)
        outcome = with_candidate(export.model, export.backend, export.dynamic)
        versions = {normalize_name(k): v for k, v in (outcome.get("versions") or {}).items()}
        row = RegressionRow(export, evidence_of(outcome), versions.get(normalize_name(package)))
        if row.candidate.get("status") != PASS:
            row.pinned = evidence_of(at_pins(export.model, export.backend, export.dynamic))
        rows.append(row)
    return rows


@dataclass
class CandidateCheck:
    """The ``candidate_check`` block of the audit report (docs/audit-report.md)."""

    environment: CandidateEnvironment
    sources: list[str] = field(default_factory=list)
    rows: list[RegressionRow] = field(default_factory=list)
    removable: list[str] = field(default_factory=list)  # entry ids and workaround names

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
            "regressions": len(self.regressions),
        }


def run_candidate_check(
    environment: CandidateEnvironment,
    removable: list[str],
    results: Sequence[Path],
    pins: Mapping[str, str],
    limit: int,
    timeout: float,
    progress: Callable[[Export], None] = lambda export: None,
) -> CandidateCheck:
    """The regression half of a candidate audit (the removal half is the audit's own re-runs).
    ``results``: sweep result files to sample from; empty means the committed ``sweeps/*.jsonl``."""
    results = results or sorted(SWEEPS_DIR.glob("*.jsonl"))
    try:
        records = [record for path in results for record in read_results(path)]
    except ResultsError as error:
        raise EnvironmentFailure(f"regression sample: {error}") from None
    sample = regression_sample(records, environment.package, pins, limit)
    rows = check_regressions(
        sample,
        environment.package,
        environment.runner(timeout, plain=True),
        subprocess_runner(timeout, plain=True),
        progress,
    )
    return CandidateCheck(environment, [str(p) for p in results], rows, removable)


def describe_row(row: RegressionRow) -> str:
    """One line for the terminal and the Markdown report."""
    if row.result == HOLDS:
        diff = row.candidate.get("max_abs_diff")
        return "passes" + (f" (max abs diff {diff:.3g})" if diff is not None else "")
    error = error_excerpt(row.candidate, 200)
    return f"{row.candidate.get('status')}: {error}" + ("; fails at the pins too" if row.result == STALE else "")
