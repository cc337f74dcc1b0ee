"""Reading the ledger: both TOML files parsed, validated and cross-checked into a ``Ledger``.

Split out of ``exporters.ledger`` (which re-exports the public names). Reading uses ``tomllib`` (strict,
standard types) and finds line numbers by scanning the text, so every problem is reported as
``file:line: message``; editing (``exporters.ledger.edit``) reuses the same parse to refuse files that
are already wrong.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from exporters.ledger.entries import (
    _ALLOWED,
    _KEYS,
    _OPTIONAL,
    BACKENDS,
    LIST_FILES,
    SCOPES,
    Ledger,
    LedgerEntry,
    LedgerError,
    LedgerProblem,
    parse_github_url,
)
from exporters.ledger.lines import _header_indices, _key_line, _quoted_line
from exporters.ledger.validation import (
    _CHECKS,
    _REPRO_HEADER,
    _make_repro,
    _repro_line,
    _repro_problems,
    quantize_scope_problem,
)

_DECODE_LINE = re.compile(r"at line (\d+)")


def _list_name_for(path: Path) -> str:
    for list_name, filename in LIST_FILES.items():
        if path.name == filename:
            return list_name
    raise LedgerError(
        [LedgerProblem(path, 1, f"not a ledger file (expected one of {', '.join(LIST_FILES.values())})")]
    )


def _decode_problem(path: Path, text: str, error: tomllib.TOMLDecodeError) -> LedgerProblem:
    match = _DECODE_LINE.search(str(error))
    line = int(match.group(1)) if match else max(1, len(text.splitlines()))
    message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)$", "", str(error))
    return LedgerProblem(path, line, f"invalid TOML: {message}")


def _build_entry(
    table: Any, list_name: str, path: Path, lines: Sequence[str], span: tuple[int, int], ordinal: int
) -> tuple[LedgerEntry | None, list[LedgerProblem]]:
    """Validate one ``[[entry]]`` table; the entry is None when anything is wrong with it."""
    start, end = span
    header = start + 1
    if not isinstance(table, dict):
        return None, [LedgerProblem(path, header, f"entry #{ordinal} must be a table")]
    label = repr(table["id"]) if isinstance(table.get("id"), str) else f"#{ordinal}"
    key_lines = {key: _key_line(lines, start, end, key) or header for key in table}
    if "repro" in table:  # its first [entry.repro...] header, when written as tables
        first = next((i for i in range(start, end) if _REPRO_HEADER.match(lines[i])), None)
        if first is not None:
            key_lines["repro"] = first + 1
    problems = [
        LedgerProblem(path, key_lines[key], f"entry {label}: unknown key {key!r}")
        for key in table
        if key not in _ALLOWED[list_name]
    ]
    problems += [
        LedgerProblem(path, header, f"entry {label}: missing required key {key!r}")
        for key in _KEYS
        if key in _ALLOWED[list_name] and key not in _OPTIONAL[list_name] and key not in table
    ]
    for key, value in table.items():
        problem = _CHECKS[key](value, list_name) if key in _ALLOWED[list_name] else None
        if problem:
            problems.append(LedgerProblem(path, key_lines[key], f"entry {label}: {key!r} {problem}"))
    if quantize_scope_problem(table):
        problems.append(LedgerProblem(path, key_lines.get("scope", header), f"entry {label}: {quantize_scope_problem(table)}"))
    repro = table.get("repro")
    if isinstance(repro, dict) and table.get("backend") in BACKENDS and table.get("scope") in SCOPES:
        problems += [
            LedgerProblem(
                path,
                _repro_line(lines, start, end, where) or key_lines["repro"],
                f"entry {label}: [entry.repro] {message}",
            )
            for where, message in _repro_problems(repro, table["backend"], table["scope"], list_name, path.parent)
        ]
    if problems:
        return None, problems
    models = tuple(table["models"])
    entry = LedgerEntry(
        id=table["id"],
        list_name=list_name,
        models=models,
        backend=table["backend"],
        scope=table["scope"],
        dependency=table["dependency"],
        reason=table["reason"],
        failure=table["failure"],
        added=table["added"],
        path=path,
        line=header,
        upstream=table.get("upstream"),
        upstream_ref=parse_github_url(table["upstream"]) if "upstream" in table else None,
        model_change=table.get("model_change"),
        fixed_in=table.get("fixed_in"),
        repro=_make_repro(repro, path.parent) if isinstance(repro, dict) else None,
        key_lines=key_lines,
        model_lines=tuple(_quoted_line(lines, start, end, m) or key_lines["models"] for m in models),
    )
    return entry, []


def _parse_text(text: str, path: Path, list_name: str) -> tuple[list[LedgerEntry], list[LedgerProblem]]:
    """Entries and problems of one ledger file's text (invalid entries are left out of the list)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return [], [_decode_problem(path, text, error)]
    lines = text.split("\n")
    problems = [
        LedgerProblem(
            path,
            _key_line(lines, 0, len(lines), key) or 1,
            f"unknown top-level key {key!r} (only [[entry]] tables belong here)",
        )
        for key in data
        if key != "entry"
    ]
    tables = data.get("entry", [])
    if not isinstance(tables, list):
        return [], [
            *problems,
            LedgerProblem(
                path,
                _key_line(lines, 0, len(lines), "entry") or 1,
                "'entry' must be an array of tables ([[entry]])",
            ),
        ]
    starts = _header_indices(lines)
    if len(starts) != len(tables):  # e.g. ``entry = [{...}]``: no header to point at
        starts = [0] * len(tables)
    spans = list(zip(starts, [*starts[1:], len(lines)], strict=False))  # each entry runs to the next header
    entries = []
    for ordinal, (table, span) in enumerate(zip(tables, spans, strict=True), start=1):
        entry, entry_problems = _build_entry(table, list_name, path, lines, span, ordinal)
        problems += entry_problems
        if entry is not None:
            entries.append(entry)
    return entries, problems


def _read_text(path: Path) -> str:
    """The file's exact text: bytes are decoded without newline translation so edits keep CRLF files intact."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise LedgerError([LedgerProblem(path, 1, f"not UTF-8: {error}")]) from error


def _scopes_overlap(a: str, b: str) -> bool:
    """``all`` overlaps everything; ``dynamic`` and ``static`` only overlap themselves."""
    return "all" in (a, b) or a == b


def _cross_problems(entries: Iterable[LedgerEntry]) -> list[LedgerProblem]:
    """Duplicate ids anywhere, and a class gated twice for the same backend and an overlapping scope."""
    problems = []
    seen: list[LedgerEntry] = []
    for entry in entries:
        for earlier in seen:
            where = f"{earlier.path}:{earlier.line}"
            if earlier.id == entry.id:
                problems.append(
                    LedgerProblem(
                        entry.path,
                        entry.key_lines.get("id", entry.line),
                        f"duplicate id {entry.id!r} (first defined at {where})",
                    )
                )
            elif (
                earlier.list_name == entry.list_name
                and earlier.backend == entry.backend
                and _scopes_overlap(earlier.scope, entry.scope)
            ):
                problems += [
                    LedgerProblem(
                        entry.path,
                        entry.model_line(model),
                        f"entry {entry.id!r}: {model!r} is already gated by entry {earlier.id!r} at {where} "
                        f"(backend {entry.backend!r}, scopes {earlier.scope!r} and {entry.scope!r} overlap)",
                    )
                    for model in entry.models
                    if model in earlier.models
                ]
        seen.append(entry)
    return problems


def check_ledger(directory: Path) -> tuple[list[LedgerEntry], list[LedgerProblem]]:
    """Every valid entry of both lists and every problem found, for callers that report all at once."""
    entries: list[LedgerEntry] = []
    problems: list[LedgerProblem] = []
    for list_name, filename in LIST_FILES.items():
        path = directory / filename
        if not path.is_file():
            problems.append(LedgerProblem(path, 1, "ledger file is missing"))
            continue
        try:
            found, file_problems = _parse_text(_read_text(path), path, list_name)
        except LedgerError as error:
            found, file_problems = [], list(error.problems)
        entries += found
        problems += file_problems
    return entries, problems + _cross_problems(entries)


def default_registry_dir() -> Path:
    """``$EXPORTBOT_REGISTRY`` when set, else ``registry/`` at the repository root."""
    configured = os.environ.get("EXPORTBOT_REGISTRY")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "registry"


def load_ledger(directory: Path | None = None) -> Ledger:
    """Both lists of ``directory`` (default: ``default_registry_dir()``); ``LedgerError`` on any problem."""
    entries, problems = check_ledger(default_registry_dir() if directory is None else directory)
    if problems:
        raise LedgerError(problems)
    return Ledger(tuple(entries))


@functools.cache
def default_ledger() -> Ledger:
    """The ledger of the default directory, read once per process (exporters consult it on every export)."""
    return load_ledger()
