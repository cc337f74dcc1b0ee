"""Re-run a ledger entry's (or a workaround's) exports with the workaround removed, each in its own process.

Why a subprocess per export: a re-run must not share state with the audit (patched modules, torch
caches, a half-initialised exporter) and must be killable: a hang becomes status ``timeout`` instead of
a stuck job. Each run is ``python -m bot export CLASS --backend B --static|--dynamic`` plus what leaves the
workaround out:

* a ledger entry: ``--repro ENTRY_ID`` exports the entry's reproducer (exporters.ledger.repro) without the
  ledger, which makes an ``EXPORT_SKIPS`` class export at all and an ``ONNX_DISABLE_OPTIMIZE`` class
  export with the optimizer on, i.e. exactly "without the workaround"; ``exportbot export CLASS --repro
  ENTRY_ID`` by hand runs the same. The outcome records what it left off (``workaround_off``), which the
  verdict requires of a pass;
* a registered workaround (a necessity probe): ``--without NAME`` disables only that one; every other
  workaround and the ledger stay as the sweep that saw it fire had them;
* a supersession probe of a ledger entry whose reproducer passed with nothing moved: ``--repro ENTRY_ID
  --without NAME ...``, the reproducer again with workarounds that fired in its passing runs disabled, to
  show which registered workaround took the entry's job over (:func:`probe_superseders`, bot.audit.verdict).

The child reads the audit's registry (``EXPORTBOT_REGISTRY``), so ``audit --registry DIR`` gates and
reproduces from DIR there too. The runner is a plain callable ``run_export(model_class, backend, dynamic) -> dict`` (an outcome record
as :class:`bot.run.runner.ExportOutcome.as_dict` gives), so verdict logic can be tested without exports.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.config import DEFAULT_RUNS, DEFAULT_TIMEOUT
from bot.sweep.records import CRASHED, RERUN_TIMEOUT, TIMEOUT, ended_without_outcome

if TYPE_CHECKING:
    from bot.audit.plan import Subject

RunExport = Callable[[str, str, bool], dict[str, Any]]
ProbeRunner = Callable[[str], RunExport]  # workaround name → a runner exporting without only that one
# (entry id, workarounds to disable) → a runner exporting the entry's reproducer without those too
SupersessionRunner = Callable[[str, Sequence[str]], RunExport]
DEFAULT_SUPERSESSION_PROBES = 6  # probes per entry; each is one export (Flint's proof takes 2 per mode)


def subprocess_runner(
    timeout: float = DEFAULT_TIMEOUT,
    *,
    without: Sequence[str] = (),
    plain: bool = False,
    repro: str | None = None,
    registry: Path | None = None,
    python: str | Path = sys.executable,
    pythonpath: Path | None = None,
    extra_args: Sequence[str] = (),
    budget_s: float | None = None,
) -> RunExport:
    """A runner exporting in a fresh ``python -m bot export`` process, killed after ``timeout`` s.

    ``budget_s`` (a slowness entry's ``[entry.repro] budget_s``) replaces ``timeout``: such an entry's failure
    is the export running past its budget, so a longer audit-wide ``--timeout`` must not let it pass. The
    outcome records ``command``: the ``exportbot export`` line that reproduces the run by hand.

    ``repro`` (a ledger entry id) exports that entry's reproducer without the ledger: the audit's re-run;
    ``without`` names workarounds to disable instead of ignoring the ledger (a necessity probe), or with
    ``repro`` as well (a supersession probe);
    ``plain`` leaves nothing out (the export as a sweep runs it: the regression check of a candidate).
    ``registry`` is the ledger directory the child reads (default: whatever it finds itself).
    ``python`` and ``pythonpath`` let ``exportbot bisect`` run this repository's code in another
    virtual environment (one per candidate version) that does not have exportbot installed.
    ``extra_args`` go to every ``exportbot export`` (a regression check's ``--repro ID --no-optimize``).
    """
    disabled = [arg for name in without for arg in ("--without", name)]
    leave_out = ["--repro", repro, *disabled] if repro else disabled or ([] if plain else ["--ignore-ledger"])

    limit = budget_s if budget_s is not None else timeout
    over = RERUN_TIMEOUT.format(seconds=limit) + (" (the entry's budget_s)" if budget_s is not None else "")

    def run_export(model_class: str, backend: str, dynamic: bool) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="exportbot-rerun-") as scratch:
            record = Path(scratch) / "outcome.json"
            export = [model_class, "--backend", backend, "--dynamic" if dynamic else "--static", *leave_out, *extra_args]
            command = [str(python), "-m", "bot", "export", *export,
                       "--outcome-json", str(record), "--out", str(Path(scratch) / "out")]  # fmt: skip
            shown = shlex.join(["exportbot", "export", *export])
            base = {"model": model_class, "backend": backend, "dynamic": dynamic, "repro": repro,
                    "workarounds_disabled": list(without), "command": shown}  # fmt: skip
            env = os.environ | {"HF_HUB_OFFLINE": "1"}
            if pythonpath is not None:
                env["PYTHONPATH"] = str(pythonpath)
            if registry is not None:
                env["EXPORTBOT_REGISTRY"] = str(Path(registry).resolve())
            try:
                done = subprocess.run(
                    command, cwd=scratch, env=env, capture_output=True, text=True, timeout=limit
                )
            except subprocess.TimeoutExpired:  # subprocess.run kills the child before raising
                return base | {"status": TIMEOUT, "error": over}
            if record.is_file():
                return json.loads(record.read_text(encoding="utf-8")) | {"command": shown}
            tail = (done.stderr or done.stdout or "").strip()[-2000:]
            # The sweep's text for the same crash (bot.sweep.records), so a failure copied from a sweep matches.
            return base | {"status": CRASHED, "error": f"{ended_without_outcome(None, done.returncode)}: {tail}"}

    return run_export


def rerun_subject(subject: Subject, run_export: RunExport, runs: int = DEFAULT_RUNS) -> list[dict[str, Any]]:
    """Every export of ``subject``, ``runs`` times each (to catch flaky passes)."""
    outcomes = []
    for export in subject.exports:
        for attempt in range(1, runs + 1):
            outcome = run_export(export.model, export.backend, export.dynamic)
            outcomes.append(outcome | {"run": attempt})
    return outcomes


def probe_superseders(
    subject: Subject,
    passing: Sequence[dict[str, Any]],
    run_without: Callable[[Sequence[str]], RunExport],
    budget: int = DEFAULT_SUPERSESSION_PROBES,
) -> list[dict[str, Any]]:
    """Supersession probes of an entry whose reproducer passed in every run (``passing``): per export, re-run
    with workarounds disabled, in the order bot.audit.verdict.next_superseders gives, until one fails as the
    entry records (bot.audit.verdict.proves_takeover) or ``budget`` probes of the entry ran. One run per probe: a
    failure that matches is the recorded bug itself, not a flaky pass.
    """
    from bot.audit.verdict import next_superseders, proves_takeover

    probes: list[dict[str, Any]] = []
    proven: list[tuple[str, ...]] = []
    for export in subject.exports:
        key = (export.model, export.backend, export.dynamic)
        fired = sorted({name for o in passing if _key(o) == key for name in o.get("workarounds_fired") or {}})
        mine: list[dict[str, Any]] = []
        while len(probes) < budget and (names := next_superseders(fired, mine, proven)) is not None:
            outcome = run_without(names)(export.model, export.backend, export.dynamic)
            outcome = {"workarounds_disabled": list(names)} | outcome | {"run": 1}
            mine.append(outcome)
            probes.append(outcome)
            if proves_takeover(subject, outcome):
                proven.append(names)
                break
    return probes


def _key(outcome: dict[str, Any]) -> tuple[Any, Any, bool]:
    return outcome.get("model"), outcome.get("backend"), bool(outcome.get("dynamic"))
