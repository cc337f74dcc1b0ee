"""How the CLI reports problems: one line, a documented exit code, a traceback only with ``--debug``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

EXIT_OK = 0
EXIT_FAILED = 1  # the job ran and found a problem (export failed validation, lint found errors, ...)
EXIT_USAGE = 2  # bad input: unknown class, unreadable directory, invalid option or config


class UsageProblem(click.ClickException):
    """Bad input from the user: printed as one line, exit code 2."""

    exit_code = EXIT_USAGE


def report_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn unexpected exceptions into one line and exit code 1, unless ``--debug`` was given."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        context = click.get_current_context()
        debug = bool(context.find_root().params.get("debug"))
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as error:
            if debug:
                raise
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            click.echo(f"error: {type(error).__name__}: {message} (run with --debug for the traceback)", err=True)
            sys.exit(EXIT_FAILED)

    return wrapper
