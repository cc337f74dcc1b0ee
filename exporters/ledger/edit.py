"""Editing the ledger (the bot's API): remove an entry or one of its classes, set ``fixed_in`` or ``upstream``, add
an entry.

Split out of ``exporters.ledger`` (which re-exports these functions). Editing keeps every byte outside the
edited span: value edits inside one entry go through tomlkit; removing or inserting whole lines is done on
the text because tomlkit files comments placed above an ``[[entry]]`` header under the *previous* table,
so its own delete would take a neighbour's comment along. Every edit is re-parsed and compared with the
intended data before it is written.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit

from exporters.ledger.entries import _KEYS, LedgerError, LedgerProblem
from exporters.ledger.lines import _header_indices
from exporters.ledger.reading import _cross_problems, _list_name_for, _parse_text, _read_text


def _split(text: str) -> tuple[list[str], str]:
    """Lines without their ``\\n`` and the final newline, so that joining them back is exact."""
    body, final = (text[:-1], "\n") if text.endswith("\n") else (text, "")
    return body.split("\n"), final


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _entry_starts(lines: Sequence[str]) -> list[int]:
    """Where each entry begins: its header, or the comment lines written directly above it."""
    starts = []
    for header in _header_indices(lines):
        start = header
        while start > 0 and _is_comment(lines[start - 1]):
            start -= 1
        starts.append(start)
    return starts


def _valid_data(path: Path, text: str) -> list[dict[str, Any]]:
    """The entries of a valid ledger file as plain data; the bot never edits a file that is already wrong."""
    entries, problems = _parse_text(text, path, _list_name_for(path))
    problems += _cross_problems(entries)
    if problems:
        raise LedgerError(problems)
    return tomllib.loads(text).get("entry", [])


def _locate(path: Path, entry_id: str) -> tuple[str, list[dict[str, Any]], int]:
    """The file's text, its entries as plain data, and the index of ``entry_id`` among them."""
    text = _read_text(path)
    data = _valid_data(path, text)
    if len(_header_indices(_split(text)[0])) != len(data):
        raise LedgerError(
            [LedgerProblem(path, 1, "entries must be written as [[entry]] tables to be edited")]
        )
    for index, table in enumerate(data):
        if table["id"] == entry_id:
            return text, data, index
    raise LedgerError([LedgerProblem(path, 1, f"no entry with id {entry_id!r}")])


def _commit(path: Path, text: str, expected: list[dict[str, Any]]) -> str:
    """Write ``text`` only if it is a valid ledger whose entries are exactly ``expected``."""
    if _valid_data(path, text) != expected:
        raise LedgerError(
            [LedgerProblem(path, 1, "edit would change more than the intended entry; file left as it was")]
        )
    path.write_bytes(text.encode("utf-8"))
    return text


def remove_entry(path: Path, entry_id: str) -> str:
    """Delete entry ``entry_id`` with the comment lines directly above it; every other byte stays."""
    text, data, index = _locate(path, entry_id)
    lines, final = _split(text)
    starts = _entry_starts(lines)
    start = starts[index]
    if index + 1 < len(starts):
        end = starts[index + 1]  # the blank lines separating it from the next entry go with it
    else:
        end = len(lines)
        while start > 0 and not lines[start - 1].strip():  # the last entry takes its separator along
            start -= 1
    kept = lines[:start] + lines[end:]
    new_text = "\n".join(kept) + final if kept else ""
    return _commit(path, new_text, data[:index] + data[index + 1 :])


def remove_model(path: Path, entry_id: str, model_class: str) -> str:
    """Drop ``model_class`` from an entry's ``models``; removing the last one removes the entry."""
    text, data, index = _locate(path, entry_id)
    if model_class not in data[index]["models"]:
        raise LedgerError([LedgerProblem(path, 1, f"entry {entry_id!r} does not list {model_class!r}")])
    if data[index]["models"] == [model_class]:
        return remove_entry(path, entry_id)
    document = tomlkit.parse(text)
    document["entry"][index]["models"].remove(model_class)
    data[index]["models"].remove(model_class)
    return _commit(path, document.as_string(), data)


def keyed(line: str) -> str:
    """The key a ``key = value`` line sets (anything else gives text that is no key)."""
    return line.split("=", 1)[0].strip()


def _set_value(path: Path, entry_id: str, key: str, value: str) -> str:
    """Set one string key of an entry: tomlkit replaces an existing value (keeping the line's comment); a new key
    is a line of its own at its place in schema order (after the last key written before it in ``_KEYS``), and
    never below the entry's sub-tables (``[entry.repro]``), where it would belong to them."""
    text, data, index = _locate(path, entry_id)
    had = key in data[index]
    data[index][key] = value
    if had:
        document = tomlkit.parse(text)
        document["entry"][index][key] = value
        return _commit(path, document.as_string(), data)
    lines, final = _split(text)
    headers = _header_indices(lines)
    end = ([*_entry_starts(lines), len(lines)])[index + 1]
    end = next((i for i in range(headers[index] + 1, end) if lines[i].lstrip().startswith("[")), end)
    earlier = set(_KEYS[: _KEYS.index(key)])
    values = [i for i in range(headers[index], end) if lines[i].strip() and not _is_comment(lines[i])]
    keys = [i for i in values if lines[i].split("=", 1)[0].strip() in _KEYS]
    # the value of the last key written before it ends on the last value line above the next key
    later = [i for i in keys if keyed(lines[i]) not in earlier and i > max((k for k in keys if keyed(lines[k]) in earlier),
                                                                          default=-1)]  # fmt: skip
    after = max(i for i in values if i < later[0]) if later else max(values)
    lines.insert(after + 1, f"{key} = {tomlkit.string(value).as_string()}")
    return _commit(path, "\n".join(lines) + final, data)


def set_fixed_in(path: Path, entry_id: str, spec: str) -> str:
    """Record the release that fixes the entry's bug (``"onnxscript>=0.7.3"``), replacing any earlier one."""
    return _set_value(path, entry_id, "fixed_in", spec)


def set_upstream(path: Path, entry_id: str, url: str) -> str:
    """Link the entry to its upstream issue or pull request (``upstream = URL``, after ``scope``), replacing any
    earlier one: what the shrink PR's "links" section writes."""
    return _set_value(path, entry_id, "upstream", url)


def _toml_value(key: str, value: Any) -> Any:
    """Regexes are written as literal strings when possible, so backslashes read as in Python."""
    if key == "failure" and isinstance(value, str) and "'" not in value and "\n" not in value:
        return tomlkit.string(value, literal=True)
    return value


def add_entry(path: Path, fields: Mapping[str, Any]) -> str:
    """Append a ``[[entry]]`` block (keys in schema order, a blank line before it) and return the text."""
    text = _read_text(path)
    data = _valid_data(path, text)
    table = tomlkit.table()
    for key in sorted(fields, key=lambda k: _KEYS.index(k) if k in _KEYS else len(_KEYS)):
        table[key] = _toml_value(key, fields[key])
    block = tomlkit.document()
    block["entry"] = tomlkit.aot()
    block["entry"].append(table)
    if text and not text.endswith("\n"):
        text += "\n"
    separator = "" if not text or text.endswith("\n\n") else "\n"
    expected = {key: list(value) if isinstance(value, tuple) else value for key, value in fields.items()}
    return _commit(path, text + separator + block.as_string(), [*data, expected])
