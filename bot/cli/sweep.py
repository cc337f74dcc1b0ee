"""``exportbot sweep`` and its subcommands (click): the only part of the package that talks to the user."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from bot.cli.json_output import emit_json, json_flag
from bot.cli.quantize_options import SCHEME_NAMES
from bot.errors import SuggestingChoice, UsageProblem, report_errors
from bot.outcome import BACKENDS
from bot.run.isolation import SweepError, SweepSettings, run_sweep
from bot.sweep.catalogue import GENERATION_MAPPINGS, enumerate_model_classes, generation_classes
from bot.sweep.causes import DEFAULT_CAUSES, Cause, CausesError, explain, load_causes
from bot.sweep.records import merge_records, record_key
from bot.sweep.reports import CENSUS_OK, coverage_markdown, summarize, summary_markdown
from bot.sweep.results import (
    ResultsError,
    ResultsWriter,
    default_census,
    default_results,
    read_results,
    repair_tail,
    write_records,
)
from bot.sweep.tasks import GENERATE, MODES, Key, parse_class_list, parse_shard, plan_tasks, select_classes
from bot.sweep.terminal import SweepProgress, summary_table, triage_table
from bot.sweep.triage import failure_signature, triage

if TYPE_CHECKING:
    from exporters.ledger import Ledger


@click.group("sweep", context_settings={"help_option_names": ["-h", "--help"]})
def sweep_group() -> None:
    """Export every transformers model class in isolated processes and keep the records.

    \b
    Subcommands:
      run       run a sweep (or a shard of one), writing sweep-results.jsonl
      merge     combine result files (shards) into one
      triage    group failures by normalised error
      coverage  regenerate docs/coverage.md from result files

    `run` is a subcommand rather than the group's default so that the other subcommands never parse its
    options.

    \b
    Examples:
      exportbot sweep run --backend dynamo --static --limit 50 --jobs 2
      exportbot sweep run --shard 3/8 --results shard-3.jsonl
      exportbot sweep run --resume                      # after an interruption
      exportbot sweep merge all.jsonl shard-*.jsonl
      exportbot sweep coverage all.jsonl --out docs/coverage.md
      exportbot sweep coverage --out docs/coverage.md   # the committed sweeps/ records
    """


def _load_ledger_for_sweep(ignore: Sequence[str]) -> Ledger:
    from exporters.ledger import LedgerError, load_ledger

    try:
        ledger = load_ledger()
    except LedgerError as error:
        raise UsageProblem(f"the ledger is invalid: {error.problems[0]} (see `exportbot lint`)") from None
    for entry_id in ignore:
        if entry_id != "all":
            try:
                ledger.by_id(entry_id)
            except KeyError:
                raise UsageProblem(f"--ignore-ledger {entry_id}: no ledger entry has that id") from None
    return ledger


def _classes_from(classes_file: Path | None) -> list[str]:
    if classes_file is None:
        return enumerate_model_classes()
    import transformers

    names = parse_class_list(classes_file.read_text(encoding="utf-8"))
    available = set(dir(transformers))
    unknown = [name for name in names if name not in available]
    if unknown:
        raise UsageProblem(f"{classes_file}: not transformers classes: {', '.join(unknown[:5])}"
                           + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))  # fmt: skip
    return names


def _done_keys(results: Path, resume: bool, overwrite: bool, console: Console) -> set[Key]:
    """The keys already recorded when resuming; refuses to clobber a results file by accident."""
    if not results.exists() or results.stat().st_size == 0:
        return set()
    if overwrite:
        results.unlink()
        return set()
    if not resume:
        raise UsageProblem(f"{results} exists: pass --resume to continue it or --overwrite to start again")
    if repair_tail(results):
        console.print(f"{results}: dropped a last line cut short by an interrupted sweep", style="yellow")
    try:
        return {record_key(record) for record in read_results(results)}
    except ResultsError as error:
        raise UsageProblem(str(error)) from None


def _read_all(paths: Iterable[Path]) -> list[dict[str, Any]]:
    try:
        return [record for path in paths for record in read_results(path)]
    except ResultsError as error:
        raise UsageProblem(str(error)) from None


JSON_SHAPES = 'docs/sweep-results.md, "JSON on stdout"'
RUN_TOP = 10  # failure groups `sweep run` shows


def _summary_json(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [row.as_dict() for row in summarize(records)]


def _triage_json(records: Iterable[Mapping[str, Any]], top: int) -> dict[str, Any]:
    """The ``--top`` biggest failure groups with every export in them, and how many there are in all."""
    groups = triage(records)
    return {"failures": sum(group.count for group in groups), "groups_total": len(groups),
            "groups": [group.as_dict() for group in groups[:top]]}  # fmt: skip


def _publish_summary(records: Sequence[Mapping[str, Any]], summary_md: Path | None) -> None:
    markdown = summary_markdown(records)
    if summary_md is not None:
        summary_md.parent.mkdir(parents=True, exist_ok=True)
        summary_md.write_text(markdown, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with Path(step_summary).open("a", encoding="utf-8") as handle:
            handle.write(markdown)


@sweep_group.command("run")
@click.option("--backend", "backends", multiple=True, type=click.Choice(BACKENDS),
              help="Backend to export with (repeatable)  [default: all three]")
@click.option("--static", "modes", flag_value="static", help="Static shapes only.")
@click.option("--dynamic", "modes", flag_value="dynamic", help="Dynamic shapes only.")
@click.option("--both", "modes", flag_value="both", default=True, help="Static and dynamic  [default]")
@click.option("--task", type=click.Choice(sorted(GENERATION_MAPPINGS)), default=None,
              help="Generation exports instead (prefill + decode, validated token for token; mode 'generate'): "
                   "every class with this task's generation head, or those of --classes.")
@click.option("--classes", "classes_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Export these classes (one per line, # comments) instead of every auto-mapped class.")
@click.option("--match", "patterns", multiple=True, metavar="PATTERN",
              help="Keep classes matching this fnmatch pattern (repeatable, any may match), e.g. 'Bert*'.")
@click.option("--limit", type=click.IntRange(min=1), help="Keep the first N classes (after --match and --shard).")
@click.option("--shard", metavar="I/N",
              help="Run shard I of N (1-based); classes are assigned by a hash of their name, so shards "
                   "partition every selection.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Exports run in parallel.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds per export before its process group is killed (status timeout).")
@click.option("--memory-gb", type=click.FloatRange(min=0), default=4.0, show_default=True,
              help="Address-space cap per export (RLIMIT_AS), in GiB; 0 for none.")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=Path("sweep-results.jsonl"),
              show_default=True, help="JSON Lines file the records are appended to.")
@click.option("--logs", "logs_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the logs of exports that did not pass  [default: RESULTS with suffix .logs]")
@click.option("--resume", is_flag=True, help="Continue RESULTS: skip (class, backend, mode) already recorded.")
@click.option("--overwrite", is_flag=True, help="Delete an existing RESULTS first.")
@click.option("--no-fork", is_flag=True,
              help="Start a fresh interpreter per export instead of forking a warm worker (slower; for comparison).")
@click.option("--without", multiple=True, metavar="NAME",
              help="Leave this workaround out of every export (repeatable; see `exportbot list-workarounds`): "
                   "the catalogue-wide check that a workaround is still needed. Records list it in "
                   "workarounds_disabled.")
@click.option("--ignore-ledger", "ignore", multiple=True, metavar="ID|all",
              help="Export classes gated by this ledger entry anyway (repeatable) and record ledger_match.")
@click.option("--quantize", type=SuggestingChoice(SCHEME_NAMES), default=None, metavar="SCHEME",
              help="Quantize every export with this scheme (a scheme of each --backend: docs/quantization.md); "
                   "records carry quantize and the quantization section, keyed apart from float ones.")
@click.option("--summary-md", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the summary as Markdown (appended to $GITHUB_STEP_SUMMARY when that is set).")
@json_flag("the summary (per backend/mode counts, top failure groups)", JSON_SHAPES)
@report_errors
def run_command(backends: tuple[str, ...], modes: str, task: str | None, classes_file: Path | None,
                patterns: tuple[str, ...],
                limit: int | None, shard: str | None, jobs: int, timeout: float, memory_gb: float, results: Path,
                logs_dir: Path | None, resume: bool, overwrite: bool, no_fork: bool, without: tuple[str, ...],
                ignore: tuple[str, ...], quantize: str | None, summary_md: Path | None, as_json: bool) -> None:
    """Export every selected (class, backend, mode), each in its own process, appending one record per export.

    Each export runs in a child forked from a warm worker (one per job) that imported torch and transformers
    once. A crash or a hang becomes a record (crashed, timeout), and so does exceeding --memory-gb (usually a
    failed record with the allocation error, or a crash); the sweep goes on. Ledger-gated exports are
    recorded as skipped, never as passed. Exit code 0 once every export has a record, whatever
    its status; 1 if the sweep itself broke; 2 for bad input.
    """
    if resume and overwrite:
        raise UsageProblem("--resume and --overwrite contradict each other")
    try:
        shard_spec = parse_shard(shard) if shard is not None else None
    except ValueError as error:
        raise UsageProblem(str(error)) from None
    console = Console(stderr=True, markup=False)  # class names and paths are printed as they are
    if without and task:
        raise UsageProblem("--without applies to single-graph exports; for generation use "
                           "`exportbot export CLASS --task ... --without NAME`")
    from bot.cli.export_checks import check_without

    for backend in backends or BACKENDS:
        check_without(without, backend, "xnnpack")
        check_quantize(quantize, backend, task)
    ledger = _load_ledger_for_sweep(ignore)
    catalogue = generation_classes(task) if task and classes_file is None else _classes_from(classes_file)
    classes = select_classes(catalogue, patterns, shard_spec, limit)
    settings = SweepSettings(
        backends=backends or BACKENDS, jobs=jobs, timeout=timeout, memory_gb=memory_gb, fork=not no_fork,
        without=without, ignore_ledger=ignore, logs_dir=logs_dir or results.with_suffix(".logs"), quantize=quantize,
    )  # fmt: skip
    done = _done_keys(results, resume, overwrite, console)
    chosen = (GENERATE,) if task else MODES if modes == "both" else (modes,)
    tasks = plan_tasks(classes, settings.backends, chosen, done, quantize)
    console.print(f"{len(classes)} classes, {len(tasks)} exports to run ({len(done)} already recorded), "
                  f"{jobs} job(s), {'warm fork' if settings.fork else 'fresh process'} per export")  # fmt: skip
    writer = ResultsWriter(results)
    signal.signal(signal.SIGTERM, _interrupt)  # a CI cancel or `kill` stops the exports in flight, as Ctrl-C does
    try:
        with SweepProgress(console, len(tasks)) as progress:

            def record_done(record: dict[str, Any]) -> None:
                writer.write(record)
                progress.finished(record)

            run_sweep(tasks, settings, ledger, record_done, progress.started)
    except KeyboardInterrupt:
        console.print(f"interrupted; continue with --resume --results {results}")
        sys.exit(130)
    except SweepError as error:
        raise click.ClickException(str(error)) from None
    finally:
        writer.close()
    records = merge_records(_read_all([results]))
    _publish_summary(records, summary_md)
    if as_json:
        emit_json({"results": str(results), "classes": len(classes), "exports_run": len(tasks),
                   "already_recorded": len(done), "records": len(records), "summary": _summary_json(records),
                   "triage": _triage_json(records, RUN_TOP)})  # fmt: skip
        return
    out = Console(markup=False)
    out.print(summary_table(records, f"{results}: {len(records)} records"))
    if triage(records):
        out.print(triage_table(records, top=RUN_TOP))


def check_quantize(scheme: str | None, backend: str, task: str | None) -> None:
    """``--quantize SCHEME`` is a scheme of ``backend`` (and a dynamic one for generation exports)."""
    if scheme is None:
        return
    from exporters.quantize.schemes import SCHEMES, QuantizeConfig, QuantizeError

    try:
        QuantizeConfig(scheme).check(backend)
    except QuantizeError as error:
        raise UsageProblem(f"{error} (pass --backend for the backends that have it)") from None
    if task is not None and SCHEMES[backend, scheme].static:
        raise UsageProblem(f"--quantize {scheme} on {backend} is static (calibrated per graph): generation sweeps "
                           "take a dynamic scheme")


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@sweep_group.command("merge")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@report_errors
def merge_command(out: Path, files: tuple[Path, ...]) -> None:
    """Combine result FILES (shards, reruns) into OUT: one record per key, the newest (by started_at) winning.

    Every record must be of this exportbot's schema; a file of another schema is refused, not converted.
    """
    records = merge_records(_read_all(files))
    write_records(out, records)
    click.echo(f"{out}: {len(records)} records from {len(files)} file(s)")


@sweep_group.command("triage")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Groups to show.")
@json_flag("the groups (signature, count, every export)", JSON_SHAPES)
@report_errors
def triage_command(files: tuple[Path, ...], top: int, as_json: bool) -> None:
    """Group the failures in result FILES by normalised error signature, biggest group first."""
    records = merge_records(_read_all(files))
    if as_json:
        emit_json({"records": len(records), **_triage_json(records, top)})
    elif triage(records):
        Console(markup=False).print(triage_table(records, top))
    else:
        click.echo(f"no failures among {len(records)} records")


@sweep_group.command("coverage")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("docs/coverage.md"),
              show_default=True, help="Markdown file to (re)generate.")
@click.option("--census", "census_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Tiny-factory census results (scripts/tiny_census.py), repeatable: adds the builder gaps by cause.")
@click.option("--causes", "causes_file", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CAUSES,
              show_default=True,
              help="Reviewed causes of failure groups ([[cause]] tables); a missing file leaves every failure untriaged.")
@json_flag("what was written (the file, per backend/mode counts, census counts)", JSON_SHAPES)
@report_errors
def coverage_command(files: tuple[Path, ...], out: Path, census_files: tuple[Path, ...], causes_file: Path,
                     as_json: bool) -> None:
    """Regenerate the coverage table (class, backend, mode, status, seconds, workarounds fired, ledger entry,
    error) from result FILES, and say why each export that did not pass does not: a ledger entry, a builder gap,
    a reviewed cause from --causes, or untriaged. The file says which command made it, so nobody edits it by hand.

    Without FILES, the committed record set (sweeps/catalogue and sweeps/generation, one file per backend, mode and
    shard; run from the repository root) and, unless --census is given, the committed tiny-census shards."""
    census_args = [argument for path in census_files for argument in ("--census", str(path))]
    command = shlex.join(["exportbot", "sweep", "coverage", *map(str, files), *census_args,
                          "--causes", str(causes_file), "--out", str(out)])  # fmt: skip
    if not files:
        files, census_files = tuple(default_results()), census_files or tuple(default_census())
        if not files:
            raise UsageProblem("no result files named and none committed here (sweeps/catalogue/*-shard-*.jsonl): "
                               "name FILES or run from the repository root")  # fmt: skip
    try:
        causes = load_causes(causes_file)
    except CausesError as error:
        raise UsageProblem(str(error)) from None
    records = _read_all(files)
    census = [_census_record(line, path) for path in census_files
              for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(coverage_markdown(records, command, census, causes), encoding="utf-8")
    exports = merge_records(records)
    if as_json:
        emit_json(_coverage_json(out, exports, census, causes))
    else:
        click.echo(f"{out}: {len(exports)} exports")


def _coverage_json(out: Path, exports: Sequence[Mapping[str, Any]], census: Sequence[Mapping[str, Any]],
                   causes: Sequence[Cause]) -> dict[str, Any]:  # fmt: skip
    """What ``coverage --json`` prints: the counts of the file it wrote, and why the rest do not pass."""
    latest = {record["model"]: record["status"] for record in census}  # a rerun supersedes, as in the file
    explanation = explain(exports, causes, {m: s == CENSUS_OK for m, s in latest.items()} if census else None)
    return {
        "out": str(out), "exports": len(exports), "summary": _summary_json(exports),
        "census": {"classes": len(latest), "counts": dict(Counter(latest.values()).most_common())} if census else None,
        "not_passing": {
            "ledger": len(explanation.ledger), "builder_gap": len(explanation.builder_gap),
            "causes": {cause_id: len(found) for cause_id, found in explanation.by_cause.items()},
            "untriaged": [{"model": r["model"], "backend": r["backend"], "mode": r["mode"],
                           "signature": failure_signature(r)} for r in sorted(explanation.untriaged, key=record_key)],
        },
    }  # fmt: skip


def _census_record(line: str, path: Path) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise UsageProblem(f"{path}: not a census file ({error.msg})") from None
    if not isinstance(record, dict) or not isinstance(record.get("model"), str) or "status" not in record:
        raise UsageProblem(f"{path}: not a census file (records need model and status)")
    return record
