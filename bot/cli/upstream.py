"""``exportbot upstream``: every ledger entry and registered workaround tracked upstream.

``status`` (where each item stands: linked, verified draft, unverified draft, stale, nothing), ``draft`` (write
an item's standalone reproducer and run it), ``verify`` (run drafts' scripts again, in a fresh process without
exportbot), ``render`` (the draft pages from their committed inputs; what scripts/check_generated.py checks),
``find`` (search the item's repository for an issue that may already report it; links nothing), ``link`` (ask for
an item's ``upstream`` on the dashboard; ``exportbot pr`` proposes it). What a draft says, an item's status and
the search's ranking are bot.audit (pure); running scripts and probes is bot.run.drafts; GitHub search, link
checks and edits are bot.github.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from bot.audit.candidates import (
    DEFAULT_CACHE,
    FindResult,
    dump_cache,
    failure_text,
    load_cache,
    plan_searches,
    rank,
)
from bot.audit.drafts import (
    ENTRY,
    DraftError,
    DraftRecord,
    TrackedItem,
    counts,
    expected_failure,
    is_generated_script,
    repository_of,
)
from bot.cli.json_output import emit_json, json_flag, write_atomically
from bot.cli.options import github_url_option, registry_option, token_env_option
from bot.cli.progress import CountedProgress
from bot.cli.terminal import compact_table
from bot.config import DEFAULT_TIMEOUT
from bot.errors import EXIT_FAILED, EXIT_OK, UsageProblem, report_errors
from bot.run.tracking import Drafts, link_targets


@click.group("upstream", context_settings={"help_option_names": ["-h", "--help"]})
def upstream_group() -> None:
    """Every ledger entry and registered workaround tracked upstream: drafts, their verification, links."""


# ── status ──
@upstream_group.command("status")
@click.argument("ids", nargs=-1)
@json_flag("every item with its status and reason", "docs/upstream-tracking.md")
@registry_option
@report_errors
def status_command(ids: tuple[str, ...], as_json: bool, registry_dir: Path | None) -> None:
    """Where each ledger entry and registered workaround stands: linked (it has an upstream issue), verified
    (a draft whose standalone script fails as recorded at the pins), unverified, stale (its script no longer
    fails: the item may be unnecessary) or nothing. Reads committed files only; runs nothing.

    \b
    Examples:
      exportbot upstream status
      exportbot upstream status --json | jq -r '.items[] | select(.status == "nothing") | .id'
      exportbot upstream status _aten_is_all_true led-global-attention-data-dependent
    """
    drafts = Drafts(registry_dir)
    items = drafts.select(ids) if ids else drafts.items
    statuses = [drafts.status(item) for item in items]
    totals = counts(statuses)
    if as_json:
        emit_json({"counts": totals, "items": [status.as_dict() for status in statuses]})
        return
    table = compact_table("item", "status", "why / next", title=f"{len(statuses)} items tracked upstream")
    for status in statuses:
        table.add_row(escape(status.item.id), status.status, escape(status.reason))
    console = Console()
    console.print(table)
    console.print(", ".join(f"{name} {count}" for name, count in totals.items()), highlight=False)


# ── render ──
@upstream_group.command("render")
@click.option("--check", is_flag=True, help="Only compare: exit 1 naming each page that differs from what its "
                                           "inputs give now (scripts/check_generated.py runs this).")  # fmt: skip
@registry_option
@report_errors
def render_command(check: bool, registry_dir: Path | None) -> None:
    """Write docs/upstream-drafts/ID.md and README.md from their committed inputs (scripts/, notes/, runs.json,
    the ledger and the registry). Runs no script: `exportbot upstream verify` does.

    \b
    Examples:
      exportbot upstream render
      exportbot upstream render --check
    """
    drafts = Drafts(registry_dir)
    pages, _, problems = drafts.pages()
    directory = drafts.files.directory
    if check:
        stale = [name for name, text in pages.items()
                 if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text]  # fmt: skip
        stray = [p.name for p in sorted(directory.glob("*.md")) if p.name not in pages]
        lines = [*(f"{directory / name}: stale; run `exportbot upstream render`" for name in stale),
                 *(f"{directory / name}: no item has this draft (remove it)" for name in stray), *problems]  # fmt: skip
        for line in lines:
            click.echo(line, err=True)
        if not lines:
            click.echo(f"{len(pages)} draft pages are up to date")
        click.get_current_context().exit(EXIT_FAILED if lines else EXIT_OK)
    written = drafts.write_pages()
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
    click.echo(f"{len(written)} of {len(pages)} draft pages written" + (f": {', '.join(written)}" if written else ""))


# ── draft and verify ──
timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT, show_default=True,
    help="Seconds a script (and a probe export) may run; a slowness entry's budget_s wins.",
)  # fmt: skip


def _script_for(drafts: Drafts, item: TrackedItem) -> str:
    """The item's script: a hand-written one as it is; a generated one (or none) written from its reproducer."""
    from bot.audit.standalone import render_script
    from bot.run.drafts import describe_reproducer, probe_export

    current = drafts.files.scripts.get(item.id)
    if current is not None and not is_generated_script(current):
        return current
    script = render_script(describe_reproducer(item, probe_export(item, drafts.registry_dir), drafts.registry_dir))
    if script != current:
        path = drafts.files.script_path(item.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script, encoding="utf-8")
        drafts.files.scripts[item.id] = script
    return script


def _run(drafts: Drafts, item: TrackedItem, timeout: float, *, probe: bool) -> DraftRecord:
    """Run the item's script (and, ``probe``, its ``--without`` probe first); the new record."""
    from bot.run.drafts import probe_export, run_probe, run_script

    record = drafts.files.runs.get(item.id) or DraftRecord()
    probe_run = record.probe
    if probe and item.kind != ENTRY:
        try:
            probe_run = run_probe(item, probe_export(item, drafts.registry_dir), timeout=timeout)
        except DraftError:
            probe_run = None  # no export fired it: the notes' failure is what the script must show
    expected = expected_failure(item, drafts.files.notes.get(item.id), probe_run)
    script = drafts.files.scripts[item.id]
    run = run_script(item.id, script, expected, timeout=item.budget_s or timeout)
    return DraftRecord(run, probe_run)


@upstream_group.command("draft")
@click.argument("ids", nargs=-1)
@click.option("--all", "all_items", is_flag=True, help="Every item without an upstream issue.")
@click.option("--no-run", is_flag=True, help="Write the script and the page only; run nothing.")
@timeout_option
@registry_option
@report_errors
def draft_command(ids: tuple[str, ...], all_items: bool, no_run: bool, timeout: float,
                  registry_dir: Path | None) -> None:  # fmt: skip
    """Write the upstream issue draft of each item: its standalone reproducer (scripts/ID.py, from the item's
    reproducer unless one was written by hand), then, unless --no-run, a workaround's --without probe and the
    script, each in a fresh process, recorded in runs.json; then the page docs/upstream-drafts/ID.md. Exit 1 when
    an item's script cannot be written from its reproducer (the line says why: write it by hand).

    \b
    Examples:
      exportbot upstream draft udop-combine-embeddings-python-indexing
      exportbot upstream draft _aten_cummin --timeout 300
      exportbot upstream draft --all --no-run
    """
    if bool(ids) == all_items:
        raise UsageProblem("name item ids, or --all (every item without an upstream issue), not both")
    drafts = Drafts(registry_dir)
    items = [item for item in drafts.items if item.untracked] if all_items else drafts.select(ids)
    if internal := [item.id for item in items if item.internal]:
        raise UsageProblem(f"{', '.join(internal)} work around exportbot's own code (internal): no upstream issue to draft")
    console = Console(stderr=True)
    refused = []
    with CountedProgress(console, "draft") as progress:
        progress.add(len(items))
        for item in items:
            progress.step(item.id)
            try:
                _script_for(drafts, item)
            except DraftError as error:
                refused.append(item.id)
                click.echo(f"{item.id}: no draft: {error}", err=True)
                continue
            if not no_run:
                drafts.files.runs[item.id] = _run(drafts, item, timeout, probe=True)
                drafts.files.write_runs()
            drafts.write_pages()
            status = drafts.status(item)
            click.echo(f"{item.id}: {status.status}: {status.reason}")
    click.get_current_context().exit(EXIT_FAILED if refused else EXIT_OK)


@upstream_group.command("verify")
@click.argument("ids", nargs=-1)
@click.option("--changed", "base", metavar="REV", default=None,
              help="Only the drafts whose files differ from git revision REV (CI: the commit's base).")  # fmt: skip
@click.option("--record", is_flag=True, help="Record the runs in runs.json and write the pages.")
@click.option("--probe", is_flag=True, help="Run each workaround's --without probe again too (an export).")
@click.option("--budget", "budget_s", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Start no script after this many seconds; the drafts left are named on stderr (CI keeps its "
                   "time budget when a commit changes many drafts).")  # fmt: skip
@timeout_option
@registry_option
@report_errors
def verify_command(ids: tuple[str, ...], base: str | None, record: bool, probe: bool, budget_s: float | None,
                   timeout: float, registry_dir: Path | None) -> None:  # fmt: skip
    """Run drafts' scripts again, one at a time, each in a fresh process where exportbot is not importable, and
    compare with what runs.json records. Exit 1 when a draft's status now differs from its recorded one (a
    verified draft that no longer fails as recorded, a run that never was, a script changed since its run);
    with --record the runs are recorded instead. Without IDS or --changed: every draft.

    \b
    Examples:
      exportbot upstream verify _aten_is_all_true
      exportbot upstream verify --changed origin/main
      exportbot upstream verify --record
    """
    from bot.run.drafts import changed_draft_ids

    drafts = Drafts(registry_dir)
    scripts = drafts.files.scripts
    if base is not None:
        try:
            chosen = changed_draft_ids(base, drafts.files.directory)
        except ValueError as error:
            raise UsageProblem(str(error)) from None
        chosen = [item_id for item_id in chosen if item_id in scripts and item_id in drafts.by_id] + list(ids)
    else:
        chosen = list(ids) or sorted(item_id for item_id in scripts if item_id in drafts.by_id)
    items = drafts.select(dict.fromkeys(chosen))
    missing = [item.id for item in items if item.id not in scripts]
    if missing:
        raise UsageProblem(f"no draft script for {', '.join(missing)}: run `exportbot upstream draft ID` first")
    disagreements = 0
    started = time.monotonic()
    with CountedProgress(Console(stderr=True), "verify") as progress:
        progress.add(len(items))
        for index, item in enumerate(items):
            if budget_s is not None and time.monotonic() - started > budget_s:
                left = ", ".join(i.id for i in items[index:])
                click.echo(f"budget of {budget_s:g} s spent: not verified in this run: {left}", err=True)
                break
            progress.step(item.id)
            before = drafts.status(item)
            fresh = _run(drafts, item, timeout, probe=probe)
            now = drafts.status(item, fresh)
            if record:
                drafts.files.runs[item.id] = fresh
                drafts.files.write_runs()
            agrees = now.status == before.status or record
            disagreements += not agrees
            said = now.status if now.status == before.status else f"recorded {before.status}, now {now.status}"
            click.echo(f"{item.id}: {said}: {now.reason}")
    if record:
        drafts.write_pages()
    if not items:
        click.echo("no draft to verify")
    click.get_current_context().exit(EXIT_FAILED if disagreements else EXIT_OK)



# ── find ──


def _find_one(search: Any, item: TrackedItem, repository: str, print_: str, texts: list[str], text: str) -> FindResult:
    """Every query of one item; hits ranked. A stopped search keeps what the earlier queries found."""
    from bot.github.search import SearchStopped

    hits, problem = [], None
    for query in texts:
        try:
            hits += search.search(query)
        except SearchStopped as stop:
            problem = str(stop)
            break
    return FindResult(item.id, repository, print_, datetime.date.today().isoformat(), tuple(texts),
                      tuple(rank(hits, text)), problem)  # fmt: skip


@upstream_group.command("find")
@click.argument("ids", nargs=-1)
@click.option("--cache", "cache_file", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CACHE,
              show_default=True, help="Results per item fingerprint: an item whose failure did not change is not "
                                      "searched again.")  # fmt: skip
@click.option("--max-wait", type=click.FloatRange(min=0), default=120.0, show_default=True,
              help="Longest rate-limit wait (retry-after) to sit out before leaving an item for the next run.")  # fmt: skip
@json_flag("each item's queries and ranked candidates", "docs/upstream-tracking.md")
@github_url_option
@token_env_option
@registry_option
@report_errors
def find_command(ids: tuple[str, ...], cache_file: Path, max_wait: float, as_json: bool, github_url: str | None,
                 token_env: str | None, registry_dir: Path | None) -> None:  # fmt: skip
    """Search the repository that would fix each item without an upstream issue for issues and pull requests
    that may already report it (queries from its failure's message, op and symbol names, model class), and rank
    the hits by how much of its failure text they repeat. At most 30 searches a minute (10 without a token);
    403/429 answers are waited out as retry-after says. Links nothing: tick a candidate on the dashboard or run
    `exportbot upstream link`.

    \b
    Examples:
      exportbot upstream find
      exportbot upstream find _aten_is_all_true --json
      exportbot upstream find --cache .exportbot-cache/upstream-find.json --max-wait 60
    """
    from bot.cli.pr import make_github
    from bot.github.search import SEARCHES_PER_MINUTE, IssueSearch
    from bot.github.tracker import _token_from_env

    drafts = Drafts(registry_dir)
    items = drafts.select(ids) if ids else [item for item in drafts.items if item.untracked]
    linked = [item.id for item in items if item.upstream]
    if linked:
        raise UsageProblem(f"{', '.join(linked)} already link an upstream issue; find searches for items without one")
    files = drafts.files
    subjects = [(item, repository_of(item, files.notes.get(item.id)), failure_text(item, files.runs.get(item.id)))
                for item in items]  # fmt: skip
    cache = load_cache(cache_file.read_text(encoding="utf-8")) if cache_file.is_file() else {}
    plan, skipped = plan_searches(subjects, cache)
    for line in skipped:
        click.echo(line, err=True)
    token = _token_from_env(token_env)
    search = IssueSearch(make_github(github_url, token), per_minute=SEARCHES_PER_MINUTE if token else 10,
                         max_wait=max_wait)  # fmt: skip
    texts = {item.id: text for item, _, text in subjects}
    results = {result.item_id: result for result in plan.cached}
    with CountedProgress(Console(stderr=True), "find") as progress:
        progress.add(len(plan.search))
        for item, repository, print_, queries in plan.search:
            progress.step(f"{item.id} ({len(queries)} searches in {repository})")
            results[item.id] = _find_one(search, item, repository, print_, queries, texts[item.id])
            cache[item.id] = results[item.id]
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(cache_file, dump_cache(cache))  # after each item: a stopped run keeps what it found
    ordered = [results[item.id] for item in items if item.id in results]
    if as_json:
        emit_json({"searched": len(plan.search), "cached": len(plan.cached), "waited_s": round(search.waited, 1),
                   "items": [result.as_dict() for result in ordered]})  # fmt: skip
        return
    table = compact_table("item", "candidates (score)", title=f"{len(ordered)} items: {len(plan.search)} searched, "
                                                            f"{len(plan.cached)} from the cache")  # fmt: skip
    for result in ordered:
        lines = [f"{c.short} {c.score:.2f} {c.state}: {c.title}" for c in result.candidates] or ["no candidate"]
        if result.problem:
            lines.append(f"(stopped: {result.problem})")
        table.add_row(escape(result.item_id), escape("\n".join(lines)))
    Console().print(table)


# ── link ──
@upstream_group.command("link")
@click.argument("item_id", metavar="ID")
@click.argument("url")
@click.option("--apply/--dry-run", "apply", default=None,
              help="Tick the link on the dashboard, or only say what would be ticked [default: tick only when "
                   "CI=true and a token is set].")  # fmt: skip
@github_url_option
@token_env_option
@click.option("--repo", "repository", default=None, metavar="OWNER/NAME",
              help="Repository of the dashboard [default: [tool.exportbot] repository, then $GITHUB_REPOSITORY].")  # fmt: skip
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="pyproject.toml with [tool.exportbot] [default: the nearest one].")  # fmt: skip
@report_errors
def link_command(item_id: str, url: str, apply: bool | None, github_url: str | None, token_env: str | None,
                 repository: str | None, config_file: Path | None) -> None:  # fmt: skip
    """Ask for ID's `upstream` to be URL: the URL must name an issue or pull request of the repository that would
    fix ID, and GitHub must answer for it. The link is ticked on the dashboard (as a ticked candidate is), and the
    next `exportbot pr` run proposes `upstream = URL` in the shrink PR's links section. Exit 2 when the URL
    cannot be its link (the line says why).

    \b
    Examples:
      exportbot upstream link informer-distil-mask-not-downsampled https://github.com/huggingface/transformers/issues/123
      exportbot upstream link _aten_cummin https://github.com/microsoft/onnxscript/issues/45 --apply
    """
    import time

    from bot.cli.pr import _load, make_github, should_apply
    from bot.github.dashboard import with_link_request
    from bot.github.links import link_problem
    from bot.github.shrink_session import GitHubSession, ShrinkStopped
    from bot.github.tracker import _token_from_env

    config, _ = _load(config_file, repository)
    if not config.repository:
        raise UsageProblem("no repository for the dashboard: set [tool.exportbot] repository or pass --repo OWNER/NAME")
    if not config.dashboard:
        raise UsageProblem("the dashboard is off ([tool.exportbot] dashboard = false): a link is asked for there")
    drafts = Drafts(None)
    targets = link_targets(drafts, config.registry)
    problem = link_problem(item_id, url, targets.get(item_id))
    if problem is not None:
        raise UsageProblem(problem)
    token = _token_from_env(token_env)
    apply_now = should_apply(apply, token is not None)
    session = GitHubSession(make_github(github_url, token), config, time.sleep)
    try:
        (check,) = session.check_links([(item_id, url)], targets)
        if not check.accepted:
            raise UsageProblem(check.note)
        issue = session.read_dashboard()
        if issue is None:
            raise UsageProblem(f"{config.repository} has no dashboard issue yet: `exportbot pr` creates it")
        step = session.dashboard(with_link_request(issue.body or "", item_id, url, check.note), apply_now)
    except ShrinkStopped as stop:
        click.echo(stop.explain(), err=True)
        click.get_current_context().exit(EXIT_FAILED)
    click.echo(f"{item_id} → {url} ({check.note}): {step}; the next `exportbot pr` run proposes it in the shrink PR")
