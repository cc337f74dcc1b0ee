"""Running exports and the environments they run in: every module here runs an export, starts a process or builds
an environment.

``runner`` is one export end to end (``export_one``, what ``exportbot export`` and every sweep child call);
``reruns`` re-runs a ledger entry or a workaround without it, each export in its own process; ``isolation``
and ``worker`` are a sweep's isolated exports (the sweep's side, and the warm worker and its forked children); ``venvs``
builds isolated environments that differ from the pins in one package; ``environment`` checks the
interpreter that re-runs; ``candidate`` tries a release before its pin moves; ``bisect`` finds the first
release that no longer needs a workaround; ``generation`` exports generation bundles and describes their
outcome; ``audit_run`` is the audit's loop (ledger → plan → re-runs → verdicts), the decisions taken in
``bot.audit``.
"""
