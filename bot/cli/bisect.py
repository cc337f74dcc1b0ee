"""``exportbot bisect TARGET --dependency PKG``: the command; the search itself is ``bot.run.bisect``.

Prints the candidate releases, a line per probe (a probe takes minutes) and the result table on stderr
(stdout with ``--json -`` holds only the JSON), and writes ``fixed_in`` into a ledger entry's TOML unless
``--no-write``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.audit.workaround_index import (
    DEFAULT_JSON,
    DEFAULT_PROBE_LIMIT,
)
from bot.cli.json_output import emit_json, json_file_option, on_stdout
from bot.cli.options import index_option, pins_option, probes_option, registry_option, venv_cache_option
from bot.config import DEFAULT_TIMEOUT
from bot.errors import UsageProblem, report_errors
from bot.run.bisect import BisectResult, Probe, bisect_json, pinned_and_newer, probe_releases, target_subject
from exporters.ledger import default_registry_dir, set_fixed_in


def _announced(probe: Callable[[str], Probe], package: str) -> Callable[[str], Probe]:
    """Each probe says what it does and how it ended, one line each on stderr: a probe takes minutes."""

    def run(version: str) -> Probe:
        click.echo(f"{package} {version}: preparing its environment and exporting ...", err=True)
        result = probe(version)
        click.echo(f"{package} {version}: {result.outcome}: {result.detail.splitlines()[0][:200] if result.detail else ''}",
                   err=True)  # fmt: skip
        return result

    return run


def render_result(result: BisectResult, package: str, pinned: str) -> Table:
    table = Table(title=f"bisect of {package} after {pinned}")
    for column in ("version", "outcome", "detail"):
        table.add_column(column, overflow="fold")
    for probe in result.probes:
        table.add_row(probe.version, probe.outcome, escape(probe.detail))
    return table


@click.command("bisect")
@click.argument("target")
@click.option(
    "--dependency",
    "package",
    default=None,
    metavar="PKG",
    help="Package whose releases to search [default: the target's dependency].",
)
@registry_option
@pins_option
@index_option(DEFAULT_JSON, "Workaround index (for a workaround's probes).")
@probes_option(DEFAULT_PROBE_LIMIT, "Exports probed per version for a workaround.")
@venv_cache_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds before one export is killed.",
)
@click.option("--dry-run", is_flag=True, help="List the candidate versions and exports; install nothing.")
@click.option("--no-write", is_flag=True, help="Do not write fixed_in into the ledger entry.")
@json_file_option("the result (candidates, probes, first passing release)",
                  'docs/audit-report.md, "exportbot bisect --json"')
@report_errors
def bisect_command(
    target: str, package: str | None, registry_dir: Path | None, pin_file: Path | None, index_file: Path,
    probes: int, cache_dir: Path | None, timeout: float, dry_run: bool, no_write: bool, json_file: Path | None,
) -> None:  # fmt: skip
    """Find the first release of PKG in which TARGET (ledger entry id or workaround name) is not needed.

    \b
    Example:
      exportbot bisect _fix_reshape_of_strided --dependency torch --dry-run
      exportbot bisect t5-cast-folding --dependency onnxscript
    """
    registry_dir = registry_dir or default_registry_dir()
    subject, entry = target_subject(target, registry_dir, index_file, probes)
    package = package or subject.dependency
    if not package:
        raise UsageProblem(f"{target!r} names no dependency; pass --dependency PKG")
    pin_path, pinned, candidates = pinned_and_newer(package, registry_dir, pin_file)
    err = on_stdout(json_file)  # --json -: the JSON is the result; every line and table goes to stderr
    exports = ", ".join(f"{e.model} {e.backend}/{e.mode}" for e in subject.exports)
    click.echo(f"{target}: {package} {pinned} (pinned) → {len(candidates)} newer release(s): "
               f"{', '.join(candidates) or 'none'}\nexports per version: {exports}", err=err)  # fmt: skip
    data = bisect_json(target, subject, package, pinned, candidates, dry_run=dry_run)
    if dry_run or not candidates:
        if json_file is not None:
            emit_json(data, json_file)
        return
    result, seen = probe_releases(subject, package, pin_path, candidates, cache_dir, timeout, registry_dir,
                                  lambda probe: _announced(probe, package))
    Console(stderr=err).print(render_result(result, package, pinned))
    data |= asdict(result) | {"outcomes": seen}
    if result.first_passing is None:
        click.echo(f"{target}: still needed at every installable release up to {candidates[-1]}.", err=err)
    else:
        spec = data["fixed_in"] = f"{package}>={result.first_passing}"
        maybe = f" (or one of the uninstallable {', '.join(result.untested)})" if result.untested else ""
        click.echo(f"{target}: first passing release {result.first_passing}{maybe}: fixed_in = {spec!r}", err=err)
        if entry is not None and not no_write:
            set_fixed_in(entry.path, entry.id, spec)
            data["written_to"] = str(entry.path)
            click.echo(f"wrote fixed_in = {spec!r} to {entry.path} [{entry.id}]", err=err)
    if json_file is not None:
        emit_json(data, json_file)


