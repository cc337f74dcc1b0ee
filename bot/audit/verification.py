"""The memory of verification: what each ledger entry was last re-run against, kept in the repository.

Why a file in the repository (``registry/verified.toml``) and not a cache or database: the scheduled job
and a developer's ``exportbot audit`` must compute the same plan, and a reviewer must be able to see in a
diff when an entry was last checked and against which versions ("repository as database"). One table per
entry id (``verified-workarounds.toml`` has the same shape, one table per workaround name; a separate file
so that pruning the records of removed ledger entries never touches those of workarounds)::

    [bert-dynamo-static-skip]
    verified_on = 2025-06-01
    verdict = "still-needed"            # the verdict of that re-run
    upstream_state = "closed:completed" # see bot.audit.plan.describe_state
    exporter_version = "3f1c9a0b2d4e"   # see exporter_version()
    candidate = "torch==2.12.0"         # only when recorded by `audit --candidate`: not the pinned stack
    [bert-dynamo-static-skip.versions]  # the backend's stack (bot.audit.pins.BACKEND_STACK) at that re-run
    torch = "2.13.0"
    transformers = "5.23.0"

Saving edits the existing tomlkit document in place, touching only values that changed, so comments
and key order survive and a re-run that found nothing new leaves the file byte-for-byte as it was.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
from tomlkit.items import Table

VERIFIED_FILE = "verified.toml"
WORKAROUNDS_VERIFIED_FILE = "verified-workarounds.toml"  # `audit --workarounds`: one table per workaround
_HEADERS = {
    VERIFIED_FILE: (
        "# Written by `exportbot audit --update-verification`: when each ledger entry was last re-run without\n"
        "# its workaround, against which pinned versions, and with which verdict. See bot/audit/verification.py.\n"
    ),
    WORKAROUNDS_VERIFIED_FILE: (
        "# Written by `exportbot audit --workarounds --update-verification`: when each registered workaround\n"
        "# was last probed (its exports re-run with only it disabled), against which pinned versions, and with\n"
        "# which verdict. See bot/audit/verification.py.\n"
    ),
}
_EXPORTERS_DIR = Path(__file__).resolve().parents[2] / "exporters"


class VerificationError(ValueError):
    """``verified.toml`` cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Verification:
    """The last re-run of one entry."""

    entry_id: str
    verified_on: datetime.date
    versions: dict[str, str] = field(default_factory=dict)
    exporter_version: str = ""
    verdict: str = ""
    upstream_state: str = ""
    # ``audit --candidate PKG==VER --update-verification``: recorded at a stack where PKG was not the pin
    # ("onnx==1.21.0"), e.g. a real bug verified at the release it belongs to; empty at the pinned stack.
    candidate: str = ""


def verification_path(registry_dir: Path, filename: str = VERIFIED_FILE) -> Path:
    return Path(registry_dir) / filename


def exporter_version(exporters_dir: Path = _EXPORTERS_DIR) -> str:
    """A short hash of the contents of ``exporters/**/*.py``, each file named by its path in the package.

    Why a content hash and not the package version: the version string changes only at releases, while
    the workarounds themselves live in these files and change with every commit that touches them. The
    hash is recorded for the reader (did our code change since the last check?); it does not make an
    entry due, because every commit to the exporters would then re-run every entry.
    """
    digest = hashlib.sha256()
    root = Path(exporters_dir)
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def load_verification(registry_dir: Path, filename: str = VERIFIED_FILE) -> dict[str, Verification]:
    """Entry id → its last verification; an absent file means nothing was verified yet."""
    path = verification_path(registry_dir, filename)
    if not path.is_file():
        return {}
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except Exception as error:  # tomlkit raises several parse error types
        raise VerificationError(f"{path}: invalid TOML: {error}") from None
    records: dict[str, Verification] = {}
    for entry_id, table in document.items():
        if not isinstance(table, dict) or not isinstance(table.get("verified_on"), datetime.date):
            raise VerificationError(f"{path}: [{entry_id}] needs a table with a verified_on date")
        versions = table.get("versions", {})
        if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
            raise VerificationError(f"{path}: [{entry_id}].versions must map package names to versions")
        records[entry_id] = Verification(
            entry_id=entry_id,
            verified_on=table["verified_on"],
            versions=dict(versions),
            exporter_version=str(table.get("exporter_version", "")),
            verdict=str(table.get("verdict", "")),
            upstream_state=str(table.get("upstream_state", "")),
            candidate=str(table.get("candidate", "")),
        )
    return records


def save_verification(
    registry_dir: Path,
    records: Iterable[Verification],
    *,
    keep_ids: Iterable[str] | None = None,
    filename: str = VERIFIED_FILE,
) -> bool:
    """Merge ``records`` into ``verified.toml``; drop tables whose id is not in ``keep_ids`` (when given).

    Returns whether the file changed. Values equal to what is stored are not rewritten, so unchanged
    entries keep their exact bytes; ``keep_ids`` (the ledger's current ids) prunes records of entries
    that were removed from the ledger, so the file never outlives its entries.
    """
    path = verification_path(registry_dir, filename)
    old_text = path.read_text(encoding="utf-8") if path.is_file() else None
    new_text = merged_text(old_text, records, keep_ids=keep_ids, filename=filename)
    if new_text == old_text:
        return False
    path.write_text(new_text, encoding="utf-8")
    return True


def merged_text(
    old_text: str | None, records: Iterable[Verification], *, keep_ids: Iterable[str] | None = None,
    filename: str = VERIFIED_FILE,
) -> str:  # fmt: skip
    """The verification file's text with ``records`` merged in (minimal edits; None: a new file). What
    :func:`save_verification` writes, and what a bump PR commits (the records at the new versions)."""
    document = tomlkit.parse(old_text if old_text is not None else _HEADERS[filename])
    if keep_ids is not None:
        kept = set(keep_ids)
        for stale in [key for key in document if key not in kept]:
            del document[stale]
    for record in records:
        table = document.get(record.entry_id)
        if not isinstance(table, Table):
            table = tomlkit.table()
            document[record.entry_id] = table
        _set(table, "verified_on", record.verified_on)
        _set(table, "verdict", record.verdict)
        _set(table, "upstream_state", record.upstream_state)
        _set(table, "exporter_version", record.exporter_version)
        if record.candidate:
            _set(table, "candidate", record.candidate)
        elif "candidate" in table:  # verified at the pins again: no longer a non-pinned record
            del table["candidate"]
        _set_versions(table, record.versions)
    return document.as_string()


def _set(table: Table, key: str, value: object) -> None:
    if table.get(key) != value:
        table[key] = value


def _set_versions(table: Table, versions: Mapping[str, str]) -> None:
    current = table.get("versions")
    if not isinstance(current, Table):
        current = tomlkit.table()
        table["versions"] = current
    for name in [name for name in current if name not in versions]:
        del current[name]
    for name, version in versions.items():
        _set(current, name, version)
