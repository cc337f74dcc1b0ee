"""``exportbot lint``: keep the workaround ledger and the workaround registry honest.

The bot removes ledger entries automatically, which is only safe when every entry is well formed, names
classes that exist, points at one upstream bug and does not overlap another entry. Registered workarounds
are checked in the same run: a patch target that no longer resolves would turn a workaround into an
error at export time. And every entry and workaround is tracked upstream: one with neither an upstream URL nor
a standalone draft can never be retired by the bot (an error for a new one, a warning for those listed in
docs/upstream-drafts/known-untracked.txt), and an unverified or stale draft is a warning.
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
from bot.audit.drafts import (
    DRAFTS_DIR,
    ENTRY,
    KNOWN_UNTRACKED,
    NOTHING,
    STALE,
    UNVERIFIED,
    ItemStatus,
    TrackedItem,
    counts,
    entry_item,
    item_status,
    parse_known_untracked,
    workaround_item,
)
from bot.audit.pins import PinFileError, find_pin_file, read_pins
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


def _workaround_messages() -> list[LintMessage]:
    """Errors for patch targets that do not resolve (and for exporter modules that do not import)."""
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
    return messages


# ── Tracked upstream: linked, verified draft, unverified draft, stale, nothing ──
def _tracked(entries: Iterable[LedgerEntry], workarounds: Iterable[Workaround]) -> list[tuple[TrackedItem, Path, int]]:
    """Each entry and workaround as an item tracked upstream, with the line a message about it points at."""
    found = [(entry_item(entry, str(_display(entry.path))), _display(entry.path), entry.line) for entry in entries]
    for workaround in workarounds:
        path, line = _source(workaround)
        found.append((workaround_item(workaround, str(path)), path, line))
    return found


def tracking_statuses(
    entries: Iterable[LedgerEntry], workarounds: Iterable[Workaround], registry_dir: Path, drafts_dir: Path
) -> list[tuple[ItemStatus, Path, int]]:
    """Where each item stands upstream (bot.audit.drafts.item_status over the committed drafts), and its line."""
    from bot.run.drafts import read_drafts

    files = read_drafts(drafts_dir)
    try:
        pins = read_pins(find_pin_file(registry_dir))
    except PinFileError:
        pins = {}  # a scratch registry without constraints.txt: no run is compared with pins
    return [(item_status(item, files.scripts.get(item.id), files.notes.get(item.id), files.runs.get(item.id), pins,
                         str(drafts_dir / f"{item.id}.md")), path, line)
            for item, path, line in _tracked(entries, workarounds)]  # fmt: skip


def known_untracked(drafts_dir: Path) -> set[str]:
    path = drafts_dir / KNOWN_UNTRACKED
    return parse_known_untracked(path.read_text(encoding="utf-8")) if path.is_file() else set()


def _tracking_messages(statuses: Iterable[tuple[ItemStatus, Path, int]], known: set[str]) -> list[LintMessage]:
    """Per item without an upstream issue: nothing (an error for an item not listed in known-untracked.txt, a
    warning for one listed there, which had nothing when the rule came in), an unverified or a stale draft
    (warnings). Linked and verified items: no message (the summary line counts them)."""
    messages = []
    for status, path, line in statuses:
        item = status.item
        what = f"{'entry' if item.kind == ENTRY else 'workaround'} {item.id!r} ({item.detail})"
        if item.upstream and item.internal:
            messages.append(LintMessage(path, line, "error", f"{what} has both an upstream issue and an internal "
                                        "reason: it works around an upstream bug (keep upstream) or exportbot's own "
                                        "code (keep internal), not both"))  # fmt: skip
        if status.status == NOTHING:
            new = item.id not in known
            messages.append(LintMessage(path, line, "error" if new else "warning",
                                        f"{what} has no upstream issue and no draft, so the bot cannot tell when it may "
                                        f"go; {'a new item needs one: ' if new else ''}run `exportbot upstream draft "
                                        f"{item.id}` or `exportbot upstream link {item.id} URL`"))  # fmt: skip
        elif status.status in (UNVERIFIED, STALE):
            messages.append(LintMessage(path, line, "warning", f"{what}: {status.status} upstream draft: {status.reason}"))
    return messages


def drafts_beside(registry_dir: Path) -> Path | None:
    """The upstream drafts of the checkout that holds ``registry_dir`` (``docs/upstream-drafts`` next to it), or
    None: a ledger directory outside a checkout (a scratch copy) has no drafts to judge its items by."""
    candidate = Path(registry_dir).absolute().parent / DRAFTS_DIR.relative_to(DRAFTS_DIR.parents[1])
    return candidate if candidate.is_dir() else None


def lint(
    registry_dir: Path, *, check_classes: bool = True, check_workarounds: bool = True, check_tracking: bool = True,
    drafts_dir: Path | None = None,
) -> list[LintMessage]:  # fmt: skip
    """Every problem in the ledger under ``registry_dir`` and, optionally, in the workaround registry, and where
    each entry (and workaround) stands upstream.

    ``check_classes`` imports transformers model modules and builds and runs every entry's reproducer in
    eager; ``check_workarounds`` imports every exporter; both take seconds, so callers that only edited TOML may
    turn them off. ``check_tracking`` judges every item against the upstream drafts (``drafts_dir``, default
    :func:`drafts_beside` the registry; none there: not judged).
    """
    entries, problems = check_ledger(Path(registry_dir))
    messages = [LintMessage(p.path, p.line, "error", p.message) for p in problems]
    messages += _slowness_without_budget(entries)
    if check_classes:
        messages += _missing_classes(entries)
        messages += _reproducer_messages(entries)
    if check_workarounds:
        messages += _workaround_messages()
    drafts_dir = drafts_dir or drafts_beside(registry_dir)
    if check_tracking and drafts_dir is not None:
        workarounds = all_workarounds() if check_workarounds else []
        messages += _tracking_messages(tracking_statuses(entries, workarounds, Path(registry_dir), drafts_dir),
                                       known_untracked(drafts_dir))  # fmt: skip
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
    drafts_dir = drafts_beside(directory)
    if drafts_dir is not None:
        entries, _ = check_ledger(directory)
        statuses = tracking_statuses(entries, all_workarounds() if check_workarounds else [], directory, drafts_dir)
        summary += "; upstream: " + ", ".join(f"{name} {n}" for name, n in counts(s for s, _, _ in statuses).items())
    click.echo(summary)
    click.get_current_context().exit(EXIT_FAILED if errors else EXIT_OK)
