"""Turn a plan, the upstream state and the re-run outcomes into one verdict per entry (pure).

Verdicts:

* ``removable``: every run passed and matched eager, and something explains it: upstream closed as
  completed / merged, or a stack pin moved since the last verification (named in the reasons). With the
  tracker unreachable (or the issue gone, 404) only a pin move counts: the re-run is the evidence and
  the unknown upstream is never read as "closed".
* ``still-needed``: every failing run failed with an error the entry's ``failure`` regex matches
  (``re.search``). A workaround records no regex: any failure without it counts, and the first error is
  shown in the reasons so a reviewer sees what it still prevents.
* ``changed``: some run failed differently (both the expected signature and the actual error are in the
  reasons): the workaround rots in place and a human should look.
* ``human``: upstream closed as not planned / duplicate or reopened; or the export passes with nothing
  that explains it (flaky or mis-recorded entry).
* ``unknown``: the upstream state could not be learned and nothing justifies a verdict.
* ``not-due``: nothing moved; no re-run happened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.plan import Plan, Subject, as_subject, describe_state, is_unknown, needs_human
from bot.runner import PASS
from bot.tracker import UpstreamState
from exporters.ledger import LedgerEntry

REMOVABLE = "removable"
STILL_NEEDED = "still-needed"
CHANGED = "changed"
HUMAN = "human"
UNKNOWN = "unknown"
NOT_DUE = "not-due"
VERDICTS = (REMOVABLE, STILL_NEEDED, CHANGED, HUMAN, UNKNOWN, NOT_DUE)
RERUN_VERDICTS = (REMOVABLE, STILL_NEEDED, CHANGED)  # verdicts backed by a re-run, worth remembering


@dataclass(frozen=True)
class Verdict:
    entry_id: str
    verdict: str
    reasons: list[str]
    evidence: list[dict[str, Any]] = field(default_factory=list)


def evidence_of(outcome: dict[str, Any]) -> dict[str, Any]:
    """The part of an outcome record a reviewer needs: what ran, how it ended, how close to eager."""
    diffs = outcome.get("max_abs_diff") or {}
    return {
        "model": outcome.get("model"),
        "backend": outcome.get("backend"),
        "mode": _mode(outcome),
        "run": outcome.get("run"),
        "status": outcome.get("status"),
        "error": (outcome.get("error") or "")[:500] or None,
        "max_abs_diff": max(diffs.values()) if diffs else None,
        "seconds": outcome.get("seconds"),
    }


def verdict(
    entry: LedgerEntry | Subject,
    plan: Plan,
    upstream_state: UpstreamState | None,
    outcomes: Sequence[dict[str, Any]],
) -> Verdict:
    """The verdict for one entry (or workaround); ``outcomes`` is empty when the plan was not due."""
    entry = as_subject(entry)
    evidence = [evidence_of(o) for o in outcomes]
    state_word = describe_state(upstream_state)
    if not outcomes:
        if needs_human(upstream_state):
            return Verdict(entry.id, HUMAN, [f"upstream {state_word}: decide whether the entry stays"])
        if is_unknown(upstream_state):
            return Verdict(entry.id, UNKNOWN, [f"upstream state unknown: {upstream_state.error}"])
        return Verdict(entry.id, NOT_DUE, list(plan.reasons))

    failures = [o for o in outcomes if o.get("status") != PASS]
    if failures:
        passed = len(outcomes) - len(failures)
        flaky = [f"{passed} of {len(outcomes)} runs passed (nondeterministic)"] if passed else []
        if entry.failure is None:
            first = failures[0]
            return Verdict(
                entry.id,
                STILL_NEEDED,
                [
                    f"fails without it at {_stack(plan)}: {first.get('model')} ({_mode(first)}) "
                    f"{first.get('status')}: {error_excerpt(first)}",
                    *flaky,
                ],
                evidence,
            )
        signature = re.compile(entry.failure)
        different = [o for o in failures if not signature.search(_error_text(o))]
        if different:
            first = different[0]
            return Verdict(
                entry.id,
                CHANGED,
                [
                    f"fails differently: expected /{entry.failure}/, got {first.get('status')}: "
                    f"{_error_text(first)[:300]}",
                    *flaky,
                ],
                evidence,
            )
        return Verdict(
            entry.id,
            STILL_NEEDED,
            [f"still fails as recorded (/{entry.failure}/) at {_stack(plan)}", *flaky],
            evidence,
        )

    diffs = [e["max_abs_diff"] for e in evidence if e["max_abs_diff"] is not None]
    passed = f"all {len(outcomes)} runs pass and match eager" + (
        f" (max abs diff {max(diffs):.3g})" if diffs else ""
    )
    moved = [
        f"{n} {old or '(unpinned)'} → {new or '(unpinned)'}" for n, (old, new) in plan.moved_pins.items()
    ]
    explains = f"; moved since last verification: {', '.join(moved)}" if moved else ""
    if needs_human(upstream_state):
        return Verdict(entry.id, HUMAN, [f"{passed}, but upstream {state_word}: a human decides"], evidence)
    if moved or (upstream_state is not None and upstream_state.closed_as_fixed):
        return Verdict(entry.id, REMOVABLE, [f"{passed}; upstream {state_word}{explains}"], evidence)
    if is_unknown(upstream_state):
        return Verdict(
            entry.id,
            UNKNOWN,
            [f"{passed}, but upstream unknown and no pin moved: not enough to remove"],
            evidence,
        )
    return Verdict(
        entry.id,
        HUMAN,
        [f"{passed} with upstream {state_word} and no pin moved: flaky or mis-recorded entry?"],
        evidence,
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^(?:<class '[\w.]+'>|[\w.]*(?:Error|Exception)):\s*\S")


def error_excerpt(outcome: dict[str, Any], limit: int = 300) -> str:
    """The line of an error that names the failure, not the exporter's boilerplate around it.

    torch.onnx wraps the real exception in paragraphs of advice; its ``<class 'ValueError'>: Cannot view
    ...`` summary line is what a reviewer needs. Takes the last ``Type: message`` line of the error (ANSI
    colours removed), else its first line.
    """
    lines = [line.strip() for line in _ANSI.sub("", _error_text(outcome)).splitlines() if line.strip()]
    named = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return (named[-1] if named else lines[0] if lines else "")[:limit]


def _mode(outcome: dict[str, Any]) -> str:
    return "dynamic" if outcome.get("dynamic") else "static"


def _error_text(outcome: dict[str, Any]) -> str:
    return "\n".join(
        part for part in (outcome.get("error_type"), outcome.get("error"), outcome.get("status")) if part
    )


def _stack(plan: Plan) -> str:
    return ", ".join(f"{name} {version or '(unpinned)'}" for name, version in plan.versions.items())
