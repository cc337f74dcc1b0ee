"""``exportbot workarounds``: ``index`` writes where each registered workaround fired (``bot.audit.workaround_index``)
from sweep records; ``remove`` deletes one the audit proved unnecessary (``bot.audit.workaround_removal``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from bot.audit.workaround_index import (
    DEFAULT_MARKDOWN,
    INDEX_METADATA,
    build_index,
    dump_index,
    render_markdown,
)
from bot.errors import EXIT_FAILED, UsageProblem, report_errors


def registered_metadata() -> dict[str, dict[str, Any]]:
    """Name → metadata of every registered workaround (imports every exporter: seconds)."""
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    return {w.name: {key: w.as_dict()[key] for key in INDEX_METADATA} for w in all_workarounds()}


@click.group("workarounds", context_settings={"help_option_names": ["-h", "--help"]})
def workarounds_group() -> None:
    """Registered workarounds: where they fire, and deleting one that is no longer needed."""


@workarounds_group.command("index")
@click.argument("results", nargs=-1, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--out", "markdown_file", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_MARKDOWN,
    show_default=True, help="The Markdown page; its JSON twin is written next to it with a .json suffix.",
)  # fmt: skip
@report_errors
def index_command(results: tuple[Path, ...], markdown_file: Path) -> None:
    """Index RESULTS (sweep JSON Lines files; the newest record of one export wins) by workaround; without
    RESULTS, the committed record set (sweeps/catalogue and sweeps/generation shard files; run from the
    repository root).

    \b
    Example:
      exportbot workarounds index --out docs/workaround-index.md
      exportbot workarounds index sweep-results.jsonl --out index.md
    """
    from bot.sweep.records import merge_records
    from bot.sweep.results import DEFAULT_RESULTS, ResultsError, default_results, read_results

    files = results or tuple(default_results())
    if not files:
        raise UsageProblem("no result files named and none committed here (sweeps/catalogue/*-shard-*.jsonl): "
                           "name RESULTS or run from the repository root")  # fmt: skip
    try:
        records = merge_records(record for path in files for record in read_results(path))
    except ResultsError as error:
        raise UsageProblem(str(error)) from None
    index = build_index(records, registered_metadata(), [str(p) for p in results] or list(DEFAULT_RESULTS))
    command = " ".join(["exportbot workarounds index", *map(str, results), f"--out {markdown_file}"])
    markdown_file.parent.mkdir(parents=True, exist_ok=True)
    markdown_file.write_text(render_markdown(index, command), encoding="utf-8")
    json_file = markdown_file.with_suffix(".json")
    json_file.write_text(dump_index(index), encoding="utf-8")
    never = [row.name for row in index.rows if not row.exports]
    click.echo(
        f"{len(index.rows)} workarounds from {len(records)} exports → {markdown_file}, {json_file}"
        + (f"; never fired: {', '.join(never)}" if never else "")
    )


@workarounds_group.command("remove")
@click.argument("name")
@click.option("--dry-run", is_flag=True, help="Only say whether it can be removed; change nothing.")
@report_errors
def remove_command(name: str, dry_run: bool) -> None:
    """Delete workaround NAME (its function and registration) from its source file.

    Refuses (exit 1, saying where) when it is not self-contained: referenced anywhere else in its module
    or by name in another Python file of this repository (exporters/, bot/, tests/).
    """
    from bot.audit.workaround_removal import (
        NotSelfContained,
        defining_file,
        other_files,
        remove_workaround_source,
    )
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    workaround = next((w for w in all_workarounds() if w.name == name), None)
    if workaround is None:
        raise UsageProblem(f"no workaround named {name!r}; see `exportbot list-workarounds`")
    source = defining_file(workaround.func)
    try:
        remove_workaround_source(source, name, elsewhere=other_files(source), write=not dry_run)
    except NotSelfContained as error:
        Console(stderr=True).print(f"[red]not removable from source[/red]: {error}")
        raise SystemExit(EXIT_FAILED) from None
    click.echo(f"{name}: {'can be removed from' if dry_run else 'removed from'} {source}")
