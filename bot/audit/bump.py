"""What a bump PR proposes for one group's candidate, from its candidate audit (pure: no I/O).

Why the removals ride on the bump: an entry whose workaround the new release makes unnecessary becomes
removable the moment the pin moves, and only then; proposing both in one PR is the one moment the evidence
(re-runs at exactly the new versions) and the change agree. The rules:

* **Removals**: every ledger entry and registered workaround the candidate audit found ``removable`` or
  ``superseded`` at the new versions (a row planned under the candidate).
* **Regressions**: every sampled export that passes at the pins and fails with the candidate (bot.run.candidate:
  a failure at the pins too is a stale record, exportbot's own incompatibility is ``unsupported``: neither is a
  regression). Any regression makes the PR a draft titled with the count, and **no removal is proposed on a
  regressed stack**: the removals are listed as withheld until the regression is understood.
* **Turned down**: a bump PR a human closed unmerged is not proposed again for the same moves; a later version
  is (its moves differ).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.audit.pins import constraints_with, normalize_name
from bot.audit.verdict import REMOVAL_VERDICTS, first_error_line

REGRESSION = "regression"  # bot.run.candidate's result for a sampled export broken by the candidate


@dataclass(frozen=True)
class Regression:
    """A sampled export that passes at the pins and fails with the candidate, as the PR shows it."""

    model: str
    backend: str
    mode: str
    status: str
    error: str
    command: str | None  # the `exportbot export` line that ran it with the candidate

    @property
    def export(self) -> str:
        return f"{self.model} {self.backend}/{self.mode}"


@dataclass(frozen=True)
class BumpDecision:
    """One group's bump: the pins it moves, the removals it carries, the regressions it would bring."""

    group: str
    moves: Mapping[str, tuple[str, str]]  # package → (pinned, candidate)
    removals: tuple[str, ...]  # entry ids and workaround names the PR removes
    regressions: tuple[Regression, ...] = ()
    withheld: tuple[str, ...] = ()  # removable at the candidate, not proposed: the stack regressed

    @property
    def draft(self) -> bool:
        return bool(self.regressions)

    def describe_moves(self) -> str:
        return ", ".join(f"{name} {old} → {new}" for name, (old, new) in self.moves.items())

    @property
    def title(self) -> str:
        title = f"exportbot: bump {self.describe_moves()}"
        if self.regressions:
            count = len(self.regressions)
            return f"{title}: {count} regression{'s' * (count != 1)} (draft)"
        if self.removals:
            return f"{title}, removing {len(self.removals)} workaround{'s' * (len(self.removals) != 1)}"
        return title


def removal_ids(report: Mapping[str, Any]) -> list[str]:
    """Rows of a candidate audit's report (``AuditReport.as_dict()``; the watch audits only what the moved
    packages touch, each row planned under the candidate) that are removable at the candidate."""
    rows = [*report.get("entries", ()), *(report.get("workarounds") or ())]
    return [row["id"] for row in rows if row["verdict"] in REMOVAL_VERDICTS]


def regressions_of(candidate_check: Mapping[str, Any] | None) -> list[Regression]:
    """The regressions of a report's ``candidate_check`` block, with the failure's first line."""
    found = []
    for row in (candidate_check or {}).get("sample", ()):
        if row["result"] != REGRESSION:
            continue
        ran = row["candidate"]
        found.append(Regression(row["model"], row["backend"], row["mode"], str(ran.get("status")),
                                first_error_line(ran), ran.get("command")))  # fmt: skip
    return found


def decide_bump(group: str, moves: Mapping[str, tuple[str, str]], report: Mapping[str, Any]) -> BumpDecision:
    """The bump of ``group`` to ``moves`` that a candidate audit's ``report`` supports."""
    removable = removal_ids(report)
    regressions = regressions_of(report.get("candidate_check"))
    if regressions:
        return BumpDecision(group, dict(moves), (), tuple(regressions), tuple(removable))
    return BumpDecision(group, dict(moves), tuple(removable))


def turned_down(rejected: Iterable[tuple[int, str, Mapping[str, str]]], group: str, moves: Mapping[str, tuple[str, str]]
                ) -> int | None:  # fmt: skip
    """The number of a bump PR of ``group`` a human closed unmerged at exactly these versions, else None.
    ``rejected``: (PR number, group, {package: proposed version}) read from the closed PRs' markers."""
    wanted = {name: new for name, (_, new) in moves.items()}
    return next((number for number, closed_group, proposed in rejected
                 if closed_group == group and dict(proposed) == wanted), None)  # fmt: skip


def moved_pins(pins: Mapping[str, str], moves: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """``pins`` (normalised names, as bot.audit.pins.read_pins gives) with the moves applied."""
    return dict(pins) | {normalize_name(name): new for name, (_, new) in moves.items()}


def pin_file_with(text: str, moves: Mapping[str, tuple[str, str]]) -> str:
    """``constraints.txt`` text with every move applied: only the versions change (the bump PR's diff)."""
    for name, (_, new) in moves.items():
        text = constraints_with(text, name, new)
    return text
