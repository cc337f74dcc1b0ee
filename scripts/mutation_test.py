#!/usr/bin/env python3
"""Mutation testing of the pure decision code with mutmut; writes docs/mutation-report.md.

Each mutant (a flipped comparison, a changed constant, a dropped argument) must make at least one of the
fast tests fail. Not part of the default test run: run it by hand or weekly (.github/workflows/mutation.yml).
CPU heavy: minutes per file on two cores.

    scripts/mutation_test.py [TARGET ...]     TARGET: validation verdict plan ledger prwriter (default: all)

mutmut gets its own virtual environment layered on the project's (``BASE_VENV``, default ``.venv``; the
project's packages are reached through a ``.pth`` file, nothing is installed into the project's venv), under
``.exportbot-cache/``. It runs on ``git archive HEAD`` (the committed tree), so the worktree is never
mutated. Results are kept per target (``.exportbot-cache/mutmut-results/``), so targets can be measured at
different times; the report lists every target measured, at which revision, and every surviving mutant with
its diff and the reason it is equivalent, read from ``scripts/mutation-equivalents.txt`` (``name: reason``).
A survivor without a reason is marked unexplained: kill it with a test, or explain it there.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT_VERSION = "3.8.1"
EQUIVALENTS = ROOT / "scripts" / "mutation-equivalents.txt"
REPORT = ROOT / "docs" / "mutation-report.md"


@dataclass(frozen=True)
class Target:
    """One file to mutate, the functions of it that count (mutmut names ``module.x_function__mutmut_N``),
    and the fast tests that must kill its mutants."""

    file: str
    functions: tuple[str, ...]
    tests: tuple[str, ...]


TARGETS = {
    "validation": Target("exporters/validation.py", ("exporters.validation.*",), ("tests/test_validation.py",)),
    "verdict": Target("bot/audit/verdict.py", ("bot.audit.verdict.*",), ("tests/test_verdict.py",)),
    "plan": Target("bot/audit/plan.py", ("bot.audit.plan.*",), ("tests/test_plan.py",)),
    "ledger": Target(
        "exporters/ledger/edit.py",  # the editing functions (split out of exporters/ledger/__init__.py)
        tuple(f"exporters.ledger.edit.x{name}__mutmut_*" for name in (
            "__split", "__is_comment", "__entry_starts", "__valid_data", "__locate", "__commit", "_remove_entry",
            "_remove_model", "_set_fixed_in", "__toml_value", "_add_entry")),
        ("tests/test_ledger.py", "tests/test_ledger_edits.py", "tests/test_repro.py"),
    ),
    "prwriter": Target(  # the PR planning: which proposals go into the PR, from the audit report and the base
        "bot/github/prwriter.py",
        ("bot.github.prwriter.x_select_proposals__mutmut_*", "bot.github.prwriter.x__absent_from_base__mutmut_*"),
        ("tests/test_pr_planning.py",),
    ),
}


def cache_dir() -> Path:
    return Path(os.environ.get("EXPORTBOT_CACHE", ROOT / ".exportbot-cache"))


def mutmut_venv() -> Path:
    """``.exportbot-cache/mutmut-venv``: mutmut pinned, the project's packages through a .pth file."""
    venv = Path(os.environ.get("MUTMUT_VENV", cache_dir() / "mutmut-venv"))
    if (venv / "bin" / "mutmut").is_file():
        return venv
    base = Path(os.environ.get("BASE_VENV", ROOT / ".venv"))
    if not (base / "bin" / "python").is_file():
        sys.exit(f"no project venv at {base}: run scripts/setup.sh, or set BASE_VENV")
    subprocess.run([base / "bin" / "python", "-m", "venv", venv], check=True)
    paths = lambda python: subprocess.run(  # noqa: E731
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    Path(paths(venv / "bin" / "python"), "project-venv.pth").write_text(paths(base / "bin" / "python") + "\n")
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"mutmut=={MUTMUT_VERSION}"], check=True)
    return venv


def committed_tree(work: Path, revision: str) -> str:
    """Unpack ``revision`` (HEAD by default) into ``work``; the short revision measured."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(work, filter="data")
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", revision], capture_output=True, text=True,
                          check=True).stdout.strip()


def measure(name: str, target: Target, venv: Path, children: int, revision: str) -> dict:
    work = cache_dir() / "mutmut-work"
    revision = committed_tree(work, revision)
    tests = [t for t in target.tests if (work / t).is_file()]
    result = {"target": name, "file": target.file, "revision": revision, "tests": tests, "statuses": {},
              "diffs": {}}
    if not tests:
        return result
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths = {Path(target.file).parent}\n"
        f"only_mutate = {target.file}\n"
        "pytest_add_cli_args_test_selection =\n" + "".join(f"    {t}\n" for t in tests)
        + "pytest_add_cli_args = -p no:cacheprovider -q\n"
        # mutmut copies only the source paths and tests into mutants/; the tests read the rest (registry/ ...)
        + "also_copy =\n" + "".join(f"    {p.name}\n" for p in sorted(work.iterdir())
                                     if p.name not in {"setup.cfg", Path(target.file).parts[0]})
    )
    mutmut = [str(venv / "bin" / "mutmut")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    with open(work / "mutmut-run.log", "w") as log:
        subprocess.run(["nice", "-n", "10", *mutmut, "run", "--max-children", str(children), *target.functions],
                       cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    listing = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                             text=True, check=False).stdout
    for line in listing.splitlines():
        mutant, _, status = line.strip().partition(": ")
        if status and any(fnmatch.fnmatch(mutant, pattern) for pattern in target.functions):
            result["statuses"][mutant] = status
    for mutant, status in result["statuses"].items():
        if status != "killed":
            shown = subprocess.run([*mutmut, "show", mutant], cwd=work, env=env, capture_output=True, text=True,
                                   check=False).stdout
            result["diffs"][mutant] = shown[shown.find("@@"):] if "@@" in shown else shown
    return result


def equivalents() -> dict[str, str]:
    reasons = {}
    if EQUIVALENTS.is_file():
        for line in EQUIVALENTS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                mutant, _, reason = line.partition(": ")
                reasons[mutant.strip()] = reason.strip()
    return reasons


def render(results: list[dict], reasons: dict[str, str]) -> str:
    lines = [
        "# Mutation testing report",
        "",
        f"Generated by `scripts/mutation_test.py` (mutmut {MUTMUT_VERSION}); do not edit by hand, explain survivors "
        "in `scripts/mutation-equivalents.txt`. A mutant *survives* when every selected test still passes with it. "
        "Goal: at most 5 % survivors per file, each explained as equivalent (no input can observe the change).",
        "",
        "| file | revision | tests | mutants | killed | survived | survival | other |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        statuses = list(result["statuses"].values())
        killed, survived = statuses.count("killed"), statuses.count("survived")
        others = {s: statuses.count(s) for s in sorted(set(statuses) - {"killed", "survived"})}
        rate = f"{100 * survived / len(statuses):.1f} %" if statuses else "—"
        tests = ", ".join(f"`{t}`" for t in result["tests"]) or "none yet"
        lines.append(f"| `{result['file']}` | {result['revision']} | {tests} | {len(statuses)} | {killed} | "
                     f"{survived} | {rate} | {', '.join(f'{n} {s}' for s, n in others.items())} |")
    lines += ["", "## Mutants not killed", ""]
    shown = False
    for result in results:
        for mutant, status in sorted(result["statuses"].items()):
            if status == "killed":
                continue
            shown = True
            reason = reasons.get(mutant, "**unexplained**: kill it with a test or explain it")
            # a survivor is explained as equivalent; a mutant that did not finish (timeout) by why it hangs
            label = "Equivalent" if status == "survived" else "Explained"
            lines += [f"### `{mutant}` ({status})", "", "```diff", result["diffs"].get(mutant, "").rstrip(), "```",
                      "", f"{label}: {reason}" if mutant in reasons else reason, ""]
    if not shown:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # checked by hand: argparse checks the empty default of nargs="*" against choices too, and refuses it
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"one of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--children", type=int, default=2, help="parallel mutmut workers (default 2)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the kept results")
    parser.add_argument("--revision", default="HEAD", help="the commit to measure (default HEAD): a branch whose "
                        "tests have not landed yet can be measured before it is merged")
    options = parser.parse_args()
    unknown = [name for name in options.targets if name not in TARGETS]
    if unknown:
        parser.error(f"unknown TARGET {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    store = cache_dir() / "mutmut-results"
    store.mkdir(parents=True, exist_ok=True)
    if not options.report_only:
        venv = mutmut_venv()
        for name in options.targets or list(TARGETS):
            result = measure(name, TARGETS[name], venv, options.children, options.revision)
            (store / f"{name}.json").write_text(json.dumps(result, indent=1))
            print(f"{name}: {len(result['statuses'])} mutants, "
                  f"{list(result['statuses'].values()).count('survived')} survived")
    results = [json.loads((store / f"{name}.json").read_text()) for name in TARGETS if (store / f"{name}.json").is_file()]
    REPORT.write_text(render(results, equivalents()))
    print(f"report: {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
