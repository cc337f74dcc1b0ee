"""GitHub: the upstream issue tracker, the rolling shrink PR and the dashboard issue.

``tracker`` asks what became of the upstream issues (PyGithub, a circuit breaker, offline snapshots);
``prwriter`` and ``dashboard`` compute what the PR and the dashboard say, without touching GitHub (pure);
``workaround_removal`` edits a workaround out of its source file; ``shrink_plan`` is every write a run would
make (pure), ``shrink_session`` reads the repository's state and makes those writes, ``shrink`` is the run.
"""
