"""The workaround ledger: model classes exported differently, kept as reviewed TOML under ``registry/``.

Two lists live there. ``ONNX_DISABLE_OPTIMIZE`` (``onnx_disable_optimize.toml``) names model classes that
are exported with the onnxscript optimizer off, each tied to one upstream bug. ``EXPORT_SKIPS``
(``export_skips.toml``) names model classes that cannot export as they are, each saying which model-side
change is needed. Keeping them as data instead of Python dicts lets the bot delete an entry with a minimal
diff once the upstream fix ships, and lets a reviewer see why every entry exists.

Reading uses ``tomllib`` (strict, standard types) and finds line numbers by scanning the text, because
every problem must be reported as ``file:line: message``. Editing keeps every byte outside the edited span:
value edits inside one entry go through tomlkit; removing or inserting whole lines is done on the text
because tomlkit files comments placed above an ``[[entry]]`` header under the *previous* table, so its own
delete would take a neighbour's comment along. Every edit is re-parsed and compared with the intended data
before it is written.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import tomlkit
from packaging.requirements import InvalidRequirement, Requirement

__all__ = [
    "BACKENDS",
    "EXPORT_SKIPS",
    "LIST_FILES",
    "ONNX_DISABLE_OPTIMIZE",
    "SCOPES",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "LedgerProblem",
    "Repro",
    "UpstreamRef",
    "add_entry",
    "check_ledger",
    "default_ledger",
    "default_registry_dir",
    "load_ledger",
    "parse_github_url",
    "remove_entry",
    "remove_model",
    "set_fixed_in",
]

LIST_FILES: dict[str, str] = {
    "ONNX_DISABLE_OPTIMIZE": "onnx_disable_optimize.toml",
    "EXPORT_SKIPS": "export_skips.toml",
}
BACKENDS = ("onnx", "executorch", "dynamo")
SCOPES = ("all", "dynamic", "static", "generate")  # generate: only generation exports (docs/generation.md)
# Schema order: also the order in which add_entry writes keys.
_KEYS = (
    "id", "models", "backend", "scope", "upstream", "dependency", "reason", "model_change", "failure", "added",
    "fixed_in", "repro",
)  # fmt: skip
_OPTIONAL = {
    "ONNX_DISABLE_OPTIMIZE": frozenset({"fixed_in", "repro"}),
    "EXPORT_SKIPS": frozenset({"upstream", "fixed_in", "repro"}),
}
_ALLOWED = {
    "ONNX_DISABLE_OPTIMIZE": frozenset(_KEYS) - {"model_change"},
    "EXPORT_SKIPS": frozenset(_KEYS),
}

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_PACKAGE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_GITHUB_HOST = re.compile(r"https?://(?:www\.)?github\.com(?:/|$)", re.IGNORECASE)
_GITHUB_ITEM = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/(issues|pull)/(\d+)/?(?:#[\w-]+)?")
_URL = re.compile(r"https?://[^\s/]+\.[^\s/]+(?:/\S*)?")
_HEADER = re.compile(r"\s*\[\[\s*entry\s*\]\]\s*(?:#.*)?")
_DECODE_LINE = re.compile(r"at line (\d+)")

# Built from the default registry on first access by ``__getattr__`` below (annotated, never assigned here):
# class name → the entry disabling the optimizer, and class name → every skip entry naming the class.
ONNX_DISABLE_OPTIMIZE: dict[str, LedgerEntry]
EXPORT_SKIPS: dict[str, list[LedgerEntry]]


# ── Problems ──
@dataclass(frozen=True)
class LedgerProblem:
    """One thing wrong with a ledger file, located so an editor can jump to it."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class LedgerError(ValueError):
    """The ledger cannot be used: one ``file:line: message`` per problem, never a raw traceback."""

    def __init__(self, problems: Sequence[LedgerProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(map(str, self.problems)))


# ── Entries ──
class UpstreamRef(NamedTuple):
    """A GitHub issue or pull request, parsed so the bot can ask the API whether it is closed."""

    owner: str
    repo: str
    number: int
    kind: str  # "issue" | "pull"


def parse_github_url(url: str) -> UpstreamRef | None:
    """The issue/PR a GitHub URL points at, or None when it is no single issue or pull request."""
    match = _GITHUB_ITEM.fullmatch(url)
    if match is None:
        return None
    owner, repo, kind, number = match.groups()
    return UpstreamRef(owner, repo, int(number), "issue" if kind == "issues" else "pull")


@dataclass(frozen=True)
class Repro:
    """How to reproduce an entry's failure, when the class's default tiny model is not the failing case.

    Real upstream bugs often need a config field the tiny default leaves off, another input size or a
    backend option; without the reproducer a re-run exports a model that never failed and "passes".
    ``exporters.repro`` builds the model, inputs and export options from this; ``script`` (resolved to a
    file under the registry's ``repro/``) replaces ``config`` and ``inputs`` for cases that need code.
    """

    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    export: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed: int | None = None
    script: Path | None = None

    def modes(self, scope: str) -> list[bool]:
        """The ``dynamic`` flags to re-run: the scope's, narrowed by ``export.dynamic`` when given."""
        modes = {"all": [False, True], "static": [False], "dynamic": [True], "generate": [True]}[scope]
        return [self.export["dynamic"]] if "dynamic" in self.export else modes


@dataclass(frozen=True)
class LedgerEntry:
    """One ``[[entry]]`` table, validated, with where it lives so messages and edits can point at it."""

    id: str
    list_name: str  # "ONNX_DISABLE_OPTIMIZE" | "EXPORT_SKIPS"
    models: tuple[str, ...]
    backend: str
    scope: str
    dependency: str
    reason: str
    failure: str
    added: datetime.date
    path: Path
    line: int  # the ``[[entry]]`` header
    upstream: str | None = None
    upstream_ref: UpstreamRef | None = None
    model_change: str | None = None
    fixed_in: str | None = None
    repro: Repro | None = dataclasses.field(default=None, hash=False)
    key_lines: Mapping[str, int] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    model_lines: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def model_line(self, model_class: str) -> int:
        """The line naming ``model_class``, so a message about one class points at it, not the header."""
        return dict(zip(self.models, self.model_lines, strict=False)).get(model_class, self.line)

    def applies_to(self, model_class: str | type, backend: str, dynamic: bool, generate: bool = False) -> bool:
        """Whether this entry gates ``model_class`` exported by ``backend`` with/without dynamic shapes.

        A ``dynamo`` entry covers every backend: torch.export runs under each exporter, so a class that
        cannot pass it cannot reach ONNX or ExecuTorch either. A generation export (``generate``) has dynamic
        shapes, so ``all``, ``dynamic`` and ``generate`` entries gate it; ``generate`` entries gate nothing else.
        """
        name = model_class if isinstance(model_class, str) else model_class.__name__
        scopes = ("all", "dynamic", "generate") if generate else ("all", "dynamic" if dynamic else "static")
        return name in self.models and self.backend in (backend, "dynamo") and self.scope in scopes

    def modes(self) -> list[bool]:
        """The shape modes (``dynamic`` flags) a re-run of this entry exports in."""
        return (self.repro or Repro()).modes(self.scope)


@dataclass(frozen=True)
class Ledger:
    """Both lists, loaded together because ids are unique across them."""

    entries: tuple[LedgerEntry, ...]

    def by_id(self, entry_id: str) -> LedgerEntry:
        """The entry called ``entry_id``; ``KeyError`` when there is none."""
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        raise KeyError(entry_id)

    def gate(
        self, model_class: str | type, backend: str, dynamic: bool, list_name: str, generate: bool = False
    ) -> LedgerEntry | None:
        """The first entry of ``list_name`` that applies to this export, or None to export normally."""
        return next(
            (
                e
                for e in self.entries
                if e.list_name == list_name and e.applies_to(model_class, backend, dynamic, generate)
            ),
            None,
        )

    def disable_optimize(self, model_class: str | type, dynamic: bool) -> LedgerEntry | None:
        """The entry turning the onnxscript optimizer off for this class, if any."""
        return self.gate(model_class, "onnx", dynamic, "ONNX_DISABLE_OPTIMIZE")

    def skip(self, model_class: str | type, backend: str, dynamic: bool, generate: bool = False) -> LedgerEntry | None:
        """The entry saying this class cannot be exported this way (``generate``: for generation), if any."""
        return self.gate(model_class, backend, dynamic, "EXPORT_SKIPS", generate)

    def by_class(self, list_name: str) -> dict[str, list[LedgerEntry]]:
        """Class name → entries of ``list_name`` naming it, in file order."""
        found: dict[str, list[LedgerEntry]] = {}
        for entry in self.entries:
            if entry.list_name == list_name:
                for model in entry.models:
                    found.setdefault(model, []).append(entry)
        return found


# ── Validation: one check per key, each returning what is wrong or None ──
def _non_empty_string(value: Any, list_name: str) -> str | None:
    return None if isinstance(value, str) and value.strip() else "must be a non-empty string"


def _check_id(value: Any, list_name: str) -> str | None:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        return f"must be a kebab-case string (lowercase letters, digits, single hyphens), got {value!r}"
    return None


def _check_models(value: Any, list_name: str) -> str | None:
    if not isinstance(value, list) or not value or not all(isinstance(m, str) and m for m in value):
        return "must be a non-empty array of transformers class names"
    twice = sorted({m for m in value if value.count(m) > 1})
    return f"lists {', '.join(map(repr, twice))} more than once" if twice else None


def _check_backend(value: Any, list_name: str) -> str | None:
    if list_name == "ONNX_DISABLE_OPTIMIZE" and value != "onnx":
        return f"must be 'onnx' in {LIST_FILES[list_name]}, got {value!r}"
    return None if value in BACKENDS else f"must be one of {', '.join(BACKENDS)}, got {value!r}"


def _check_scope(value: Any, list_name: str) -> str | None:
    return None if value in SCOPES else f"must be one of {', '.join(SCOPES)}, got {value!r}"


def _check_upstream(value: Any, list_name: str) -> str | None:
    specific = "must be one specific GitHub issue or pull request (https://github.com/OWNER/REPO/issues/N or /pull/N)"
    if not isinstance(value, str):
        return specific
    if _GITHUB_HOST.match(value) or list_name == "ONNX_DISABLE_OPTIMIZE":
        return None if parse_github_url(value) else f"{specific}, got {value!r}"
    return None if _URL.fullmatch(value) else f"must be an http(s) URL of one issue, got {value!r}"


def _check_dependency(value: Any, list_name: str) -> str | None:
    if isinstance(value, str) and _PACKAGE.fullmatch(value):
        return None
    return f"must be the pip package expected to carry the fix (e.g. 'onnxscript'), got {value!r}"


def _check_failure(value: Any, list_name: str) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty regular expression string"
    try:
        re.compile(value)
    except re.error as error:
        return f"is not a valid regular expression: {error}"
    return None


def _check_added(value: Any, list_name: str) -> str | None:
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return None
    return f"must be a TOML date such as 2025-01-31, got {value!r}"


def _check_fixed_in(value: Any, list_name: str) -> str | None:
    if not isinstance(value, str):
        return f"must be a string such as 'onnxscript>=0.7.3', got {value!r}"
    try:
        requirement = Requirement(value)
    except InvalidRequirement as error:
        return f"is not a version specifier such as 'onnxscript>=0.7.3': {str(error).splitlines()[0]}"
    if not requirement.specifier or requirement.marker or requirement.url or requirement.extras:
        return f"must be a package and a version specifier only, such as 'onnxscript>=0.7.3', got {value!r}"
    return None


def _check_repro_table(value: Any, list_name: str) -> str | None:
    return None if isinstance(value, dict) else "must be a table ([entry.repro])"


# ── Validation of ``[entry.repro]``: (key path, message) pairs, so each message points at its line ──
_REPRO_KEYS = ("config", "inputs", "export", "seed", "script")
_INPUT_KEYS = ("batch", "sequence", "image_size", "shapes")
# Export options a reproducer may set, per backend; each maps to a field of that exporter's config.
REPRO_EXPORT_OPTIONS: dict[str, dict[str, type]] = {
    "dynamo": {"dynamic": bool, "strict": bool},
    "onnx": {"dynamic": bool, "optimize": bool, "opset_version": int},
    "executorch": {"dynamic": bool, "max_batch": int, "max_sequence": int, "et_backend": str},
}
_REPRO_HEADER = re.compile(r"\s*\[\s*entry\s*\.\s*repro\b")
_SCRIPT = re.compile(r"registry/repro/([A-Za-z0-9_-]+\.py)")
RePath = tuple[str, ...]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _config_problems(table: Mapping[str, Any], where: RePath) -> list[tuple[RePath, str]]:
    problems = []
    for key, value in table.items():
        if not key.isidentifier():
            problems.append(((*where, key), f"{'.'.join((*where, key))!r}: {key!r} is not a config field name"))
        elif isinstance(value, dict):
            problems += _config_problems(value, (*where, key))
    return problems


def _inputs_problems(inputs: Mapping[str, Any]) -> list[tuple[RePath, str]]:
    problems: list[tuple[RePath, str]] = [
        (("inputs", k), f"'inputs.{k}': unknown key (allowed: {', '.join(_INPUT_KEYS)})")
        for k in inputs
        if k not in _INPUT_KEYS
    ]
    for key in ("batch", "sequence"):
        if key in inputs and not _positive_int(inputs[key]):
            problems.append((("inputs", key), f"'inputs.{key}' must be a positive integer, got {inputs[key]!r}"))
    size = inputs.get("image_size")
    square = _positive_int(size)
    pair = isinstance(size, list) and len(size) == 2 and all(map(_positive_int, size))
    if "image_size" in inputs and not (square or pair):
        problems.append(
            (("inputs", "image_size"), f"'inputs.image_size' must be a positive integer or [height, width], got {size!r}")
        )
    shapes = inputs.get("shapes", {})
    if not isinstance(shapes, dict):
        return [*problems, (("inputs", "shapes"), "'inputs.shapes' must be a table: input name = [dims]")]
    for name, shape in shapes.items():
        if not (isinstance(shape, list) and shape and all(map(_positive_int, shape))):
            problems.append(
                (("inputs", "shapes", name), f"'inputs.shapes.{name}' must be a non-empty array of positive integers, got {shape!r}")
            )
    return problems


def _export_problems(export: Mapping[str, Any], backend: str, scope: str, list_name: str) -> list[tuple[RePath, str]]:
    allowed = REPRO_EXPORT_OPTIONS[backend]
    problems: list[tuple[RePath, str]] = []
    for key, value in export.items():
        where = ("export", key)
        if key not in allowed:
            problems.append((where, f"'export.{key}': not an option of the {backend} exporter (allowed: {', '.join(allowed)})"))
        elif not isinstance(value, allowed[key]) or (allowed[key] is int and isinstance(value, bool)):
            kind = {bool: "a boolean (true/false)", int: "an integer", str: "a string"}[allowed[key]]
            problems.append((where, f"'export.{key}' must be {kind}, got {value!r}"))
        elif allowed[key] is int and value < 1:
            problems.append((where, f"'export.{key}' must be positive, got {value!r}"))
    if list_name == "ONNX_DISABLE_OPTIMIZE" and "optimize" in export:
        problems.append(
            (("export", "optimize"), "'export.optimize' cannot be set here: the re-run turns the optimizer on, that is the workaround left out")
        )
    dynamic = export.get("dynamic")
    if isinstance(dynamic, bool) and scope != "all" and dynamic != (scope == "dynamic"):
        problems.append(
            (("export", "dynamic"), f"'export.dynamic' = {str(dynamic).lower()} lies outside the entry's scope {scope!r}")
        )
    return problems


def _repro_problems(repro: Mapping[str, Any], backend: str, scope: str, list_name: str, registry_dir: Path) -> list[tuple[RePath, str]]:
    """Everything wrong with one ``[entry.repro]`` table (its shape; fields are checked when it is built)."""
    problems: list[tuple[RePath, str]] = [
        ((k,), f"unknown key {k!r} (allowed: {', '.join(_REPRO_KEYS)})") for k in repro if k not in _REPRO_KEYS
    ]
    for key in ("config", "inputs", "export"):
        if key in repro and not isinstance(repro[key], dict):
            problems.append(((key,), f"{key!r} must be a table ([entry.repro.{key}])"))
    if isinstance(repro.get("config"), dict):
        problems += _config_problems(repro["config"], ("config",))
    if isinstance(repro.get("inputs"), dict):
        problems += _inputs_problems(repro["inputs"])
    if isinstance(repro.get("export"), dict):
        problems += _export_problems(repro["export"], backend, scope, list_name)
    if "seed" in repro and not (isinstance(repro["seed"], int) and not isinstance(repro["seed"], bool) and repro["seed"] >= 0):
        problems.append((("seed",), f"'seed' must be a non-negative integer, got {repro['seed']!r}"))
    if "script" in repro:
        script = repro["script"]
        match = _SCRIPT.fullmatch(script) if isinstance(script, str) else None
        if match is None:
            problems.append((("script",), f"'script' must be a path 'registry/repro/NAME.py', got {script!r}"))
        elif not (registry_dir / "repro" / match.group(1)).is_file():
            problems.append((("script",), f"'script' {script!r}: no such file {registry_dir / 'repro' / match.group(1)}"))
        clash = [k for k in ("config", "inputs") if k in repro]
        if clash:
            problems.append((("script",), f"'script' builds the model and inputs itself: drop {', '.join(map(repr, clash))}"))
    if not repro:
        problems.append(((), "an empty [entry.repro] table reproduces nothing: drop it or fill it in"))
    return problems


def _make_repro(repro: Mapping[str, Any], registry_dir: Path) -> Repro:
    script = repro.get("script")
    return Repro(
        config=dict(repro.get("config", {})),
        inputs=dict(repro.get("inputs", {})),
        export=dict(repro.get("export", {})),
        seed=repro.get("seed"),
        script=registry_dir / "repro" / script.removeprefix("registry/repro/") if script else None,
    )


def _repro_line(lines: Sequence[str], start: int, end: int, where: RePath) -> int | None:
    """Line of a key inside ``[entry.repro]``: the deepest ``[entry.repro.a.b]`` header on its path, then
    the ``key =`` line under it; ``repro = {...}`` written inline points at its own line."""
    header_at, depth_found = None, 0
    for depth in range(len(where) + 1):
        dotted = r"\s*\.\s*".join(re.escape(part) for part in ("entry", "repro", *where[:depth]))
        header = re.compile(rf"\s*\[\s*{dotted}\s*\]")
        found = next((i for i in range(start, end) if header.match(lines[i])), None)
        if found is not None:
            header_at, depth_found = found, depth
    if header_at is None:
        return _key_line(lines, start, end, "repro")
    if depth_found == len(where):
        return header_at + 1
    stop = next((i for i in range(header_at + 1, end) if lines[i].lstrip().startswith("[")), end)
    return _key_line(lines, header_at + 1, stop, where[depth_found]) or header_at + 1


_CHECKS: dict[str, Callable[[Any, str], str | None]] = {
    "id": _check_id,
    "models": _check_models,
    "backend": _check_backend,
    "scope": _check_scope,
    "upstream": _check_upstream,
    "dependency": _check_dependency,
    "reason": _non_empty_string,
    "model_change": _non_empty_string,
    "failure": _check_failure,
    "added": _check_added,
    "fixed_in": _check_fixed_in,
    "repro": _check_repro_table,
}


# ── Reading ──
def _key_line(lines: Sequence[str], start: int, end: int, key: str) -> int | None:
    """1-based line of ``key = ...`` (or a ``[key]`` header) within ``lines[start:end]``."""
    pattern = re.compile(rf"""\s*(?:\[{{1,2}}\s*)?(["']?){re.escape(key)}\1\s*[=.\]]""")
    return next((i + 1 for i in range(start, end) if pattern.match(lines[i])), None)


def _quoted_line(lines: Sequence[str], start: int, end: int, text: str) -> int | None:
    """1-based line of the first quoted occurrence of ``text`` within ``lines[start:end]``."""
    needles = (f'"{text}"', f"'{text}'")
    return next((i + 1 for i in range(start, end) if any(n in lines[i] for n in needles)), None)


def _header_indices(lines: Sequence[str]) -> list[int]:
    """0-based indices of the ``[[entry]]`` header lines."""
    return [i for i, line in enumerate(lines) if _HEADER.fullmatch(line)]


def _list_name_for(path: Path) -> str:
    for list_name, filename in LIST_FILES.items():
        if path.name == filename:
            return list_name
    raise LedgerError(
        [LedgerProblem(path, 1, f"not a ledger file (expected one of {', '.join(LIST_FILES.values())})")]
    )


def _decode_problem(path: Path, text: str, error: tomllib.TOMLDecodeError) -> LedgerProblem:
    match = _DECODE_LINE.search(str(error))
    line = int(match.group(1)) if match else max(1, len(text.splitlines()))
    message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)$", "", str(error))
    return LedgerProblem(path, line, f"invalid TOML: {message}")


def _build_entry(
    table: Any, list_name: str, path: Path, lines: Sequence[str], span: tuple[int, int], ordinal: int
) -> tuple[LedgerEntry | None, list[LedgerProblem]]:
    """Validate one ``[[entry]]`` table; the entry is None when anything is wrong with it."""
    start, end = span
    header = start + 1
    if not isinstance(table, dict):
        return None, [LedgerProblem(path, header, f"entry #{ordinal} must be a table")]
    label = repr(table["id"]) if isinstance(table.get("id"), str) else f"#{ordinal}"
    key_lines = {key: _key_line(lines, start, end, key) or header for key in table}
    if "repro" in table:  # its first [entry.repro...] header, when written as tables
        first = next((i for i in range(start, end) if _REPRO_HEADER.match(lines[i])), None)
        if first is not None:
            key_lines["repro"] = first + 1
    problems = [
        LedgerProblem(path, key_lines[key], f"entry {label}: unknown key {key!r}")
        for key in table
        if key not in _ALLOWED[list_name]
    ]
    problems += [
        LedgerProblem(path, header, f"entry {label}: missing required key {key!r}")
        for key in _KEYS
        if key in _ALLOWED[list_name] and key not in _OPTIONAL[list_name] and key not in table
    ]
    for key, value in table.items():
        problem = _CHECKS[key](value, list_name) if key in _ALLOWED[list_name] else None
        if problem:
            problems.append(LedgerProblem(path, key_lines[key], f"entry {label}: {key!r} {problem}"))
    repro = table.get("repro")
    if isinstance(repro, dict) and table.get("backend") in BACKENDS and table.get("scope") in SCOPES:
        problems += [
            LedgerProblem(
                path,
                _repro_line(lines, start, end, where) or key_lines["repro"],
                f"entry {label}: [entry.repro] {message}",
            )
            for where, message in _repro_problems(repro, table["backend"], table["scope"], list_name, path.parent)
        ]
    if problems:
        return None, problems
    models = tuple(table["models"])
    entry = LedgerEntry(
        id=table["id"],
        list_name=list_name,
        models=models,
        backend=table["backend"],
        scope=table["scope"],
        dependency=table["dependency"],
        reason=table["reason"],
        failure=table["failure"],
        added=table["added"],
        path=path,
        line=header,
        upstream=table.get("upstream"),
        upstream_ref=parse_github_url(table["upstream"]) if "upstream" in table else None,
        model_change=table.get("model_change"),
        fixed_in=table.get("fixed_in"),
        repro=_make_repro(repro, path.parent) if isinstance(repro, dict) else None,
        key_lines=key_lines,
        model_lines=tuple(_quoted_line(lines, start, end, m) or key_lines["models"] for m in models),
    )
    return entry, []


def _parse_text(text: str, path: Path, list_name: str) -> tuple[list[LedgerEntry], list[LedgerProblem]]:
    """Entries and problems of one ledger file's text (invalid entries are left out of the list)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return [], [_decode_problem(path, text, error)]
    lines = text.split("\n")
    problems = [
        LedgerProblem(
            path,
            _key_line(lines, 0, len(lines), key) or 1,
            f"unknown top-level key {key!r} (only [[entry]] tables belong here)",
        )
        for key in data
        if key != "entry"
    ]
    tables = data.get("entry", [])
    if not isinstance(tables, list):
        return [], [
            *problems,
            LedgerProblem(
                path,
                _key_line(lines, 0, len(lines), "entry") or 1,
                "'entry' must be an array of tables ([[entry]])",
            ),
        ]
    starts = _header_indices(lines)
    if len(starts) != len(tables):  # e.g. ``entry = [{...}]``: no header to point at
        starts = [0] * len(tables)
    spans = list(zip(starts, [*starts[1:], len(lines)], strict=False))  # each entry runs to the next header
    entries = []
    for ordinal, (table, span) in enumerate(zip(tables, spans, strict=True), start=1):
        entry, entry_problems = _build_entry(table, list_name, path, lines, span, ordinal)
        problems += entry_problems
        if entry is not None:
            entries.append(entry)
    return entries, problems


def _read_text(path: Path) -> str:
    """The file's exact text: bytes are decoded without newline translation so edits keep CRLF files intact."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise LedgerError([LedgerProblem(path, 1, f"not UTF-8: {error}")]) from error


def _scopes_overlap(a: str, b: str) -> bool:
    """``all`` overlaps everything; ``dynamic`` and ``static`` only overlap themselves."""
    return "all" in (a, b) or a == b


def _cross_problems(entries: Iterable[LedgerEntry]) -> list[LedgerProblem]:
    """Duplicate ids anywhere, and a class gated twice for the same backend and an overlapping scope."""
    problems = []
    seen: list[LedgerEntry] = []
    for entry in entries:
        for earlier in seen:
            where = f"{earlier.path}:{earlier.line}"
            if earlier.id == entry.id:
                problems.append(
                    LedgerProblem(
                        entry.path,
                        entry.key_lines.get("id", entry.line),
                        f"duplicate id {entry.id!r} (first defined at {where})",
                    )
                )
            elif (
                earlier.list_name == entry.list_name
                and earlier.backend == entry.backend
                and _scopes_overlap(earlier.scope, entry.scope)
            ):
                problems += [
                    LedgerProblem(
                        entry.path,
                        entry.model_line(model),
                        f"entry {entry.id!r}: {model!r} is already gated by entry {earlier.id!r} at {where} "
                        f"(backend {entry.backend!r}, scopes {earlier.scope!r} and {entry.scope!r} overlap)",
                    )
                    for model in entry.models
                    if model in earlier.models
                ]
        seen.append(entry)
    return problems


def check_ledger(directory: Path) -> tuple[list[LedgerEntry], list[LedgerProblem]]:
    """Every valid entry of both lists and every problem found, for callers that report all at once."""
    entries: list[LedgerEntry] = []
    problems: list[LedgerProblem] = []
    for list_name, filename in LIST_FILES.items():
        path = directory / filename
        if not path.is_file():
            problems.append(LedgerProblem(path, 1, "ledger file is missing"))
            continue
        try:
            found, file_problems = _parse_text(_read_text(path), path, list_name)
        except LedgerError as error:
            found, file_problems = [], list(error.problems)
        entries += found
        problems += file_problems
    return entries, problems + _cross_problems(entries)


def default_registry_dir() -> Path:
    """``$EXPORTBOT_REGISTRY`` when set, else ``registry/`` at the repository root."""
    configured = os.environ.get("EXPORTBOT_REGISTRY")
    return Path(configured) if configured else Path(__file__).resolve().parents[1] / "registry"


def load_ledger(directory: Path | None = None) -> Ledger:
    """Both lists of ``directory`` (default: ``default_registry_dir()``); ``LedgerError`` on any problem."""
    entries, problems = check_ledger(default_registry_dir() if directory is None else directory)
    if problems:
        raise LedgerError(problems)
    return Ledger(tuple(entries))


@functools.cache
def default_ledger() -> Ledger:
    """The ledger of the default directory, read once per process (exporters consult it on every export)."""
    return load_ledger()


def __getattr__(name: str) -> Any:
    """Build ``ONNX_DISABLE_OPTIMIZE`` / ``EXPORT_SKIPS`` on first use, so importing never reads files."""
    if name == "ONNX_DISABLE_OPTIMIZE":
        # One entry per class; a class listed for dynamic and static separately maps to the first one,
        # so callers that care about the mode use ``default_ledger().disable_optimize``.
        return {model: found[0] for model, found in default_ledger().by_class(name).items()}
    if name == "EXPORT_SKIPS":
        return default_ledger().by_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ── Editing (the bot's API) ──
def _split(text: str) -> tuple[list[str], str]:
    """Lines without their ``\\n`` and the final newline, so that joining them back is exact."""
    body, final = (text[:-1], "\n") if text.endswith("\n") else (text, "")
    return body.split("\n"), final


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _entry_starts(lines: Sequence[str]) -> list[int]:
    """Where each entry begins: its header, or the comment lines written directly above it."""
    starts = []
    for header in _header_indices(lines):
        start = header
        while start > 0 and _is_comment(lines[start - 1]):
            start -= 1
        starts.append(start)
    return starts


def _valid_data(path: Path, text: str) -> list[dict[str, Any]]:
    """The entries of a valid ledger file as plain data; the bot never edits a file that is already wrong."""
    entries, problems = _parse_text(text, path, _list_name_for(path))
    problems += _cross_problems(entries)
    if problems:
        raise LedgerError(problems)
    return tomllib.loads(text).get("entry", [])


def _locate(path: Path, entry_id: str) -> tuple[str, list[dict[str, Any]], int]:
    """The file's text, its entries as plain data, and the index of ``entry_id`` among them."""
    text = _read_text(path)
    data = _valid_data(path, text)
    if len(_header_indices(_split(text)[0])) != len(data):
        raise LedgerError(
            [LedgerProblem(path, 1, "entries must be written as [[entry]] tables to be edited")]
        )
    for index, table in enumerate(data):
        if table["id"] == entry_id:
            return text, data, index
    raise LedgerError([LedgerProblem(path, 1, f"no entry with id {entry_id!r}")])


def _commit(path: Path, text: str, expected: list[dict[str, Any]]) -> str:
    """Write ``text`` only if it is a valid ledger whose entries are exactly ``expected``."""
    if _valid_data(path, text) != expected:
        raise LedgerError(
            [LedgerProblem(path, 1, "edit would change more than the intended entry; file left as it was")]
        )
    path.write_bytes(text.encode("utf-8"))
    return text


def remove_entry(path: Path, entry_id: str) -> str:
    """Delete entry ``entry_id`` with the comment lines directly above it; every other byte stays."""
    text, data, index = _locate(path, entry_id)
    lines, final = _split(text)
    starts = _entry_starts(lines)
    start = starts[index]
    if index + 1 < len(starts):
        end = starts[index + 1]  # the blank lines separating it from the next entry go with it
    else:
        end = len(lines)
        while start > 0 and not lines[start - 1].strip():  # the last entry takes its separator along
            start -= 1
    kept = lines[:start] + lines[end:]
    new_text = "\n".join(kept) + final if kept else ""
    return _commit(path, new_text, data[:index] + data[index + 1 :])


def remove_model(path: Path, entry_id: str, model_class: str) -> str:
    """Drop ``model_class`` from an entry's ``models``; removing the last one removes the entry."""
    text, data, index = _locate(path, entry_id)
    if model_class not in data[index]["models"]:
        raise LedgerError([LedgerProblem(path, 1, f"entry {entry_id!r} does not list {model_class!r}")])
    if data[index]["models"] == [model_class]:
        return remove_entry(path, entry_id)
    document = tomlkit.parse(text)
    document["entry"][index]["models"].remove(model_class)
    data[index]["models"].remove(model_class)
    return _commit(path, document.as_string(), data)


def set_fixed_in(path: Path, entry_id: str, spec: str) -> str:
    """Record the release that fixes the entry's bug (``"onnxscript>=0.7.3"``), replacing any earlier one."""
    text, data, index = _locate(path, entry_id)
    had_fixed_in = "fixed_in" in data[index]
    data[index]["fixed_in"] = spec
    if had_fixed_in:
        document = tomlkit.parse(text)  # tomlkit replaces the value and keeps the line's comment
        document["entry"][index]["fixed_in"] = spec
        return _commit(path, document.as_string(), data)
    # A new key goes after the entry's last value, before any trailing comment or blank line, and before
    # its sub-tables (``[entry.repro]``): a key written below one of those would belong to it.
    lines, final = _split(text)
    headers = _header_indices(lines)
    end = ([*_entry_starts(lines), len(lines)])[index + 1]
    end = next((i for i in range(headers[index] + 1, end) if lines[i].lstrip().startswith("[")), end)
    last = max(i for i in range(headers[index], end) if lines[i].strip() and not _is_comment(lines[i]))
    lines.insert(last + 1, f"fixed_in = {tomlkit.string(spec).as_string()}")
    return _commit(path, "\n".join(lines) + final, data)


def _toml_value(key: str, value: Any) -> Any:
    """Regexes are written as literal strings when possible, so backslashes read as in Python."""
    if key == "failure" and isinstance(value, str) and "'" not in value and "\n" not in value:
        return tomlkit.string(value, literal=True)
    return value


def add_entry(path: Path, fields: Mapping[str, Any]) -> str:
    """Append a ``[[entry]]`` block (keys in schema order, a blank line before it) and return the text."""
    text = _read_text(path)
    data = _valid_data(path, text)
    table = tomlkit.table()
    for key in sorted(fields, key=lambda k: _KEYS.index(k) if k in _KEYS else len(_KEYS)):
        table[key] = _toml_value(key, fields[key])
    block = tomlkit.document()
    block["entry"] = tomlkit.aot()
    block["entry"].append(table)
    if text and not text.endswith("\n"):
        text += "\n"
    separator = "" if not text or text.endswith("\n\n") else "\n"
    expected = {key: list(value) if isinstance(value, tuple) else value for key, value in fields.items()}
    return _commit(path, text + separator + block.as_string(), [*data, expected])
