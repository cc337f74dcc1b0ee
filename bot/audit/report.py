"""The audit report's identity, and the field-by-field check ``exportbot pr`` runs before any request.

Why a report carries an identity: ``exportbot pr`` turns a report into writes on a repository (a
branch, a PR, a dashboard). A report audited in another repository, or one that covers only some
entries (``audit --entry ID``), must not be mistaken for a complete picture of this one. So the audit
records (docs/audit-report.md, schema 2):

* ``repository``: ``owner/name`` of the checkout it ran in ([tool.exportbot] repository, else
  ``$GITHUB_REPOSITORY``, else the ``origin`` remote); ``null`` when none could be told;
* ``base_commit``: the checkout's ``HEAD`` (``$GITHUB_SHA`` outside a git checkout), ``null`` if unknown;
* ``registry_digest``: :func:`registry_digest` of the ledger files it audited;
* ``selection``: what the rows cover, ``{"entries": "complete" | [ids], "workarounds": "complete" |
  [names]}``; ``[]`` for workarounds when the audit ran without ``--workarounds``.

Why a field-by-field check: a report is a file anyone can hand to the command. A string where a number
belongs used to crash after the GitHub reads had started; :func:`check_report` names the first bad
field (``entries[2] (t5-cast-folding).upstream_state: expected an object, got a string``) before
anything is asked of GitHub, and the CLI turns that into exit 2.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.pins import BACKEND_STACK
from bot.audit.verdict import VERDICTS
from bot.config import ConfigError, find_config, load_config
from exporters.ledger import LIST_FILES, SCOPES

REPORT_SCHEMA = 2
COMPLETE = "complete"
MODES = ("static", "dynamic")
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")
_SHA = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_REMOTE = re.compile(r"(?:github\.com[:/]|^[a-z]+://[^/]+/)(?P<name>[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+?)(?:\.git)?/?$")


class ReportError(ValueError):
    """The audit report cannot be used (not JSON, wrong schema, a field missing or of the wrong type)."""


# ── Identity ──
@dataclass(frozen=True)
class ReportIdentity:
    """Where and on what an audit ran; written into the report by bot.audit."""

    repository: str | None
    base_commit: str | None
    registry_digest: str
    selection: dict[str, Any] = field(default_factory=lambda: {"entries": COMPLETE, "workarounds": []})

    def as_dict(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "base_commit": self.base_commit,
            "registry_digest": self.registry_digest,
            "selection": self.selection,
        }


def registry_digest(texts: Mapping[str, bytes | None]) -> str:
    """sha256 over the ledger files (file name → bytes, None when absent), in a fixed order.

    The same bytes give the same digest whether they were read from a checkout or from a commit on
    GitHub, so ``exportbot pr`` can say whether the base branch still holds the ledger the audit read.
    """
    digest = hashlib.sha256()
    for name in sorted(LIST_FILES.values()):
        data = texts.get(name)
        digest.update(name.encode() + b"\0" + (b"-" if data is None else b"+" + data) + b"\0")
    return digest.hexdigest()


def local_registry_digest(registry_dir: Path) -> str:
    files = {name: (Path(registry_dir) / name) for name in LIST_FILES.values()}
    return registry_digest({name: p.read_bytes() if p.is_file() else None for name, p in files.items()})


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def checkout_root(directory: Path) -> Path | None:
    """The top of the git checkout holding ``directory``; None outside one."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    return Path(top) if top else None


def head_commit(directory: Path) -> str | None:
    """``HEAD`` of the checkout holding ``directory``, else ``$GITHUB_SHA``; None when neither is known."""
    sha = _git(directory, "rev-parse", "HEAD") or os.environ.get("GITHUB_SHA", "")
    return sha if _SHA.fullmatch(sha) else None


def checkout_repository(directory: Path, configured: str | None = None) -> str | None:
    """``owner/name`` of the checkout: the configured one, else ``$GITHUB_REPOSITORY``, else ``origin``."""
    for candidate in (configured, os.environ.get("GITHUB_REPOSITORY")):
        if candidate and _REPOSITORY.fullmatch(candidate):
            return candidate
    match = _REMOTE.search(_git(directory, "remote", "get-url", "origin") or "")
    return match.group("name") if match else None


def audit_selection(
    entry_ids: Iterable[str], ledger_ids: Iterable[str], workaround_names: Iterable[str] | None
) -> dict[str, Any]:
    """What an audit's rows cover: ``--entry`` ids split into ledger entries and workarounds.
    ``workaround_names`` is None when the audit ran without ``--workarounds``."""
    chosen = list(dict.fromkeys(entry_ids))
    ledger = set(ledger_ids)
    if workaround_names is None:
        workarounds: str | list[str] = []
    elif chosen:
        names = set(workaround_names)
        workarounds = sorted(i for i in chosen if i in names)
    else:
        workarounds = COMPLETE
    entries: str | list[str] = sorted(i for i in chosen if i in ledger) if chosen else COMPLETE
    return {"entries": entries, "workarounds": workarounds}


def report_identity(
    registry_dir: Path, selection: dict[str, Any], configured_repository: str | None = None
) -> ReportIdentity:
    """The identity of an audit of ``registry_dir`` (the checkout around it gives repository and commit;
    its pyproject.toml's [tool.exportbot] repository, when set, names the repository)."""
    root = checkout_root(registry_dir) or Path(registry_dir)
    if configured_repository is None:
        try:
            configured_repository = load_config(find_config(root)).repository
        except ConfigError:
            configured_repository = None
    return ReportIdentity(
        repository=checkout_repository(root, configured_repository),
        base_commit=head_commit(root),
        registry_digest=local_registry_digest(registry_dir),
        selection=selection,
    )


def covers(report: Mapping[str, Any], kind: str, row_id: str) -> bool:
    """Whether the report speaks for row ``row_id`` (``kind`` "entries" or "workarounds")."""
    chosen = report["selection"][kind]
    return chosen == COMPLETE or row_id in chosen


def is_complete(report: Mapping[str, Any], kind: str) -> bool:
    return report["selection"][kind] == COMPLETE


def check_repository(report: Mapping[str, Any], repository: str | None) -> None:
    """Refuse a report audited in another repository than the one the PR goes to."""
    if repository is None:
        return
    audited = report["repository"]
    if audited is None:
        raise ReportError(
            f"the report names no repository, so it cannot be told apart from another repository's: audit "
            f"again in a checkout of {repository} (or set [tool.exportbot] repository)"
        )
    if audited.lower() != repository.lower():
        raise ReportError(
            f"the report was audited in {audited}, not {repository}: its entries say nothing about "
            f"{repository}'s ledger"
        )


def scope_to_ledger(report: Mapping[str, Any], texts: Mapping[str, bytes | None], entries: Iterable[Any],
                    where: str) -> tuple[Mapping[str, Any], str | None]:  # fmt: skip
    """The report as far as it speaks for the ledger ``where`` holds, and a warning when that is not all of it.

    ``texts``: that ledger's files (file name → bytes, None when absent); ``entries``: its entries. The same
    digest: the report as it is. Another ledger (the base moved since the audit, or the report was made over
    another registry): it covers only the rows whose entry the base still lists the same way (id, list,
    models, backend, scope); the rest of the base's entries are not covered, so the dashboard keeps their rows.
    A report sharing no entry with a non-empty ledger is refused (:class:`ReportError`): a report of another
    ledger that named this repository used to replace the dashboard's 31 rows with its 0.
    """
    digest = registry_digest(texts)
    if report["registry_digest"] == digest:
        return report, None
    base = {e.id: (e.list_name, tuple(e.models), e.backend, e.scope) for e in entries}
    rows = [row for row in report["entries"]
            if base.get(row["id"]) == (row["list"], tuple(row["models"]), row["backend"], row["scope"])]  # fmt: skip
    commit = report.get("base_commit")
    audited = f"registry digest {report['registry_digest'][:12]}" + (f" at {commit[:12]}" if commit else "")
    if not rows and (base or report["entries"]):
        raise ReportError(
            f"the report was audited over another ledger ({audited}) than {where} holds ({digest[:12]}) and shares "
            f"none of its entries: audit again on {where}"
        )
    kept = {row["id"] for row in rows}
    scoped = dict(report) | {"entries": rows, "selection": {**report["selection"], "entries": sorted(kept)}}
    left = len(report["entries"]) - len(rows)
    return scoped, (
        f"the report was audited over another ledger ({audited}) than {where} holds ({digest[:12]}): it speaks for "
        f"the {len(rows)} entries both list the same way" + (f", not for {left} more" if left else "")
        + f"; the other {len(base) - len(rows)} of {where}'s entries keep their rows"
    )


# ── The check ──
Check = Callable[[Any, str], None]


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "an object", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def _expect(ok: bool, where: str, expected: str, value: Any) -> None:
    if not ok:
        shown = f" {value!r}" if isinstance(value, str | int | float) and not isinstance(value, bool) else ""
        raise ReportError(f"{where}: expected {expected}, got {_kind(value)}{shown}"[:300])


def _string(value: Any, where: str) -> None:
    _expect(isinstance(value, str), where, "a string", value)


def _pattern(pattern: re.Pattern[str], what: str) -> Check:
    def check(value: Any, where: str) -> None:
        _expect(isinstance(value, str) and bool(pattern.fullmatch(value)), where, what, value)

    return check


def _one_of(choices: Iterable[str]) -> Check:
    options = tuple(choices)

    def check(value: Any, where: str) -> None:
        _expect(value in options, where, "one of " + ", ".join(map(repr, options)), value)

    return check


def _integer(minimum: int | None = None) -> Check:
    def check(value: Any, where: str) -> None:
        ok = isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)
        _expect(ok, where, "an integer" + (f" of at least {minimum}" if minimum is not None else ""), value)

    return check


def _number(value: Any, where: str) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    _expect(ok, where, "a finite number", value)


def _boolean(value: Any, where: str) -> None:
    _expect(isinstance(value, bool), where, "true or false", value)


def _nullable(check: Check) -> Check:
    def nullable(value: Any, where: str) -> None:
        if value is not None:
            check(value, where)

    return nullable


def _array(item: Check, *, non_empty: bool = False) -> Check:
    def check(value: Any, where: str) -> None:
        _expect(isinstance(value, list) and (bool(value) or not non_empty), where,
                "a non-empty array" if non_empty else "an array", value)  # fmt: skip
        for index, element in enumerate(value):
            item(element, f"{where}[{index}]")

    return check


def _object(fields: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    def check(value: Any, where: str) -> None:
        _expect(isinstance(value, dict), where, "an object", value)
        for name, field_check in fields.items():
            if name not in value:
                raise ReportError(f"{where}.{name}: missing")
            field_check(value[name], f"{where}.{name}")
        for name, field_check in (optional or {}).items():
            if name in value:
                field_check(value[name], f"{where}.{name}")

    return check


def _mapping(item: Check) -> Check:
    def check(value: Any, where: str) -> None:
        _expect(isinstance(value, dict), where, "an object", value)
        for key, element in value.items():
            item(element, f"{where}.{key}")

    return check


def _backend(value: Any, where: str) -> None:
    ok = isinstance(value, str) and value.split(".")[0] in BACKEND_STACK
    _expect(ok, where, f"a backend ({', '.join(BACKEND_STACK)}, or one with a .delegate)", value)


def _selected(value: Any, where: str) -> None:
    _expect(value == COMPLETE or isinstance(value, list), where, f"{COMPLETE!r} or an array of ids", value)
    if isinstance(value, list):
        _array(_string)(value, where)


_STRINGS = _array(_string)
_EVIDENCE = _object(
    {"model": _string, "mode": _one_of(MODES), "run": _integer(1), "status": _string,
     "max_abs_diff": _nullable(_number)},
    {"error": _nullable(_string), "seconds": _nullable(_number)},
)  # fmt: skip
_UPSTREAM_STATE = _object({"summary": _string})
_ROW_UPSTREAM: dict[str, Check] = {
    "upstream": _nullable(_string), "upstream_state": _UPSTREAM_STATE, "verdict": _one_of(VERDICTS),
}  # fmt: skip
_ROW_OPTIONAL: dict[str, Check] = {"reasons": _STRINGS, "evidence": _array(_EVIDENCE)}
_ENTRY = _object(
    {"id": _string, "list": _one_of(LIST_FILES), "models": _array(_string, non_empty=True), "backend": _backend,
     "scope": _one_of(SCOPES), **_ROW_UPSTREAM},
    _ROW_OPTIONAL,
)  # fmt: skip
_WORKAROUND = _object(
    {"id": _string, "backend": _backend,
     "exports": _array(_object({"model": _string, "mode": _one_of(MODES)})), **_ROW_UPSTREAM},
    {**_ROW_OPTIONAL, "source": _nullable(_string), "removal": _nullable(_string)},
)  # fmt: skip
_TOP = _object(
    {
        "generated_at": _string, "partial": _boolean, "exporter_version": _string,
        "pins": _mapping(_nullable(_string)), "runs": _integer(1),
        "repository": _nullable(_pattern(_REPOSITORY, "'owner/name'")),
        "base_commit": _nullable(_pattern(_SHA, "a 40-digit commit SHA")),
        "registry_digest": _pattern(_DIGEST, "a sha256 hex digest"),
        "selection": _object({"entries": _selected, "workarounds": _selected}),
        "entries": _array(_object({})),
    },
    {"rate_limited_until": _nullable(_string), "workarounds": _array(_object({}))},
)  # fmt: skip


def _rows(data: Mapping[str, Any], kind: str, check: Check) -> None:
    seen: set[str] = set()
    for index, row in enumerate(data.get(kind) or []):
        label = f"{kind}[{index}]" + (f" ({row['id']})" if isinstance(row.get("id"), str) else "")
        check(row, label)
        if row["id"] in seen:
            raise ReportError(f"{label}.id: {row['id']!r} appears twice")
        seen.add(row["id"])
        if not covers(data, kind, row["id"]):
            raise ReportError(f"{label}.id: {row['id']!r} is not in the report's selection.{kind}")


def check_report(data: Any) -> Mapping[str, Any]:
    """``data`` if it is a usable schema-2 audit report; else :class:`ReportError` naming the first bad field."""
    if not isinstance(data, dict):
        raise ReportError(f"not an exportbot audit report: expected an object, got {_kind(data)}")
    schema = data.get("schema")
    if schema != REPORT_SCHEMA:
        hint = "; audit again with this version of exportbot" if isinstance(schema, int) else ""
        raise ReportError(f"not an exportbot audit report of schema {REPORT_SCHEMA} (schema {schema!r}){hint}")
    candidate = data.get("candidate")
    if candidate:
        raise ReportError(
            f"this audit tried the unpinned candidate {candidate}: its removals hold once the pin "
            "moves; bump the pin, then audit again"
        )
    _TOP(data, "report")
    _rows(data, "entries", _ENTRY)
    _rows(data, "workarounds", _WORKAROUND)
    return data
