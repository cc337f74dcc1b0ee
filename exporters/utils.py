"""The workaround registry shared by every exporter.

Backend bugs are worked around by small registered functions, never by editing models. Three kinds
live here (the ONNX translations and IR fixes register through the same record in
``exporter_onnx``):

* ``register_patch(backend, *paths)`` decorates a factory ``factory(original) -> replacement``. While an
  export runs, each dotted path (a model method, a module function, a torch op such as
  ``"torch.Tensor.split"``) is swapped for ``factory(original)``; the original comes back afterwards,
  also when the export raises.
* ``register_fx_node_fix(backend)`` decorates ``fix(graph_module, node) -> bool``; True means the fix
  rewrote the node.
* ``register_fx_program_fix(backend)`` decorates ``fix(exported_program) -> bool | None``; a truthy return
  means it changed the program.

Every registration carries lifecycle metadata (``upstream=`` issue URL, ``dependency=`` pip package whose
release should carry the fix) so the bot can tell when a workaround may go. ``grep -rn "@register_" exporters/``
finds every one of them.

Unlike transformers' reference registry, a patch path that does not resolve is an error naming the
workaround and the path: a renamed class must not silently turn a workaround into a no-op. Declare
``optional=True`` for targets that exist only in some versions.

Patches are process-global attribute swaps. ``_PATCH_LOCK`` (re-entrant) serialises exports inside one
process: a second thread waits until the first export has restored everything. Nesting is
deterministic: the outer backend (e.g. ``onnx``) installs first, the inner one (``dynamo``, run by every
exporter) installs on top, so when both patch one target the inner replacement receives the outer one as
its ``original``; restoration runs in exact reverse order.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HitLog",
    "Workaround",
    "WorkaroundError",
    "active_disabled",
    "all_workarounds",
    "apply_fx_node_fixes",
    "apply_fx_program_fixes",
    "check_disabled_names",
    "installed_patches",
    "record_hit",
    "register_fx_node_fix",
    "register_fx_program_fix",
    "register_patch",
    "resolve_path",
    "unresolved_targets",
]


class WorkaroundError(RuntimeError):
    """A workaround cannot be installed (its target does not resolve, or it was named wrongly)."""


@dataclass(frozen=True)
class Workaround:
    """One registered workaround and its lifecycle metadata."""

    name: str
    kind: str  # "patch" | "fx_node_fix" | "fx_program_fix" | "onnx_translation" | "ir_fix" | "pytree_rule"
    backend: str
    func: Callable[..., Any] = field(repr=False, compare=False)
    targets: tuple[str, ...] = ()
    upstream: str | None = None
    dependency: str | None = None
    optional: bool = False
    counts_itself: bool = False  # a patch that calls record_hit only when it changes something
    # A speed-up: the artifact is the same without it, so an export passing without it says nothing about
    # whether it may go (bot.audit.verdict asks a human, with the benchmark to run, instead of proposing removal).
    speed: bool = False
    # Why the workaround fixes exportbot's own code rather than an upstream bug (None: it works around an upstream
    # one): such an item has no upstream issue to file or follow (bot.audit.drafts gives it the status "internal").
    internal: str | None = None

    @property
    def summary(self) -> str:
        """First line of the docstring: why the workaround exists."""
        doc = inspect.getdoc(self.func) or ""
        return doc.splitlines()[0] if doc else ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "backend": self.backend,
            "targets": list(self.targets),
            "upstream": self.upstream,
            "dependency": self.dependency,
            "optional": self.optional,
            "speed": self.speed,
            "internal": self.internal,
            "module": self.func.__module__,
            "summary": self.summary,
        }


# ── The registries: plain module-level containers filled by the decorators below ──
_PATCHES: dict[str, list[Workaround]] = {}
_FX_NODE_FIXES: dict[str, list[Workaround]] = {}
_FX_PROGRAM_FIXES: dict[str, list[Workaround]] = {}
# Workarounds registered by other modules (ONNX translations, IR fixes) announce themselves here so
# that listing, linting and `--without` see every workaround in one place.
_OTHER_WORKAROUNDS: list[Workaround] = []

_PATCH_LOCK = threading.RLock()


def _register(table: dict[str, list[Workaround]], workaround: Workaround) -> None:
    if any(w.name == workaround.name for w in all_workarounds()):
        raise WorkaroundError(f"workaround name {workaround.name!r} is registered twice")
    table.setdefault(workaround.backend, []).append(workaround)


def register_patch(
    backend: str,
    *paths: str,
    upstream: str | None = None,
    dependency: str | None = None,
    optional: bool = False,
    counts_itself: bool = False,
    speed: bool = False,
    internal: str | None = None,
) -> Callable[[Callable], Callable]:
    """Register ``factory(original) -> replacement`` for each dotted path in ``paths`` (``internal``: see
    :class:`Workaround`).

    Each call of the replacement counts as a hit, unless ``counts_itself``: a patch on a target every export
    calls (torch.onnx's output handler) records its own hits, only when it changed something, so that
    ``workarounds_fired`` keeps saying which exports needed it. ``speed``: the patch makes the same artifact
    faster, so the audit never reads "passes without it" as "no longer needed".
    """
    if not paths:
        raise WorkaroundError("register_patch needs at least one target path")

    def decorate(factory: Callable) -> Callable:
        _register(
            _PATCHES,
            Workaround(factory.__name__, "patch", backend, factory, tuple(paths), upstream, dependency, optional,
                       counts_itself, speed, internal),
        )
        return factory

    return decorate


def register_fx_node_fix(
    backend: str, *, upstream: str | None = None, dependency: str | None = None, internal: str | None = None
) -> Callable[[Callable], Callable]:
    """Register ``fix(graph_module, node) -> bool`` run on every node of the exported graph (``internal``: see
    :class:`Workaround`)."""

    def decorate(fix: Callable) -> Callable:
        _register(_FX_NODE_FIXES, Workaround(fix.__name__, "fx_node_fix", backend, fix, (), upstream, dependency,
                                             internal=internal))  # fmt: skip
        return fix

    return decorate


def register_fx_program_fix(
    backend: str, *, upstream: str | None = None, dependency: str | None = None
) -> Callable[[Callable], Callable]:
    """Register ``fix(exported_program) -> bool | None`` run once on the whole program."""

    def decorate(fix: Callable) -> Callable:
        _register(
            _FX_PROGRAM_FIXES, Workaround(fix.__name__, "fx_program_fix", backend, fix, (), upstream, dependency)
        )
        return fix

    return decorate


def announce_workaround(workaround: Workaround) -> None:
    """Make a workaround kept in another module's table (ONNX translation, IR fix) visible here."""
    if any(w.name == workaround.name for w in all_workarounds()):
        raise WorkaroundError(f"workaround name {workaround.name!r} is registered twice")
    _OTHER_WORKAROUNDS.append(workaround)


def all_workarounds() -> list[Workaround]:
    """Every registered workaround, in registration order within each kind."""
    found: list[Workaround] = []
    for table in (_PATCHES, _FX_NODE_FIXES, _FX_PROGRAM_FIXES):
        for entries in table.values():
            found.extend(entries)
    found.extend(_OTHER_WORKAROUNDS)
    return found


def check_disabled_names(disabled: frozenset[str] | set[str]) -> None:
    """Reject ``--without NAME`` for a name no workaround has: a typo must not pass as a probe."""
    known = {w.name for w in all_workarounds()}
    unknown = sorted(set(disabled) - known)
    if unknown:
        raise WorkaroundError(f"no workaround named {', '.join(map(repr, unknown))}")


# ── Hit tracking ──
@dataclass
class HitLog:
    """Which workarounds actually fired during one export (a patched callable ran, a fix rewrote).

    ``disabled`` holds the workarounds this export runs without, so hooks that apply fixes from deep inside
    a backend (the ONNX stage 2 hook) honour ``--without`` too.
    """

    counts: dict[str, int] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()

    def record(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    @property
    def names(self) -> list[str]:
        return sorted(self.counts)


_ACTIVE_HITS: list[HitLog] = []
_OBSERVERS: list[HitLog] = []  # see observing_hits


def record_hit(name: str) -> None:
    """Count one firing of workaround ``name`` in the export being tracked (if any), and in every observer."""
    if _ACTIVE_HITS:
        _ACTIVE_HITS[-1].record(name)
    for observer in _OBSERVERS:
        observer.record(name)


@contextlib.contextmanager
def tracking_hits(log: HitLog) -> Iterator[HitLog]:
    """Route hit records of every workaround to ``log`` while the block runs."""
    _ACTIVE_HITS.append(log)
    try:
        yield log
    finally:
        _ACTIVE_HITS.pop()


@contextlib.contextmanager
def observing_hits(log: HitLog) -> Iterator[HitLog]:
    """Also count every hit into ``log`` while the block runs, whichever export records it.

    Why besides :func:`tracking_hits`: an export that raises loses its own log with its result, and what
    fired before the failure is what the audit's supersession probes (bot.run.reruns) need to know.
    """
    _OBSERVERS.append(log)
    try:
        yield log
    finally:
        _OBSERVERS.remove(log)


# ── Path resolution ──
def resolve_path(path: str) -> tuple[Any, str, Any]:
    """Resolve ``"pkg.module.Class.attr"`` to ``(owner, attribute_name, current_value)``.

    Imports the longest importable module prefix, then walks attributes. Raises ``AttributeError`` or
    ``ImportError`` when the path does not exist in the installed packages.
    """
    parts = path.split(".")
    if len(parts) < 2:
        raise ImportError(f"{path!r} is not a dotted path")
    module = None
    index = len(parts) - 1
    while index > 0:
        try:
            module = importlib.import_module(".".join(parts[:index]))
            break
        except ImportError:
            index -= 1
    if module is None:
        raise ImportError(f"no importable module in {path!r}")
    owner: Any = module
    for part in parts[index:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1], getattr(owner, parts[-1])


def unresolved_targets() -> list[tuple[Workaround, str, str]]:
    """(workaround, path, error) for every non-optional patch target missing from the installed stack."""
    missing = []
    for workaround in all_workarounds():
        if workaround.kind != "patch" or workaround.optional:
            continue
        for path in workaround.targets:
            try:
                resolve_path(path)
            except (ImportError, AttributeError) as error:
                missing.append((workaround, path, str(error)))
    return missing


# ── Installing patches ──
def _counting(name: str, replacement: Any) -> Any:
    """Wrap a replacement callable so each call is recorded as a hit of workaround ``name``."""
    if isinstance(replacement, (staticmethod, classmethod)):
        return type(replacement)(_counting(name, replacement.__func__))
    if isinstance(replacement, property) or not callable(replacement):
        return replacement

    @functools.wraps(replacement)
    def counted(*args: Any, **kwargs: Any) -> Any:
        record_hit(name)
        return replacement(*args, **kwargs)

    return counted


@contextlib.contextmanager
def installed_patches(backend: str, disabled: frozenset[str] = frozenset()) -> Iterator[list[str]]:
    """Install every ``register_patch(backend, ...)`` workaround not in ``disabled``; restore on exit.

    Yields the names of the installed workarounds. Raises ``WorkaroundError`` before touching anything
    when a non-optional target does not resolve.
    """
    with _PATCH_LOCK:
        planned: list[tuple[Workaround, Any, str, Any, bool]] = []
        for workaround in _PATCHES.get(backend, []):
            if workaround.name in disabled:
                continue
            for path in workaround.targets:
                try:
                    owner, attribute, _ = resolve_path(path)
                except (ImportError, AttributeError) as error:
                    if workaround.optional:
                        continue
                    raise WorkaroundError(
                        f"workaround {workaround.name!r} ({backend}): target {path!r} does not resolve: {error}"
                    ) from error
                planned.append((workaround, owner, attribute, path, attribute in vars(owner)))
        swapped: list[tuple[Any, str, Any, bool]] = []
        try:
            for workaround, owner, attribute, _path, owned in planned:
                # Read the raw attribute from the owner so descriptors (staticmethod) survive the swap.
                raw = vars(owner)[attribute] if owned else None
                original = getattr(owner, attribute)
                replacement = workaround.func(original)
                if isinstance(raw, staticmethod) and not isinstance(replacement, staticmethod):
                    replacement = staticmethod(replacement)
                setattr(owner, attribute, replacement if workaround.counts_itself else _counting(workaround.name, replacement))
                swapped.append((owner, attribute, raw, owned))
            yield sorted({w.name for w, *_ in planned})
        finally:
            for owner, attribute, raw, owned in reversed(swapped):
                if owned:
                    setattr(owner, attribute, raw)
                else:
                    delattr(owner, attribute)


# ── Applying FX fixes ──
def active_disabled() -> frozenset[str]:
    """The workarounds the tracked export runs without (empty outside an export): for workarounds applied from
    inside a stage, such as the dynamo stage's pytree rules, rather than installed around it."""
    return _ACTIVE_HITS[-1].disabled if _ACTIVE_HITS else frozenset()


def apply_fx_node_fixes(graph_module: Any, backend: str) -> int:
    """Run the node fixes of ``backend`` over every node; the first fix that rewrites a node wins.

    Fixes disabled for the tracked export are skipped. Returns how many nodes were rewritten; dead code is
    eliminated and the module recompiled after.
    """
    disabled = active_disabled()
    fixes = [w for w in _FX_NODE_FIXES.get(backend, []) if w.name not in disabled]
    if not fixes:
        return 0
    rewritten = 0
    for node in list(graph_module.graph.nodes):
        for fix in fixes:
            if fix.func(graph_module, node):
                record_hit(fix.name)
                rewritten += 1
                break
    if rewritten:
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return rewritten


def apply_fx_program_fixes(program: Any, backend: str) -> None:
    """Run the whole-program fixes of ``backend`` in registration order (disabled ones skipped)."""
    disabled = active_disabled()
    for fix in _FX_PROGRAM_FIXES.get(backend, []):
        if fix.name not in disabled and fix.func(program):
            record_hit(fix.name)
