"""Which new releases ``exportbot watch`` proposes, in which groups (pure: no I/O, no clock of its own).

Why a decision of its own: a pin moves only when a person edits ``constraints.txt``, so most entries (those
with no upstream issue to watch) are only ever re-run when someone happens to bump a pin. The watch turns a
release on the package index into that event. What it proposes follows rules a maintainer can read here:

* **Final releases newer than the pin.** Pre-releases and dev releases are not proposed (a pin on one
  would be a bet, not a bump); post releases are finals.
* **Minimum release age** (``[tool.exportbot] min_release_age_days``, default 3, as Renovate's
  ``minimumReleaseAge`` and Dependabot's ``cooldown``): a release younger than that is left for a later run,
  so a yanked or hot-fixed release is not proposed. A release whose upload time the index does not tell is
  treated as too young unless the minimum is 0: its age cannot be shown.
* **Coupled packages move together** (``[tool.exportbot.coupled]``: executorch is built for one torch
  release; torchao follows torch): they form one group, named after its first package in stack order, whose
  candidate is the newest eligible release of each member that has one; the others stay at their pins. Each
  group is one rolling bump PR (``exportbot/bump-<group>``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from bot.audit.pins import BACKEND_STACK, normalize_name


@dataclass(frozen=True)
class Release:
    """One release the index offers; ``uploaded`` is None when the index does not say when."""

    package: str
    version: str
    uploaded: datetime.datetime | None = None


@dataclass(frozen=True)
class GroupCandidate:
    """What one group would move to, and every newer release it does not propose yet, with why."""

    group: str
    members: tuple[str, ...]
    moves: dict[str, tuple[str, str]]  # package → (pinned, candidate)
    waiting: tuple[str, ...] = ()  # "onnx 1.24.0: 1.2 days old (minimum 3)"

    @property
    def specs(self) -> tuple[str, ...]:
        """``PKG==VER`` of every moved package: the candidate audit's ``--candidate`` options."""
        return tuple(f"{name}=={new}" for name, (_, new) in self.moves.items())

    def describe(self) -> str:
        return ", ".join(f"{name} {old} → {new}" for name, (old, new) in self.moves.items())


@dataclass
class WatchPlan:
    """The groups with something to propose, and the groups with nothing (each with why)."""

    candidates: list[GroupCandidate] = field(default_factory=list)
    quiet: dict[str, str] = field(default_factory=dict)  # group → "nothing newer than 0.7.2" / waiting lines


def watched_packages() -> list[str]:
    """Every package of the pinned stack, in stack order: what the watch asks the index about."""
    return list(dict.fromkeys(name for stack in BACKEND_STACK.values() for name in stack))


def groups(packages: Sequence[str], coupled: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Group name → its members (in ``packages`` order): the connected sets of the ``coupled`` relation,
    named after their first member. A coupled package outside ``packages`` is ignored."""
    known = {normalize_name(p): p for p in packages}
    parent = {name: name for name in known}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    for package, others in coupled.items():
        for other in others:
            a, b = normalize_name(package), normalize_name(other)
            if a in known and b in known:
                parent[root(a)] = root(b)
    found: dict[str, list[str]] = {}
    for key, name in known.items():
        found.setdefault(root(key), []).append(name)
    ordered = sorted(found.values(), key=lambda members: packages.index(members[0]))
    return {members[0]: tuple(members) for members in ordered}


def newer_versions(available: Sequence[str], pinned: str) -> list[str]:
    """Final releases newer than ``pinned``, ascending; pre-releases, dev releases, local builds (``2.13.0+cpu``:
    the same release as ``2.13.0``) and unparsable versions are left out. ``exportbot bisect`` searches these;
    the watch proposes the newest that is old enough."""
    floor = Version(pinned)
    found = []
    for text in available:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version > floor and not (version.is_prerelease or version.is_devrelease or version.local):
            found.append(version)
    return [str(v) for v in sorted(set(found))]


def newer_finals(pinned: str, offered: Iterable[Release]) -> list[Release]:
    """:func:`newer_versions` of ``offered``, newest first."""
    by_version = {str(Version(r.version)): r for r in offered if _parses(r.version)}
    return [by_version[v] for v in reversed(newer_versions(list(by_version), pinned))]


def _parses(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def age_problem(release: Release, now: datetime.datetime, minimum_days: float) -> str | None:
    """Why ``release`` is too young to propose, or None when it is old enough."""
    if minimum_days <= 0:
        return None
    if release.uploaded is None:
        return f"{release.package} {release.version}: the index gives no upload time, so its age cannot be shown"
    days = (now - release.uploaded).total_seconds() / 86400
    if days < minimum_days:
        return f"{release.package} {release.version}: {days:.1f} days old (minimum {minimum_days:g})"
    return None


def plan_watch(
    pins: Mapping[str, str],
    offered: Mapping[str, Sequence[Release]],
    coupled: Mapping[str, Sequence[str]],
    now: datetime.datetime,
    minimum_days: float,
    packages: Sequence[str] | None = None,
) -> WatchPlan:
    """The candidates of every group. ``pins``: normalised name → pinned version; ``offered``: package (as
    ``packages`` names it) → the releases the index offers."""
    packages = list(packages or watched_packages())
    plan = WatchPlan()
    for group, members in groups(packages, coupled).items():
        moves: dict[str, tuple[str, str]] = {}
        waiting: list[str] = []
        for name in members:
            pinned = pins.get(normalize_name(name))
            if pinned is None:
                continue
            for release in newer_finals(pinned, offered.get(name, ())):
                problem = age_problem(release, now, minimum_days)
                if problem is None:
                    moves[name] = (pinned, release.version)
                    break
                waiting.append(problem)
        if moves:
            plan.candidates.append(GroupCandidate(group, members, moves, tuple(waiting)))
        else:
            pinned = ", ".join(f"{m} {pins.get(normalize_name(m), '(unpinned)')}" for m in members)
            plan.quiet[group] = "; ".join(waiting) if waiting else f"nothing newer than {pinned}"
    return plan
