"""``exportbot sweep``: export every transformers model class, each in its own process, and keep the records.

A sweep is how the bot learns what exports today: which classes pass, which fail and how, and whether the
ledger's gates still describe reality. Three constraints shape it:

* **Isolation.** One export can segfault, hang or eat all memory; that must become a record, never the end of
  the sweep. Every export therefore runs in a child process in its own process group, with an address-space
  cap (``RLIMIT_AS``) and a wall-clock timeout after which the whole group is killed.
* **Start-up cost.** Importing torch and transformers takes seconds, longer than a tiny Dynamo export. A warm
  worker (``bot.run.worker.worker_main``) imports everything once and forks one child per export (``os.fork``), so children
  start with the imports done. ``--no-fork`` starts a fresh interpreter per export instead (``spawned_child_main``),
  kept for comparison and for when fork-after-import misbehaves.
* **Long runs.** Records are appended to a JSON Lines file and flushed one by one, so an interrupted sweep is
  resumed (``--resume``) and CI shards (``--shard i/n``) are merged afterwards. The record format is documented
  in ``docs/sweep-results.md`` and versioned by its ``schema`` field.

This package holds the sweep's records and what is made of them: plain data in and out, no processes, no
torch. Running the exports is ``bot.run`` (``isolation``: the sweep's side, ``worker``: the child's side),
which imports this package and not the other way round. The modules, in the order data flows through them:

* ``tasks``: ``Task``, sharding by name hash, selection, the work list;
* ``records``: the schema, statuses, merging, classification against a ledger entry;
* ``triage``: error signatures and failure groups;
* ``reports``: summaries and the Markdown of ``docs/coverage.md``;
* ``causes``: the reviewed causes of failures (``sweeps/causes.toml``);
* ``results``: reading, appending and repairing JSON Lines result files, and the committed record set;
* ``catalogue``: every class of transformers' auto mappings;
* ``terminal``: rich tables and the progress bar.

The click commands are ``bot.cli.sweep``. This package re-exports nothing: importing one of its modules
imports only what that module needs, and each name is imported from the module that defines it.
"""
