"""Result files: JSON Lines read with schema checks, appended one fsynced line at a time, repaired after a kill."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bot.sweep.records import SCHEMA, started_at

# The committed record set (sweeps/README.md): one file per backend, mode and shard, e.g.
# sweeps/catalogue/onnx-static-shard-3-of-8.jsonl and sweeps/generation/onnx-shard-3-of-8.jsonl. `sweep coverage`
# and `workarounds index` read these when no FILES are named (coverage also reads the census shards), as do the
# audit's --candidate regression sample and scripts/check_generated.py. Paths are relative to the repository root.
DEFAULT_RESULTS = ("sweeps/catalogue/*-shard-*-of-*.jsonl", "sweeps/generation/*-shard-*-of-*.jsonl")
DEFAULT_CENSUS = "sweeps/tiny-census/shard-*-of-*.jsonl"
_SHARD_FILE = re.compile(r"(?:[a-z0-9]+-)*shard-\d+-of-\d+\.jsonl")  # not a re-run or scratch file beside them


def default_results(root: Path = Path()) -> list[Path]:
    """The committed result files under ``root`` (``DEFAULT_RESULTS``), sorted; relative paths for a relative root.
    Their order does not matter: merging keeps the newest record of each export."""
    found = (path for pattern in DEFAULT_RESULTS for path in root.glob(pattern))
    return sorted(path for path in found if _SHARD_FILE.fullmatch(path.name))


def default_census(root: Path = Path()) -> list[Path]:
    """The committed tiny-census shards under ``root`` (``DEFAULT_CENSUS``), sorted (a class is in one shard; in
    its file, a later line supersedes an earlier one)."""
    return sorted(path for path in root.glob(DEFAULT_CENSUS) if _SHARD_FILE.fullmatch(path.name))


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
    try:
        started_at(record)  # merging orders a key's records by it
    except ValueError as error:
        raise ResultsError(f"{where}: {error}") from None
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


