"""``--json``: how every command hands a machine-readable result to a script.

Two spellings, one behaviour:

* ``--json``, a flag (export, generate, list-workarounds, sweep run/triage/coverage, pr): the result is one
  JSON document on stdout *instead of* the tables; progress, warnings and failure lines stay on stderr.
* ``--json FILE`` (audit, bisect: long bot runs whose JSON is kept as a CI artifact): the document is
  written to FILE (through a temporary file and a rename: never half-written) and the tables still print;
  ``--json -`` puts the document on stdout and the tables on stderr.

Either way stdout then holds exactly one JSON document, so ``exportbot ... --json | jq`` always parses.
Bad input (exit 2) is one line on stderr and nothing on stdout, with or without ``--json``, as for every
command; so is Ctrl-C (exit 130). A run that ends in a failure it can describe (a failed export, a stopped
``pr``) still prints its document, with exit 1. The shapes are documented next to each command's other output: docs/sweep-results.md (sweep),
docs/audit-report.md (audit, pr, bisect), docs/export-format.md and README.md (export).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

STDOUT = Path("-")
F = TypeVar("F", bound=Callable[..., Any])


def json_flag(what: str, documented_in: str) -> Callable[[F], F]:
    """The ``--json`` flag (parameter ``as_json``): ``what`` as JSON on stdout instead of the tables."""
    return click.option(
        "--json", "as_json", is_flag=True,
        help=f"Print {what} as one JSON document on stdout instead of the tables (shape: {documented_in}); "
        "progress and messages stay on stderr.",
    )  # fmt: skip


def json_file_option(what: str, documented_in: str) -> Callable[[F], F]:
    """The ``--json FILE`` option (parameter ``json_file``); ``-`` is stdout."""
    return click.option(
        "--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help=f"Write {what} as JSON to this file (shape: {documented_in}); - prints it on stdout and the "
        "tables on stderr.",
    )  # fmt: skip


def on_stdout(json_file: Path | None) -> bool:
    """Whether ``--json FILE`` asked for stdout: then everything else the command prints goes to stderr."""
    return json_file == STDOUT


def emit_json(data: Any, target: Path = STDOUT) -> None:
    """``data`` as indented JSON on stdout, or written atomically to ``target``."""
    text = json.dumps(data, indent=2)
    if target == STDOUT:
        click.echo(text)
    else:
        write_atomically(target, text + "\n")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half-written file."""
    temporary = path.with_name(f".{path.name}.partial-{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
