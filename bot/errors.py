"""How the CLI reports problems: one line, a documented exit code, a traceback only with ``--debug``.

A failed export is one line: ``failed at STAGE: Type: innermost cause — hint: what to try``. The innermost
cause is the last exception of the ``raise ... from`` chain (torch wraps the real error in two or three
layers), cut at its first line: FX graphs and "please file an issue" paragraphs stay in ``<out>.failed.json``.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import Any

import click

EXIT_OK = 0
EXIT_FAILED = 1  # the job ran and found a problem (export failed validation, lint found errors, ...)
EXIT_USAGE = 2  # bad input: unknown class, unreadable directory, invalid option or config
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it

LINE_LIMIT = 240  # characters of the innermost cause shown; the rest is in <out>.failed.json


class UsageProblem(click.ClickException):
    """Bad input from the user: printed as one line, exit code 2."""

    exit_code = EXIT_USAGE


def innermost(error: BaseException) -> BaseException:
    """The deepest exception of the explicit ``__cause__`` chain (else the implicit context)."""
    seen = {id(error)}
    while True:
        nested = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if nested is None or id(nested) in seen:
            return error
        seen.add(id(nested))
        error = nested


# Sentences that point at more output rather than saying what went wrong.
_BOILERPLATE = re.compile(r"\s*(For more information|Set TORCH_LOGS|If you would like|You can suppress).*$", re.I)


def first_line(text: str, limit: int = LINE_LIMIT) -> str:
    """The first informative line of ``text``, with the next one when the first is only a headline."""
    lines = [_BOILERPLATE.sub("", raw).strip(" -") for raw in str(text).splitlines()]
    lines = [line for line in lines if line]
    line = lines[0] if lines else ""
    if len(line) < 80 and len(lines) > 1:
        line = f"{line} {lines[1]}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def innermost_line(error: BaseException) -> str:
    """``Type: first line`` of the innermost exception."""
    inner = innermost(error)
    kind = type(inner).__name__
    return f"{kind}: {first_line(str(inner))}" if str(inner).strip() else kind


def caused_by(outer_type: str, cause: str | None) -> str:
    """``Outer ← Inner: message``, or ``Type: message`` when the innermost exception is the outer one."""
    if not cause:
        return outer_type
    return cause if cause.split(":", 1)[0] == outer_type else f"{outer_type} ← {cause}"


# (pattern on the error text, stage it applies to or None for any, hint, the option the hint proposes or None).
# First match wins; a row whose option the user already gave is passed over (hint_for), so a later row of the
# same failure says what is left to try.
HINTS: list[tuple[str, str | None, str, str | None]] = [
    (r"not implemented for '(Half|BFloat16)'", None, "an op has no float16/bfloat16 CPU kernel: try --dtype float32",
     "--dtype float32"),
    (r"data-dependent|GuardOnDataDependentSymNode|Could not extract specialized integer", None,
     "data-dependent control flow: try --static, or see EXPORT_SKIPS in registry/", "--static"),
    (r"data-dependent|GuardOnDataDependentSymNode|Could not extract specialized integer", None,
     "data-dependent control flow: see EXPORT_SKIPS in registry/", None),
    (r"Constraints violated|specialized to be a constant|ConstraintViolation|not all values of", None,
     "the model fixes a dim you made dynamic: use --static, or name every input sharing that axis "
     "with --dynamic-dim", None),
    (r"upper bound on every dynamic dim", None, "give bounds: --max-batch/--max-sequence or --dynamic-dim NAME:AXIS:MIN:MAX",
     None),
    (r".", "building model", "check the class name and --task, or export a checkpoint directory", None),
    (r"optimi[sz]", "torch.onnx.export", "try --no-optimize", "--no-optimize"),
    (r".", "torch.onnx.export", "an op the ONNX exporter cannot translate: see `exportbot list-workarounds`, "
     "or try --no-optimize", "--no-optimize"),
    (r".", "torch.onnx.export", "an op the ONNX exporter cannot translate, with the optimizer off too: see "
     "`exportbot list-workarounds`", None),
    (r".", "partition/preprocess", "an ExecuTorch lowering bug: try --static, or --without NAME to bisect "
     "the workarounds (`exportbot list-workarounds`)", "--static"),
    (r".", "partition/preprocess", "an ExecuTorch lowering bug: --without NAME bisects the workarounds "
     "(`exportbot list-workarounds`)", None),
    (r".", "validating", "the artifact does not match eager: if the difference is rounding, loosen --atol/--rtol",
     None),
]
DEFAULT_HINT = "run with --debug for the traceback"


def options_given(dynamic: bool, optimize: bool | None, dtype: str | None = None) -> frozenset[str]:
    """The options of an export that hints must not propose again (``--no-optimize`` when it was given)."""
    given = {"--static"} if not dynamic else set()
    if optimize is False:
        given.add("--no-optimize")
    if dtype == "float32":
        given.add("--dtype float32")
    return frozenset(given)


def hint_for(text: str, stage: str | None, backend: str | None = None, given: frozenset[str] = frozenset(),
             without: tuple[str, ...] | list[str] = ()) -> str:
    """What to try next after a failure at ``stage`` whose text is ``text``, given the options already used.

    An export run ``--without`` a workaround is a probe of it: the hint says so first, since the failure is
    likely what the workaround exists for."""
    if without:
        names = ", ".join(without)
        return (f"--without {names} left out {'that workaround' if len(without) == 1 else 'those workarounds'}: "
                "this may be the failure it works around (the same export without --without shows it)")
    for pattern, where, hint, option in HINTS:
        if (where is None or where == stage) and option not in given and re.search(pattern, text, flags=re.IGNORECASE):
            return hint
    return DEFAULT_HINT


def failure_line(outcome: Any) -> str:
    """``MODEL: STATUS at STAGE: Type ← innermost cause — hint: … (full text: OUT.failed.json)``: one line."""
    stage = f" at {outcome.failed_stage}" if outcome.failed_stage else ""
    if outcome.error_type:
        cause = caused_by(outcome.error_type, outcome.cause)
    else:  # did not validate: the error is the comparison's own summary
        cause = first_line(outcome.error or "no output tensor to compare")
    given = options_given(outcome.dynamic, outcome.optimize, (outcome.options or {}).get("dtype"))
    hint = outcome.hint or hint_for(outcome.error or "", outcome.failed_stage, outcome.backend, given,
                                    outcome.workarounds_disabled)
    where = f" (full text: {outcome.files['failure']})" if "failure" in outcome.files else ""
    return f"{outcome.model}: {outcome.status}{stage}: {cause} — hint: {hint}{where}"


def echo_failure(outcome: Any) -> None:
    """The failure line on stderr, and with ``--debug`` the traceback its failure record holds."""
    import json
    from pathlib import Path

    click.echo(failure_line(outcome), err=True)
    if click.get_current_context().find_root().params.get("debug") and "failure" in outcome.files:
        click.echo(json.loads(Path(outcome.files["failure"]).read_text()).get("traceback", ""), err=True)


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
            click.echo(f"error: {caused_by(type(error).__name__, innermost_line(error))} ({DEFAULT_HINT})", err=True)
            sys.exit(EXIT_FAILED)

    return wrapper


class OneLineUsageError(click.UsageError):
    """A bad option or choice, shown as one line (``Error: …``) instead of click's usage block: the message
    names the option and the choices already, and ``--help`` is there for the rest."""

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True, file=file)


def one_line(error: click.UsageError) -> OneLineUsageError:
    return error if isinstance(error, OneLineUsageError) else OneLineUsageError(error.format_message(), error.ctx)


class ExportbotGroup(click.Group):
    """The root group: ``--debug`` anywhere on the line, Ctrl-C is exit 130, typos get a suggestion, and a bad
    option or choice is one line with exit code 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:  # an option of the root group itself
            raise one_line(error) from None

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        end = args.index("--") if "--" in args else len(args)
        debug = [a for a in args[:end] if a == "--debug"]
        args = debug[:1] + [a for a in args[:end] if a != "--debug"] + args[end:]
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        from exporters.stages import interrupts_recorded

        try:
            with interrupts_recorded():  # a Ctrl-C is never lost in a callback Python swallows it in
                return super().invoke(ctx)
        except click.UsageError as error:  # a subcommand's option or argument (parsed inside invoke)
            raise one_line(error) from None
        except KeyboardInterrupt:
            click.echo("\ninterrupted (nothing half-written was kept)", err=True)
            ctx.exit(EXIT_INTERRUPTED)


class SuggestingChoice(click.Choice):
    """A ``click.Choice`` whose error adds "did you mean" for a near miss."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            from exporters.export_options import did_you_mean

            suggestion = did_you_mean(str(value), self.choices)
            if not suggestion:
                raise
            self.fail(f"{value!r} is not one of {', '.join(map(repr, self.choices))}{suggestion}", param, ctx)
