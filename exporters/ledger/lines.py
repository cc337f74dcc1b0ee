"""Where keys, quoted values and ``[[entry]]`` headers sit in a ledger file's text.

Split out of ``exporters.ledger``: every problem is reported as ``file:line: message`` and every edit works on
whole lines, so validation, reading and editing all locate lines with these few scans of the raw text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"\s*\[\[\s*entry\s*\]\]\s*(?:#.*)?")


def _key_line(lines: Sequence[str], start: int, end: int, key: str) -> int | None:
    """1-based line of ``key = ...`` (or a ``[key]`` header) within ``lines[start:end]``."""
    pattern = re.compile(rf"""\s*(?:\[{{1,2}}\s*)?(["']?){re.escape(key)}\1\s*[=.\]]""")
    return next((i + 1 for i in range(start, end) if pattern.match(lines[i])), None)


def _quoted_line(lines: Sequence[str], start: int, end: int, text: str) -> int | None:
    """1-based line of the first quoted occurrence of ``text`` within ``lines[start:end]``."""
    needles = (f'"{text}"', f"'{text}'")
    return next((i + 1 for i in range(start, end) if any(n in lines[i] for n in needles)), None)


def _header_indices(lines: Sequence[str]) -> list[int]:
    """0-based indices of the ``[[entry]]`` header lines."""
    return [i for i, line in enumerate(lines) if _HEADER.fullmatch(line)]
