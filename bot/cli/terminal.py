"""Text that fits an 80-column terminal: short issue links, shortened dotted paths, compact tables."""

from __future__ import annotations

import re

from rich import box
from rich.table import Table

_GITHUB = re.compile(r"^https?://github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)\b")


def short_link(url: str | None) -> str:
    """``https://github.com/pytorch/pytorch/issues/141107`` → ``pytorch/pytorch#141107``; other URLs as given."""
    if not url:
        return "—"
    match = _GITHUB.match(url)
    return f"{match[1]}/{match[2]}#{match[3]}" if match else url


def short_target(path: str, width: int = 38) -> str:
    """The last components of a dotted path that fit ``width``: ``ConvolutionConfig.check_constraints``."""
    parts = path.split(".")
    short = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(short) > width:
            break
        short = f"{part}.{short}"
    return short


def compact_table(*columns: str, title: str | None = None) -> Table:
    """A table without vertical rules (two columns of padding less per column) that folds long cells."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def verdict_text(verdict: str, reasons: list[str], already_said: list[str]) -> str:
    """A verdict and the reasons for it that the due/why text did not already give."""
    said = set(already_said)
    return "\n".join([verdict, *(r for r in reasons if r not in said)])
