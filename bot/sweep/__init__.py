"""``exportbot sweep``: export every transformers model class, each in its own process, and keep the records.

A sweep is how the bot learns what exports today: which classes pass, which fail and how, and whether the
ledger's gates still describe reality. Three constraints shape it:

* **Isolation.** One export can segfault, hang or eat all memory; that must become a record, never the end of
  the sweep. Every export therefore runs in a child process in its own process group, with an address-space
  cap (``RLIMIT_AS``) and a wall-clock timeout after which the whole group is killed.
* **Start-up cost.** Importing torch and transformers takes seconds, longer than a tiny Dynamo export. A warm
  worker (``worker_main``) imports everything once and forks one child per export (``os.fork``), so children
  start with the imports done. ``--no-fork`` starts a fresh interpreter per export instead (``spawned_child_main``),
  kept for comparison and for when fork-after-import misbehaves.
* **Long runs.** Records are appended to a JSON Lines file and flushed one by one, so an interrupted sweep is
  resumed (``--resume``) and CI shards (``--shard i/n``) are merged afterwards. The record format is documented
  in ``docs/sweep-results.md`` and versioned by its ``schema`` field.

The modules, in the order data flows through them. The first four are pure (plain data in and out, no
processes, no torch); the rest do the I/O:

* ``tasks``: ``Task``, sharding by name hash, selection, the work list;
* ``records``: the schema, statuses, merging, classification against a ledger entry;
* ``triage``: error signatures and failure groups;
* ``reports``: summaries and the Markdown of ``docs/coverage.md``;
* ``results``: reading, appending and repairing JSON Lines result files;
* ``catalogue``: every class of transformers' auto mappings;
* ``worker``: the child's side of an isolated export (warm worker, forked or spawned child);
* ``isolation``: the sweep's side (runners, settings, records from reports, ``run_sweep``);
* ``terminal``: rich tables and the progress bar;
* ``commands``: the click commands.

Everything that used to be importable from ``bot.sweep`` still is.
"""

from bot.sweep.catalogue import enumerate_model_classes
from bot.sweep.commands import coverage_command, merge_command, run_command, sweep_group, triage_command
from bot.sweep.isolation import (
    STDERR_TAIL_LINES,
    WORKER_GRACE,
    WORKER_START_TIMEOUT,
    Runner,
    SpawnRunner,
    SweepError,
    SweepInfo,
    SweepSettings,
    WarmWorker,
    build_record,
    run_sweep,
)
from bot.sweep.records import (
    CRASHED,
    DIFFERENT_FAILURE,
    PASSES,
    SAME_FAILURE,
    SCHEMA,
    STATUSES,
    TIMEOUT,
    classify_against_entry,
    ignored_entry,
    merge_records,
    record_key,
)
from bot.sweep.reports import SummaryRow, coverage_markdown, first_line, summarize, summary_markdown
from bot.sweep.results import (
    DEFAULT_CENSUS,
    DEFAULT_RESULTS,
    ResultsError,
    ResultsWriter,
    default_census,
    default_results,
    parse_record,
    read_results,
    repair_tail,
    write_records,
)
from bot.sweep.tasks import (
    MODES,
    Key,
    Task,
    collect_class_names,
    parse_class_list,
    parse_shard,
    plan_tasks,
    select_classes,
    shard_index,
)
from bot.sweep.terminal import SweepProgress, summary_table, triage_table
from bot.sweep.triage import (
    SIGNATURE_CHARS,
    FailureGroup,
    failure_signature,
    model_stem,
    normalize_error,
    triage,
)
from bot.sweep.worker import (
    TEST_CRASH_ENV,
    TEST_HANG_ENV,
    ChildReport,
    ChildTask,
    spawned_child_main,
    worker_main,
)

__all__ = [
    "CRASHED",
    "DEFAULT_CENSUS",
    "DEFAULT_RESULTS",
    "DIFFERENT_FAILURE",
    "MODES",
    "PASSES",
    "SAME_FAILURE",
    "SCHEMA",
    "SIGNATURE_CHARS",
    "STATUSES",
    "STDERR_TAIL_LINES",
    "TEST_CRASH_ENV",
    "TEST_HANG_ENV",
    "TIMEOUT",
    "WORKER_GRACE",
    "WORKER_START_TIMEOUT",
    "ChildReport",
    "ChildTask",
    "FailureGroup",
    "Key",
    "ResultsError",
    "ResultsWriter",
    "Runner",
    "SpawnRunner",
    "SummaryRow",
    "SweepError",
    "SweepInfo",
    "SweepProgress",
    "SweepSettings",
    "Task",
    "WarmWorker",
    "build_record",
    "classify_against_entry",
    "collect_class_names",
    "coverage_command",
    "coverage_markdown",
    "default_census",
    "default_results",
    "enumerate_model_classes",
    "failure_signature",
    "first_line",
    "ignored_entry",
    "merge_command",
    "merge_records",
    "model_stem",
    "normalize_error",
    "parse_class_list",
    "parse_record",
    "parse_shard",
    "plan_tasks",
    "read_results",
    "record_key",
    "repair_tail",
    "run_command",
    "run_sweep",
    "select_classes",
    "shard_index",
    "spawned_child_main",
    "summarize",
    "summary_markdown",
    "summary_table",
    "sweep_group",
    "triage",
    "triage_command",
    "triage_table",
    "worker_main",
    "write_records",
]  # fmt: skip
