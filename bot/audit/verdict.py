"""Turn a plan, the upstream state and the re-run outcomes into one verdict per entry (pure).

Verdicts:

* ``removable``: every run passed and matched eager, each run shows that it ran without the workaround
  (the ledger gate skipped, the optimizer on; for a registered workaround, it disabled) at the stack the
  plan names, and something explains it: a stack version moved since a verification that saw the entry fail
  as recorded (``still-needed`` or ``superseded``; a ``changed`` one never saw the recorded failure, and the
  move is judged against the versions verified, also under ``--candidate``), or (a registered workaround,
  which records no failure) upstream closed as completed / merged. With the
  tracker unreachable (or the issue gone, 404) only a pin move counts: the re-run is the evidence and
  the unknown upstream is never read as "closed".
* ``superseded``: a ledger entry's reproducer passes where nothing moved (as ``not-reproduced``), and
  registered workarounds are shown to have taken its job over: for every export, a re-run of the
  reproducer with workarounds that fired in its passing runs also disabled (``--without NAME``) fails with
  an error the entry's ``failure`` matches. The bug is still there; the exporter handles it without the
  ledger entry, which is proposed for removal like ``removable``, the superseding workarounds named.
* ``not-reproduced``: a ledger entry's reproducer passes at versions the entry claims it fails at (it was
  never seen failing, or nothing moved since it was) and no registered workaround is shown to have taken
  over: the entry or its reproducer is wrong, a human looks, and no PR ever proposes a removal on that
  evidence.
* ``still-needed``: every failing run failed with an error the entry's ``failure`` regex matches
  (``re.search``). A workaround records no regex: any failure without it counts, and the first error is
  shown in the reasons so a reviewer sees what it still prevents.
* ``changed``: some run failed differently (both the expected signature and the actual error are in the
  reasons): the workaround rots in place and a human should look.
* ``human``: upstream closed as not planned / duplicate or reopened; a pass that cannot show it ran
  without the workaround, or at the planned versions; or a workaround passes with nothing that explains
  it.
* ``unknown``: the upstream state could not be learned and nothing justifies a verdict.
* ``not-due``: nothing moved; no re-run happened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.audit.plan import (
    ENTRY,
    Plan,
    Subject,
    as_subject,
    describe_state,
    is_unknown,
    needs_human,
    same_version,
)
from bot.audit.upstream import UpstreamState
from bot.outcome import PASS
from exporters.ledger import LedgerEntry

REMOVABLE = "removable"
SUPERSEDED = "superseded"
STILL_NEEDED = "still-needed"
CHANGED = "changed"
HUMAN = "human"
NOT_REPRODUCED = "not-reproduced"
UNKNOWN = "unknown"
NOT_DUE = "not-due"
VERDICTS = (REMOVABLE, SUPERSEDED, STILL_NEEDED, CHANGED, HUMAN, NOT_REPRODUCED, UNKNOWN, NOT_DUE)
REMOVAL_VERDICTS = (REMOVABLE, SUPERSEDED)  # proposed for removal by the shrink PR; audit exit code 3
# Verdicts backed by a re-run, worth remembering (a not-reproduced entry is not re-run every audit).
RERUN_VERDICTS = (REMOVABLE, SUPERSEDED, STILL_NEEDED, CHANGED, NOT_REPRODUCED)
NEEDS_HUMAN = (CHANGED, HUMAN, NOT_REPRODUCED)  # listed under "needs a human"; audit exit code 4
# Last verdicts that saw the entry's reproducer fail AS RECORDED (its ``failure`` matched): still-needed, and
# superseded (whose probes brought the recorded failure back). ``changed`` saw it fail differently: the
# recorded failure itself was never seen there, so a pass after it proves nothing about that failure.
FAILED_BEFORE = (STILL_NEEDED, SUPERSEDED)


@dataclass(frozen=True)
class Verdict:
    entry_id: str
    verdict: str
    reasons: list[str]
    evidence: list[dict[str, Any]] = field(default_factory=list)
    # ``superseded``: the registered workarounds whose disabling brings the recorded failure back, and every
    # supersession probe tried (evidence, with ``without`` and whether it ``proves`` the takeover).
    superseded_by: tuple[str, ...] = ()
    supersession: list[dict[str, Any]] = field(default_factory=list)


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
        "versions": dict(outcome.get("versions") or {}),
        "workaround_off": _workaround_off(outcome),
        "workarounds_fired": sorted(outcome.get("workarounds_fired") or {}),
        "command": outcome.get("command"),  # the `exportbot export` line the re-run ran (bot.run.reruns)
    }


def _workaround_off(outcome: dict[str, Any]) -> list[str]:
    """What the run shows it left out: ledger entries (gate skipped, optimizer on) and disabled workarounds."""
    return [*(outcome.get("workaround_off") or []), *(outcome.get("workarounds_disabled") or [])]


def unproven_pass(subject: Subject, plan: Plan, outcome: dict[str, Any]) -> str | None:
    """Why a passing ``outcome`` is no evidence for ``subject``, or None when it is.

    A pass counts only when the run shows it ran without the workaround (an entry's reproducer with its
    ledger gate skipped and, for ``ONNX_DISABLE_OPTIMIZE``, the optimizer on; a workaround disabled) and
    at the versions the plan names: otherwise a re-run that kept the workaround, or ran elsewhere, would
    read as a fix.
    """
    if subject.kind == ENTRY:
        if outcome.get("repro") != subject.id:
            return f"it did not export the entry's reproducer (--repro {subject.id})"
        if subject.id not in (outcome.get("workaround_off") or []):
            return "it does not show the entry's workaround was off (the ledger gate did not apply and get skipped)"
        if subject.list_name == "ONNX_DISABLE_OPTIMIZE" and outcome.get("optimize") is not True:
            return "it does not show the onnxscript optimizer was on"
    elif subject.id not in (outcome.get("workarounds_disabled") or []):
        return f"it does not show {subject.id} was disabled"
    ran = outcome.get("versions") or {}
    wrong = [
        f"{name} {ran.get(name) or '(none recorded)'} instead of {pinned}"
        for name, pinned in plan.versions.items()
        if pinned is not None and not same_version(ran.get(name), pinned)
    ]
    return f"it ran with {', '.join(wrong)}" if wrong else None


# ── Superseded: registered workarounds took a ledger entry's job over ──
def _export_key(outcome: dict[str, Any]) -> tuple[Any, Any, bool]:
    return outcome.get("model"), outcome.get("backend"), bool(outcome.get("dynamic"))


def proves_takeover(subject: Subject, outcome: dict[str, Any]) -> bool:
    """Whether a supersession probe brought the entry's own failure back: the reproducer, re-run with some
    registered workarounds disabled, failed with an error the entry's ``failure`` matches."""
    return (
        subject.failure is not None
        and outcome.get("status") != PASS
        and bool(outcome.get("workarounds_disabled"))
        and re.search(subject.failure, _error_text(outcome)) is not None
    )


def next_superseders(
    fired: Sequence[str], tried: Sequence[dict[str, Any]], preferred: Sequence[Sequence[str]] = ()
) -> tuple[str, ...] | None:
    """The next set of workarounds to disable in a supersession probe of one export, or None when none is left.

    ``fired``: the workarounds that fired in the export's passing runs; ``tried``: the probes of this export
    so far (outcome records, ``workarounds_disabled`` the set they disabled). In order: sets that proved a
    takeover of another export of the entry (``preferred``; those holding a workaround fired here), each
    fired workaround alone, then each tried set
    plus one workaround that fired in that probe: with a workaround disabled, the one behind it may take over
    (Flint's grouped-mm experts come back, and then the histc rewrite fires).
    """
    done = {frozenset(p.get("workarounds_disabled") or ()) for p in tried}
    expansions = [
        (*disabled, name)
        for probe in tried
        for disabled in [tuple(probe.get("workarounds_disabled") or ())]
        for name in sorted(probe.get("workarounds_fired") or {})
        if name not in disabled
    ]
    others = [names for names in preferred if set(names) & set(fired)]
    for names in [*others, *((name,) for name in fired), *expansions]:
        if names and frozenset(names) not in done:
            return tuple(sorted(set(names)))
    return None


def _takeover(
    subject: Subject, plan: Plan, outcomes: Sequence[dict[str, Any]], probes: Sequence[dict[str, Any]]
) -> tuple[dict[tuple[Any, Any, bool], dict[str, Any]], list[str]]:
    """Per export of ``subject``, the probe proving a takeover, and for each export without one, why.

    A probe proves it when it ran the entry's reproducer as the passing runs did (ledger gate off, at the
    planned versions), fails as the entry records, and disabled a workaround that fired in every passing
    run of that export (so what it disabled is what made them pass).
    """
    proofs: dict[tuple[Any, Any, bool], dict[str, Any]] = {}
    missing: list[str] = []
    for export in subject.exports:
        key = (export.model, export.backend, export.dynamic)
        fired = [set(o.get("workarounds_fired") or {}) for o in outcomes if _export_key(o) == key]
        mine = [p for p in probes if _export_key(p) == key]
        proof = next(
            (
                p
                for p in mine
                if proves_takeover(subject, p)
                and unproven_pass(subject, plan, p) is None
                and fired
                and all(set(p["workarounds_disabled"]) & f for f in fired)
            ),
            None,
        )
        if proof is not None:
            proofs[key] = proof
            continue
        tried = "; ".join(
            f"--without {' '.join(p.get('workarounds_disabled') or ())}: {p.get('status')}"
            + ("" if p.get("status") == PASS else f" ({error_excerpt(p, 120)})")
            for p in mine
        )
        what = (
            f"tried {tried}" if tried
            else "not probed" if any(fired)
            else "no registered workaround fired in its passing runs to try"
        )  # fmt: skip
        missing.append(f"{export.model} ({export.mode}): {what}")
    return proofs, missing


def verdict(
    entry: LedgerEntry | Subject,
    plan: Plan,
    upstream_state: UpstreamState | None,
    outcomes: Sequence[dict[str, Any]],
    probes: Sequence[dict[str, Any]] = (),
) -> Verdict:
    """The verdict for one entry (or workaround); ``outcomes`` is empty when the plan was not due.

    ``probes`` are the supersession probes of a ledger entry whose every run passed with nothing moved
    (bot.run.reruns.probe_superseders): re-runs of its reproducer with registered workarounds disabled.
    """
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

    unproven = next(
        ((o, why) for o in outcomes if (why := unproven_pass(entry, plan, o)) is not None), None
    )
    if unproven is not None:
        run, why = unproven
        return Verdict(
            entry.id,
            HUMAN,
            [f"{run.get('model')} ({_mode(run)}) passed, but {why}: not evidence that it can go"],
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
    if entry.speed:
        return Verdict(
            entry.id,
            HUMAN,
            [f"{passed}, as exports do without a speed workaround: removable only once it saves no time at "
             f"{_stack(plan)} (time an export it fires in, as it is and with `--without {entry.id}`)"],
            evidence,
        )  # fmt: skip
    if needs_human(upstream_state):
        return Verdict(entry.id, HUMAN, [f"{passed}, but upstream {state_word}: a human decides"], evidence)
    if entry.kind == ENTRY and not (moved and plan.last_verdict in FAILED_BEFORE):
        proofs, missing = _takeover(entry, plan, outcomes, probes)
        proving = [id(q) for q in proofs.values()]
        tried = [evidence_of(p) | {"without": list(p.get("workarounds_disabled") or ()), "proves": id(p) in proving}
                 | ({"failure_line": failure_line(entry, p)} if id(p) in proving else {}) for p in probes]  # fmt: skip
        if proofs and not missing:
            names = tuple(sorted({n for p in proofs.values() for n in p["workarounds_disabled"]}))
            shown = "; ".join(
                f"{model} ({'dynamic' if dynamic else 'static'}): with --without "
                f"{' --without '.join(p['workarounds_disabled'])} it fails as recorded: {failure_line(entry, p)}"
                for (model, _, dynamic), p in proofs.items()
            )
            return Verdict(
                entry.id,
                SUPERSEDED,
                [
                    f"{passed} at {_stack(plan)} with no pin moved, and registered workarounds took over: "
                    f"{', '.join(names)}",
                    f"the bug is still there: {shown}",
                    "the entry can go while they stay registered",
                ],
                evidence,
                superseded_by=names,
                supersession=tried,
            )
        takeover = f"; no registered workaround shown to take over: {'; '.join(missing)}" if probes else ""
        return Verdict(
            entry.id,
            NOT_REPRODUCED,
            [
                f"{passed} at {_stack(plan)}, where the entry claims /{entry.failure}/ "
                f"({_last_seen(plan.last_verdict)}); "
                "fix the entry or its [entry.repro]: never removed on this evidence" + takeover
            ],
            evidence,
            supersession=tried,
        )
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


def _last_seen(last_verdict: str | None) -> str:
    """Why a pass at these versions contradicts the entry, from its last verification."""
    if last_verdict in FAILED_BEFORE:
        return f"last verified {last_verdict}, and no pin of its stack moved since"
    if last_verdict == NOT_REPRODUCED:
        return "its reproducer did not fail at the last verification either"
    if last_verdict == CHANGED:
        return ("at the last verification it failed differently (changed): the recorded failure was never seen at "
                "the versions it was verified at, so nothing shows the move fixed it")
    return "its reproducer was never seen failing"


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


def failure_line(subject: Subject, outcome: dict[str, Any], limit: int = 300) -> str:
    """The line of a failing run's error where the entry's ``failure`` matches (ANSI colours removed), else
    :func:`first_error_line`: the recorded failure itself, not torch.onnx's paragraph of advice around it."""
    text = _ANSI.sub("", _error_text(outcome))
    found = re.search(subject.failure, text) if subject.failure else None
    if found is None:
        return first_error_line(outcome, limit)
    start = text.rfind("\n", 0, found.start()) + 1
    end = text.find("\n", found.start())
    return text[start : end if end != -1 else len(text)].strip()[:limit]


def first_error_line(outcome: dict[str, Any], limit: int = 300) -> str:
    """``Type: first line of the message`` (ANSI colours removed): what a failing probe shows a reviewer.

    Unlike :func:`error_excerpt`, which looks for torch.onnx's summary line, this keeps the message's own
    start (an ExecuTorch ``SpecViolationError`` names the operator there).
    """
    lines = [line.strip() for line in _ANSI.sub("", outcome.get("error") or "").splitlines() if line.strip()]
    first, kind = (lines[0] if lines else str(outcome.get("status") or "")), outcome.get("error_type")
    return (f"{kind}: {first}" if kind and not first.startswith(kind) else first)[:limit]


def _mode(outcome: dict[str, Any]) -> str:
    return "dynamic" if outcome.get("dynamic") else "static"


def _error_text(outcome: dict[str, Any]) -> str:
    return "\n".join(
        part for part in (outcome.get("error_type"), outcome.get("error"), outcome.get("status")) if part
    )


def _stack(plan: Plan) -> str:
    return ", ".join(f"{name} {version or '(unpinned)'}" for name, version in plan.versions.items())
