"""Rendering an audit report: the terminal tables and the Markdown job summary.

Split out of ``bot.audit`` (which re-exports these names): pure functions of an :class:`AuditReport`,
kept apart from running the audit and from the command so each can be read and tested alone.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from bot.audit.plan import describe_state
from bot.audit.verdict import NEEDS_HUMAN, UNKNOWN
from bot.run.audit_run import AuditReport, EntryReport, WorkaroundReport
from bot.run.candidate import CandidateCheck, describe_row


def _due_text(row: EntryReport | WorkaroundReport) -> str:
    if row.plan is None:
        return "—"
    return ("due: " if row.plan.due else "not due: ") + "; ".join(row.plan.reasons)


def render_table(report: AuditReport) -> Table:
    """One row per entry: id and models; verdict, upstream (owner/repo#N) and why, each said once."""
    from bot.cli.terminal import compact_table, short_link

    title = f"audit of {len(report.entries)} ledger entries" + (
        " (PARTIAL: rate limited)" if report.partial else ""
    )
    table = compact_table("entry (models)", "verdict · upstream: why", title=title)
    table.columns[0].width = min(46, max((len(r.entry.id) for r in report.entries), default=5))
    # An upstream link is never folded: the id column gives way first (a long id folds, a link must stay copyable).
    table.columns[1].min_width = max((len(short_link(r.entry.upstream)) for r in report.entries if r.entry.upstream),
                                     default=None)
    for row in report.entries:
        table.add_row(f"{row.entry.id}\n[dim]{escape(', '.join(row.entry.models))}[/dim]",
                      _verdict_cell(row, row.entry.upstream))
    return table


def _verdict_cell(row: EntryReport | WorkaroundReport, url: str | None) -> str:
    """``verdict · state owner/repo#N`` over the reasons of the plan and of the verdict, without repeats."""
    from bot.cli.terminal import short_link

    upstream = describe_state(row.state) if row.plan else UNKNOWN
    reasons = list(dict.fromkeys([*(row.plan.reasons if row.plan else []), *row.verdict.reasons]))
    link = f" {short_link(url)}" if url else ""
    return f"[bold]{row.verdict.verdict}[/bold] · {upstream}{link}\n" + escape("; ".join(reasons))  # [brackets]


def _probes_text(row: WorkaroundReport) -> str:
    return "\n".join(f"{e.model} {e.backend}/{e.mode}" for e in row.subject.exports) or "none indexed"


def render_workaround_table(report: AuditReport) -> Table:
    from bot.cli.terminal import compact_table

    table = compact_table(
        "workaround (probes)", "verdict · upstream: why",
        title=f"audit of {len(report.workarounds)} registered workarounds (re-run with only it disabled)",
    )  # fmt: skip
    for row in report.workarounds:
        table.add_row(
            f"{row.workaround.name}\n[dim]{row.workaround.kind}, {row.workaround.backend}\n"
            f"{escape(_probes_text(row))}[/dim]",
            _verdict_cell(row, row.workaround.upstream),
        )
    return table


def render_markdown(report: AuditReport) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items() if n)
    lines = [
        "## exportbot audit"
        + (
            " (partial: rate limited until " + report.rate_limited_until + ")"
            if report.rate_limited_until
            else ""
        ),
        "",
        f"{len(report.entries)} entries: {counts or 'none'}.",
        "",
        "| entry | models | upstream | due / why | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    def link(row: EntryReport | WorkaroundReport, url: str | None) -> str:
        upstream = describe_state(row.state) if row.plan else UNKNOWN
        return f"[{upstream}]({url})" if url else upstream

    def verdict_text(row: EntryReport | WorkaroundReport) -> str:
        return f"**{row.verdict.verdict}**: " + "; ".join(row.verdict.reasons)

    for row in report.entries:
        lines.append(
            f"| {cell(row.entry.id)} | {cell(', '.join(row.entry.models))} | {link(row, row.entry.upstream)} | "
            f"{cell(_due_text(row))} | {cell(verdict_text(row))} |"
        )
    attention = [row for row in [*report.entries, *report.workarounds] if row.verdict.verdict in NEEDS_HUMAN]
    if attention:
        lines += ["", "### Needs a human", ""]
        lines += [
            f"- `{row.verdict.entry_id}`: **{row.verdict.verdict}**: {'; '.join(row.verdict.reasons)}"
            for row in attention
        ]
    if report.workarounds:
        counts = ", ".join(f"{n} {v}" for v, n in report.workaround_counts().items() if n)
        lines += [
            "",
            f"### Registered workarounds (re-run with only it disabled): {counts}",
            "",
            "| workaround | probes | upstream | due / why | verdict |",
            "| --- | --- | --- | --- | --- |",
        ]
        for w in report.workarounds:
            lines.append(
                f"| `{w.workaround.name}` | {cell(_probes_text(w))} | {link(w, w.workaround.upstream)} | "
                f"{cell(_due_text(w))} | {cell(verdict_text(w))} |"
            )
    check = report.candidate_check
    if check is not None:
        removable = ", ".join(f"`{i}`" for i in check.removable) or "nothing"
        lines += [
            "",
            f"### Candidate {check.environment.spec}",
            "",
            f"Removable once the pin moves: {removable}. Exports that pass at the pins, re-run with the "
            f"candidate: {len(check.rows)}, regressions: **{len(check.regressions)}**.",
            "",
            "| model | backend | mode | chosen because | with the candidate |",
            "| --- | --- | --- | --- | --- |",
            *(
                f"| {r.export.model} | {r.export.backend} | {r.export.mode} | {cell('; '.join(r.sampled.reasons))} "
                f"| {cell(describe_row(r))} |"
                for r in check.rows
            ),
            *(["", "Left out of the sample: " + "; ".join(check.left_out) + "."] if check.left_out else []),
        ]
    return "\n".join(lines) + "\n"


def render_candidate_table(check: CandidateCheck) -> Table:
    table = Table(title=f"candidate {check.environment.spec}: exports that pass at the pins, re-run with it")
    for column in ("model", "backend / mode", "chosen because", "result", "detail"):
        table.add_column(column, overflow="fold")
    for row in check.rows:
        table.add_row(row.export.model, f"{row.export.backend}/{row.export.mode}", "; ".join(row.sampled.reasons),
                      row.result, describe_row(row))  # fmt: skip
    return table
