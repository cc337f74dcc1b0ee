"""The audit's decisions, pure: what is due, what the re-runs mean, what was verified when.

No module here starts a process, builds an environment or talks to GitHub; they read the repository's own
files at most (``constraints.txt``, ``registry/verified.toml``, ``docs/workaround-index.json``, a
workaround's source file), so the CLI and the scheduled job compute the same plan. ``pins`` (the pinned
versions), ``upstream`` (what an issue link says and what state it is in), ``plan`` (which entries are due),
``verdict`` (re-run outcomes → one verdict per entry), ``verification`` (the memory of re-runs), ``window``
(supported releases), ``regression_sample`` (what a candidate re-runs), ``workaround_index`` (where each
workaround fired: a workaround's probes), ``workaround_removal`` (a workaround's deletion from its source, as a
syntax-tree edit), ``report`` (the report's identity and the check ``exportbot pr`` runs before any request).
"""
