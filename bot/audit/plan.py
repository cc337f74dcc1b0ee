"""Decide which ledger entries (and workarounds) are due for a re-run (pure: no I/O, same answer in CI and locally).

An entry is *due* when there is a reason to believe its workaround may no longer be needed, or when
nobody has checked yet:

* its upstream issue was closed as ``completed`` or its pull request merged (a trigger, never a proof:
  the re-run decides). Once re-run after that closure at the current pins and found still failing, the
  closure alone stops making it due ("closed, still failing at onnxscript 0.7.2; recheck on next
  release"); the next pin move makes it due again;
* a package of the backend's stack (``BACKEND_STACK[entry.backend]``) is pinned at a version other
  than the one it was last verified with (each named: ``onnx 1.23.2 → 1.24.0``);
* it was never verified;
* ``--candidate PKG==VER`` names a package of its stack (re-run in the candidate's environment, whose
  version then stands in the plan's ``versions`` and ``moved_pins``; see bot.run.candidate);
* ``--all`` / ``--entry ID`` force it.

The same rules apply to a registered workaround (``exportbot audit --workarounds``): both become a
:class:`Subject`, the one shape the plan, the re-run and the verdict read. A workaround's stack is its
backend's stack plus its ``dependency`` when that is another package, so a pin move of the package
expected to carry the fix makes it due too.

Upstream closed as ``not_planned`` / ``duplicate``, or reopened, makes an entry *not* due unless
forced: a human decides what such a closure means (bot.audit.verdict gives ``human``). An unreachable
tracker, a 404 or an entry without a GitHub upstream gives no trigger but does not block one either:
a pin move still makes the entry due, because the re-run itself is the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from bot.audit.pins import BACKEND_STACK, normalize_name, same_release
from bot.audit.upstream import NOT_FOUND, UpstreamState
from bot.audit.verification import Verification
from exporters.ledger import LedgerEntry
from exporters.ledger.entries import SCOPE_MODES
from exporters.utils import Workaround

ENTRY = "entry"
WORKAROUND = "workaround"


class Export(NamedTuple):
    """One export a re-run repeats: a model class through a backend in one shape mode."""

    model: str
    backend: str
    dynamic: bool

    @property
    def mode(self) -> str:
        return "dynamic" if self.dynamic else "static"


@dataclass(frozen=True)
class Subject:
    """What the audit checks: a ledger entry or a registered workaround, reduced to what every step reads.

    Why one shape: the triggers, the isolated re-runs and the verdicts are the same for both; only what a
    re-run leaves out differs (``--ignore-ledger`` for an entry, ``--without NAME`` for a workaround).
    ``failure`` is the recorded error regex; None (a workaround records none) makes any failure count as
    "still needed", with the error shown.
    """

    id: str
    kind: str  # ENTRY | WORKAROUND
    backend: str  # a key of BACKEND_STACK
    exports: tuple[Export, ...]
    stack: tuple[str, ...]
    upstream: str | None = None
    dependency: str | None = None
    failure: str | None = None
    list_name: str | None = None  # a ledger entry's list (ONNX_DISABLE_OPTIMIZE: its re-runs need the optimizer on)
    speed: bool = False  # a speed workaround: passing without it is expected, not evidence that it can go
    budget_s: float | None = None  # a slowness entry's [entry.repro] budget_s: its re-runs' time limit


def entry_subject(entry: LedgerEntry) -> Subject:
    """A ledger entry as a subject: every model × every mode its reproducer runs in, through its backend."""
    exports = tuple(Export(m, entry.backend, d) for m in entry.models for d in entry.modes())
    return Subject(
        entry.id, ENTRY, entry.backend, exports, tuple(BACKEND_STACK[entry.backend]),
        entry.upstream, entry.dependency, entry.failure, entry.list_name,
        budget_s=entry.repro.budget_s if entry.repro is not None else None,
    )  # fmt: skip


def workaround_subject(workaround: Workaround, exports: Iterable[Export]) -> Subject:
    """A workaround as a subject; ``exports`` are those it fired in (see bot.audit.workaround_index).

    ``executorch.xnnpack`` patches belong to the ``executorch`` stack. The dependency joins the stack when
    it is not already part of it.
    """
    backend = workaround.backend.split(".")[0]
    stack = list(BACKEND_STACK[backend])
    if workaround.dependency and normalize_name(workaround.dependency) not in map(normalize_name, stack):
        stack.append(workaround.dependency)
    return Subject(
        workaround.name, WORKAROUND, backend, tuple(exports), tuple(stack),
        workaround.upstream, workaround.dependency, None, speed=workaround.speed,
    )  # fmt: skip


def as_subject(item: LedgerEntry | Subject) -> Subject:
    """Callers may pass a ledger entry where a subject is read (the ledger audit always did)."""
    return item if isinstance(item, Subject) else entry_subject(item)


@dataclass(frozen=True)
class Plan:
    """Whether to re-run one entry, and every reason, so the report can say why (or why not)."""

    entry_id: str
    due: bool
    reasons: list[str]
    moved_pins: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    candidate: str | None = None  # "onnx==1.24.0" when --candidate named packages of this stack (comma-joined)
    versions: dict[str, str | None] = field(default_factory=dict)  # the stack at its current pins
    # The verdict of the last verification (None: never verified). A pass is only evidence of a fix when
    # the failure was seen before: after "still-needed" or "changed" at other versions.
    last_verdict: str | None = None


def describe_state(state: UpstreamState | None) -> str:
    """One short word for a state, as stored in ``verified.toml`` and shown in reports."""
    if state is None:
        return "none"
    if not state.reachable:
        return "unknown"
    if state.error == NOT_FOUND:
        return "not found"
    if state.kind == "pull" and state.state == "closed":
        return "merged" if state.merged else "closed:unmerged"
    if state.state == "closed":
        return f"closed:{state.state_reason or 'unspecified'}"
    return "open:reopened" if state.state_reason == "reopened" else "open"


def needs_human(state: UpstreamState | None) -> bool:
    """Closed for a reason other than a fix (not planned, duplicate, unmerged PR), or reopened."""
    if state is None or not state.reachable or state.error:
        return False
    if state.state == "closed":
        return not state.closed_as_fixed
    return state.state_reason == "reopened"


def is_unknown(state: UpstreamState | None) -> bool:
    """The tracker could not tell us (unreachable, rate limited, malformed, 404): never "closed"."""
    return state is not None and (not state.reachable or state.error == NOT_FOUND)


def parse_candidate(candidate: str) -> list[tuple[str, str]]:
    """``"onnx==1.24.0"`` → ``[("onnx", "1.24.0")]``; coupled packages moved together are joined by commas
    (``"torch==2.14.0,executorch==1.6.0"``, as ``exportbot watch`` tries a group); ``ValueError`` otherwise."""
    specs = []
    for part in candidate.split(","):
        name, sep, version = (text.strip() for text in part.partition("=="))
        if not sep or not name or not version:
            raise ValueError(f"--candidate must be PKG==VERSION, got {part.strip()!r}")
        specs.append((name, version))
    if len({normalize_name(name) for name, _ in specs}) < len(specs):
        raise ValueError(f"--candidate names a package twice: {candidate!r}")
    return specs


def plan_entry(
    entry: LedgerEntry | Subject,
    upstream_state: UpstreamState | None,
    pins: Mapping[str, str],
    verification: Mapping[str, Verification],
    *,
    force: bool = False,
    candidate: str | None = None,
) -> Plan:
    """The plan for ``entry``; ``pins`` is keyed by normalised name, as :func:`bot.audit.pins.read_pins` gives."""
    entry = as_subject(entry)
    stack = entry.stack
    versions = {name: pins.get(normalize_name(name)) for name in stack}
    matched = []
    for name, version in parse_candidate(candidate) if candidate is not None else ():
        in_stack = next((n for n in stack if normalize_name(n) == normalize_name(name)), None)
        if in_stack is not None:
            matched.append(f"{name}=={version}")
            # The re-run runs at the candidate: that is the stack a verdict speaks about. What moved is
            # judged against the versions the entry was verified at, never against the pins: a candidate
            # equal to the verified release moves nothing, whatever the pin file says.
            versions = {**versions, in_stack: version}
    matched_candidate = ",".join(matched) or None
    record = verification.get(entry.id)
    moved = _moved(record, versions) if record else {}
    reasons: list[str] = []
    triggers = 0

    state_word = describe_state(upstream_state)
    if upstream_state is not None and upstream_state.closed_as_fixed:
        seen = record and not moved and record.upstream_state == state_word
        if seen and record.verdict in ("still-needed", "changed", "not-reproduced"):
            outcome = "not reproduced" if record.verdict == "not-reproduced" else "still failing"
            reasons.append(
                f"upstream {state_word}, but {outcome} at these pins on {record.verified_on}; "
                "recheck when a pin moves"
            )
        else:
            reasons.append(f"upstream {state_word}")
            triggers += 1
    elif needs_human(upstream_state):
        reasons.append(f"upstream {state_word}: a human decides what it means")
    elif is_unknown(upstream_state):
        reasons.append(f"upstream state unknown ({upstream_state.error})")
    elif upstream_state is None:
        reasons.append("no GitHub upstream to watch")

    if record is None:
        reasons.append("never verified")
        triggers += 1
    for name, (old, new) in moved.items():
        reasons.append(f"{name} {old or '(unpinned)'} → {new or '(unpinned)'}")
        triggers += 1

    if matched_candidate is not None:
        reasons.append(f"candidate {matched_candidate}")
        triggers += 1
    if force:
        reasons.append("forced (--all / --entry)")

    blocked = needs_human(upstream_state) and not force
    due = force or (triggers > 0 and not blocked)
    if not due and not reasons:
        reasons.append("nothing moved since the last verification")
    elif not due and not blocked and record is not None:
        reasons.append(f"nothing moved since {record.verified_on}")
    return Plan(entry.id, due, reasons, moved, matched_candidate, versions, record.verdict if record else None)


def _moved(
    record: Verification, versions: Mapping[str, str | None]
) -> dict[str, tuple[str | None, str | None]]:
    """Stack packages whose pin differs from the one recorded at the last verification."""
    return {
        name: (record.versions.get(name), version)
        for name, version in versions.items()
        if not same_version(record.versions.get(name), version)
    }


def same_version(recorded: str | None, pinned: str | None) -> bool:
    """Whether a recorded version is the pinned release: a re-run records what it ran with
    (``2.13.0+cpu``), the pin file names the release (``2.13.0``)."""
    if recorded is None or pinned is None:
        return recorded == pinned
    return recorded == pinned or same_release(recorded, pinned)


def scope_modes(scope: str) -> list[bool]:
    """The ``dynamic`` flags an entry's scope covers: ``all`` → static and dynamic."""
    # generate: one dynamic re-run, which the child's `export --repro ID` makes a generation export
    # (bot/run/generation.py), never a plain dynamic export that would be the wrong evidence.
    return SCOPE_MODES[scope]
