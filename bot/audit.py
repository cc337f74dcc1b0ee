"""``exportbot audit``: is each workaround in the ledger (and, with ``--workarounds``, in the registry) still needed?

Data flows one way: ledger → upstream state (one request per distinct issue) → plan (bot.plan, pure)
→ re-run of the due entries without their workaround (bot.rerun, isolated subprocesses) → verdicts
(bot.verdict, pure) → report (terminal table, JSON, Markdown job summary) and optionally
``registry/verified.toml`` (bot.verification).

Every entry appears in every report, with why it is or is not eligible, so a bot that stops proposing
removals says why instead of going quiet. When GitHub's rate limit runs out mid-run (reset later than
the tracker will wait), querying stops and the report is marked ``partial``: the entries not yet asked
get verdict ``unknown`` ("rate limited until ...") and are not re-run.

With ``--workarounds`` every registered workaround that carries ``upstream`` or ``dependency`` metadata
(or is named by ``--entry``) is audited the same way, as a :class:`bot.plan.Subject`: same triggers,
same verdicts, re-run in isolated processes with ``--without NAME`` (only that workaround disabled) on at
most ``--probes`` exports it fired in, taken from the workaround index (bot/workaround_index.py). A
workaround records no failure regex: any failure without it means still needed, and the error is shown.
Its rows go to ``workarounds`` in the JSON report (``entries`` stays ledger-only, so a consumer that
edits the ledger never sees them) and its verifications to ``registry/verified-workarounds.toml``.

With ``--candidate PKG==VER`` the re-runs happen in an isolated environment holding that release, and
a sample of exports that pass at the pins is re-run there too (bot.candidate): the report says what the
release would make removable and what it would break.

Exit codes: 0 nothing removable and nothing needs attention (``not-due``, ``still-needed``,
``unknown`` only); 3 some entry is removable (or ``superseded``); 4 some entry is ``changed``, ``not-reproduced`` or needs a
``human`` (this wins over 3: a human should look before a removal is proposed from the same run); 5 the candidate
breaks an export that passes at the pins (wins over 3 and 4); 1 errors (bad ledger, pins,
verification file or snapshot; export harness crash; a candidate that cannot be installed); 2 bad
options, or an interpreter for the re-runs that does not hold the pinned versions of an entry's stack.

Before the re-runs of any entry, the interpreter that runs them is asked for its versions of the entry's
stack (bot.environment); they must be the pins (or, with ``--candidate``, the isolated environment
bot.venvs built from the pins is used). Outcomes record the versions they ran with, and
``verified.toml`` records those, never the pin file's word.
"""

from __future__ import annotations

from bot.audit_command import audit_command
from bot.audit_render import render_candidate_table, render_markdown, render_table, render_workaround_table
from bot.audit_run import (
    EXIT_ATTENTION,
    EXIT_NOTHING,
    EXIT_REGRESSION,
    EXIT_REMOVABLE,
    AuditReport,
    EntryReport,
    WorkaroundReport,
    ran_with,
    run_audit,
    verification_records,
)

# The code lives in one module per job, data flowing one way (none of them imports this module):
# bot.audit_run (records, run_audit) → bot.audit_render (tables, Markdown) → bot.audit_command (the CLI).
__all__ = [
    "EXIT_ATTENTION",
    "EXIT_NOTHING",
    "EXIT_REGRESSION",
    "EXIT_REMOVABLE",
    "AuditReport",
    "EntryReport",
    "WorkaroundReport",
    "audit_command",
    "ran_with",
    "render_candidate_table",
    "render_markdown",
    "render_table",
    "render_workaround_table",
    "run_audit",
    "verification_records",
]
