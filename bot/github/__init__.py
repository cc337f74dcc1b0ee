"""GitHub: the upstream issue tracker, the rolling shrink PR and the dashboard issue.

``tracker`` asks what became of the upstream issues (PyGithub, a circuit breaker, offline snapshots);
``prwriter`` and ``dashboard`` compute what the PR and the dashboard say, without touching GitHub (pure);
``shrink_plan`` is what a run reads and every write it would make (pure), ``shrink_session`` reads the
repository's state and makes those writes, ``shrink`` is the run. The commands are ``bot.cli.pr`` and
``bot.cli.audit``.
"""
