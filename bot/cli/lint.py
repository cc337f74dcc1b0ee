"""``exportbot lint``: keep the workaround ledger and the workaround registry honest.

The bot removes ledger entries automatically, which is only safe when every entry is well formed, names
classes that exist, points at one upstream bug and does not overlap another entry. Registered workarounds
are checked in the same run: a patch target that no longer resolves would turn a workaround into an
error at export time, and a workaround without an upstream URL can never be retired by the bot.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import click

import exporters
from bot.errors import EXIT_FAILED, EXIT_OK, UsageProblem, report_errors
from bot.sweep.records import is_timeout_failure
from exporters.ledger import LedgerEntry, check_ledger, default_registry_dir
from exporters.utils import Workaround, all_workarounds, unresolved_targets

__all__ = ["LintMessage", "lint", "lint_command"]


@dataclass(frozen=True)
class LintMessage:
    """One finding; rendered ``path:line: message`` (warnings say so) so editors can jump to it."""

    path: Path
    line: int
    severity: Literal["error", "warning"]
    message: str

    def __str__(self) -> str:
        label = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {label}{self.message}"


def _display(path: str | Path) -> Path:
    """Paths under the working directory are shown relative to it, as compilers do."""
    try:
        return Path(path).resolve().relative_to(Path.cwd())
    except ValueError:
        return Path(path)


def _describe(error: Exception) -> str:
    """``Type: first line``: a lint message stays one line however long the exception text is."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _missing_classes(entries: Iterable[LedgerEntry]) -> list[LintMessage]:
    """Entries naming a class the installed transformers does not have (renamed, removed, or a typo)."""
    import transformers  # deferred: only this check needs it, and importing it costs seconds

    messages = []
    for entry in entries:
        for model in entry.models:
            try:
                getattr(transformers, model)  # transformers imports lazily: this loads the model module
            except AttributeError:
                problem = f"is not a class of the installed transformers {transformers.__version__}"
            except Exception as error:  # the model module exists but cannot be imported here
                problem = f"cannot be imported from transformers: {_describe(error)}"
            else:
                continue
            messages.append(
                LintMessage(
                    entry.path, entry.model_line(model), "error", f"entry {entry.id!r}: {model!r} {problem}"
                )
            )
    return messages


def _reproducer_messages(entries: Iterable[LedgerEntry]) -> list[LintMessage]:
    """Every entry's reproducer (its ``[entry.repro]``, else the default tiny model) built and run once in
    eager, per model class: one that cannot run in eager can never show a fix, so re-running it proves
    nothing."""
    messages = []
    with one_thread():
        for entry in entries:
            messages += _reproducer_problems(entry)
    return messages


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread for the block. A tiny model's ops are far too small to split: with torch's
    default (a thread per core) its workers spin and wait on each other, and on a shared 2-core machine the
    reproducers' eager runs took 56-84 s instead of 9-12 s (benchmarks/bench_lint.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _reproducer_problems(entry: LedgerEntry) -> list[LintMessage]:
    """The messages of one entry's reproducers (one per model class that does not build or run)."""
    import transformers

    from exporters.ledger.repro import build_reproducer, run_eager

    messages = []
    for model in entry.models:
        if not hasattr(transformers, model):
            continue  # reported by _missing_classes
        step = "build"
        try:
            reproducer = build_reproducer(entry, model)
            step = "run in eager"
            run_eager(reproducer)
        except Exception as error:
            where = "[entry.repro]" if entry.repro else "default tiny model (no [entry.repro])"
            messages.append(
                LintMessage(
                    entry.path,
                    entry.key_lines.get("repro", entry.line),
                    "error",
                    f"entry {entry.id!r}: the reproducer of {model!r} ({where}) does not {step}: "
                    f"{_describe(error)}; a reproducer that fails in eager can never show a fix",
                )
            )
    return messages


def _slowness_without_budget(entries: Iterable[LedgerEntry]) -> list[LintMessage]:
    """Entries whose ``failure`` is a timeout with no ``[entry.repro] budget_s``: without a budget of their own
    they are judged by the audit's ``--timeout``, and a long one lets the slow export pass as a fix."""
    return [
        LintMessage(entry.path, entry.key_lines.get("failure", entry.line), "error",
                    f"entry {entry.id!r}: its failure /{entry.failure}/ is a timeout, so it needs [entry.repro] "
                    "budget_s (the seconds past which its export counts as too slow, whatever --timeout says)")
        for entry in entries
        if is_timeout_failure(entry.failure) and (entry.repro is None or entry.repro.budget_s is None)
    ]  # fmt: skip


def _import_exporter_modules() -> list[LintMessage]:
    """Import every exporter module (a workaround is registered only once its module ran); report failure.

    The message points at the innermost line of the ``exporters`` package in the traceback: the import or
    statement that failed.
    """
    try:
        exporters.load_all_workarounds()
    except Exception as error:
        packages = [Path(directory).resolve() for directory in exporters.__path__]
        frame = next(
            (
                f
                for f in reversed(traceback.extract_tb(error.__traceback__))
                if any(Path(f.filename).resolve().is_relative_to(p) for p in packages)
            ),
            None,
        )
        path, line = (frame.filename, frame.lineno or 1) if frame else (exporters.__file__ or "exporters", 1)
        return [
            LintMessage(
                _display(path),
                line,
                "error",
                f"cannot import every exporter module, so not every workaround is checked: {_describe(error)}",
            )
        ]
    return []


def _source(workaround: Workaround) -> tuple[Path, int]:
    """Where the workaround is defined (its decorator line), so the message points at the code to fix."""
    func: Any = inspect.unwrap(workaround.func)
    try:
        return _display(inspect.getsourcefile(func) or func.__module__), inspect.getsourcelines(func)[1]
    except (OSError, TypeError):
        return Path(workaround.func.__module__), 1


def _without_upstream() -> list[Workaround]:
    return [workaround for workaround in all_workarounds() if not workaround.upstream]


UPSTREAM_DRAFTS = Path(__file__).resolve().parents[2] / "docs" / "upstream-drafts"


def upstream_draft(workaround: Workaround) -> Path | None:
    """The ready-to-file issue draft for a workaround without ``upstream`` (docs/upstream-drafts/README.md):
    ``<name>.md``, or the draft whose index row names the workaround (``_aten_cummax.md`` also covers
    ``_aten_cummin``). A maintainer files the drafts; a workaround with neither URL nor draft is the one that
    still needs someone to find or write its upstream report."""
    own = UPSTREAM_DRAFTS / f"{workaround.name}.md"
    if own.is_file():
        return own
    index = UPSTREAM_DRAFTS / "README.md"
    rows = index.read_text().splitlines() if index.is_file() else []
    for row in rows:
        if f"`{workaround.name}`" in row and "](" in row:
            linked = UPSTREAM_DRAFTS / row.split("](", 1)[1].split(")", 1)[0]
            if linked.is_file():
                return linked
    return None


def _draft_display(draft: Path) -> str:
    try:
        return str(draft.relative_to(Path.cwd()))
    except ValueError:
        return str(draft)


def _workaround_messages() -> list[LintMessage]:
    """Errors for patch targets that do not resolve; a warning per workaround without ``upstream``."""
    messages = _import_exporter_modules()
    for workaround, target, error in unresolved_targets():
        path, line = _source(workaround)
        messages.append(
            LintMessage(
                path,
                line,
                "error",
                f"workaround {workaround.name!r} ({workaround.backend}): patch target {target!r} does not resolve: {error}",
            )
        )
    for workaround in _without_upstream():
        path, line = _source(workaround)
        draft = upstream_draft(workaround)
        where = f"a draft to file is {_draft_display(draft)}" if draft else f"and no draft in {UPSTREAM_DRAFTS.name}/"
        messages.append(
            LintMessage(
                path,
                line,
                "warning",
                f"workaround {workaround.name!r} ({workaround.kind}, {workaround.backend}) has no upstream "
                f"issue URL, so the bot cannot tell when it may go; {where}",
            )
        )
    return messages


def lint(
    registry_dir: Path, *, check_classes: bool = True, check_workarounds: bool = True
) -> list[LintMessage]:
    """Every problem in the ledger under ``registry_dir`` and, optionally, in the workaround registry.

    ``check_classes`` imports transformers model modules and builds and runs every entry's reproducer in
    eager; ``check_workarounds`` imports every exporter; both take seconds, so callers that only edited TOML may turn them off.
    """
    entries, problems = check_ledger(Path(registry_dir))
    messages = [LintMessage(p.path, p.line, "error", p.message) for p in problems]
    messages += _slowness_without_budget(entries)
    if check_classes:
        messages += _missing_classes(entries)
        messages += _reproducer_messages(entries)
    if check_workarounds:
        messages += _workaround_messages()
    return messages


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


@click.command("lint")
@click.option(
    "--registry",
    "registry_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Ledger directory (default: $EXPORTBOT_REGISTRY, else registry/ at the repository root).",
)
@click.option(
    "--classes/--no-classes",
    "check_classes",
    default=True,
    show_default=True,
    help="Check that every model class exists in the installed transformers, and that every entry's "
    "reproducer builds and runs once in eager.",
)
@click.option(
    "--workarounds/--no-workarounds",
    "check_workarounds",
    default=True,
    show_default=True,
    help="Import every exporter and check the registered workarounds too.",
)
@report_errors
def lint_command(registry_dir: Path | None, check_classes: bool, check_workarounds: bool) -> None:
    """Check the workaround ledger and the workaround registry; exit 1 on errors."""
    directory = registry_dir or default_registry_dir()
    if not directory.is_dir():
        raise UsageProblem(f"registry directory {directory} does not exist")
    messages = lint(directory, check_classes=check_classes, check_workarounds=check_workarounds)
    for message in messages:
        click.echo(str(message))
    errors = sum(message.severity == "error" for message in messages)
    summary = f"lint: {_plural(errors, 'error')}, {_plural(len(messages) - errors, 'warning')}"
    if check_workarounds:
        untracked = _without_upstream()
        drafted = sum(upstream_draft(workaround) is not None for workaround in untracked)
        summary += (f"; {len(untracked)} of {len(all_workarounds())} registered workarounds have no upstream URL"
                    f" ({drafted} with a draft to file)")
    click.echo(summary)
    click.get_current_context().exit(EXIT_FAILED if errors else EXIT_OK)
