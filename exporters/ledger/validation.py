"""Validation of one ``[[entry]]`` table: one check per key, and the ``[entry.repro]`` table's shape.

Split out of ``exporters.ledger``: the checks are pure functions of the parsed TOML values (plus the
registry directory for ``repro.script``), kept apart from reading files so each rule reads on its own.
Reading (``exporters.ledger.reading``) runs them and turns their messages into located problems.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from exporters.ledger.entries import BACKENDS, LIST_FILES, SCOPES, Repro, parse_github_url
from exporters.ledger.lines import _key_line

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_PACKAGE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_GITHUB_HOST = re.compile(r"https?://(?:www\.)?github\.com(?:/|$)", re.IGNORECASE)
_URL = re.compile(r"https?://[^\s/]+\.[^\s/]+(?:/\S*)?")


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
    if value == "quantize" and list_name == "ONNX_DISABLE_OPTIMIZE":
        return "'quantize' gates skips only: the optimizer runs before ONNX Runtime's quantizer either way"
    return None if value in SCOPES else f"must be one of {', '.join(SCOPES)}, got {value!r}"


def quantize_scope_problem(table: Mapping[str, Any]) -> str | None:
    """A ``quantize`` entry must name the scheme it gates (and re-runs with) in ``[entry.repro.export]``."""
    repro = table.get("repro")
    export = repro.get("export") if isinstance(repro, dict) else None
    if table.get("scope") == "quantize" and not (isinstance(export, dict) and "quantize" in export):
        return "a 'quantize' entry names its scheme in [entry.repro.export] quantize = \"SCHEME\""
    return None


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
_REPRO_KEYS = ("config", "inputs", "export", "seed", "script", "budget_s", "init")
_INPUT_KEYS = ("batch", "sequence", "image_size", "shapes", "values")
# [entry.repro.inputs.values.NAME]: how one input's values are drawn (exporters.ledger.repro).
_VALUE_KEYS = ("padding", "padded", "range", "dtype")
VALUE_DTYPES = ("float32", "float16", "bfloat16", "int64", "int32", "bool")
# [[entry.repro.init]]: a weight re-initialisation; each rule's own keys besides modules and parameter.
INIT_RULES: dict[str, tuple[str, ...]] = {
    "kaiming_normal": (), "kaiming_uniform": (), "normal": ("mean", "std"), "uniform": ("range",),
    "constant": ("value",),
}  # fmt: skip
# Export options a reproducer may set, per backend; each maps to a field of that exporter's config.
REPRO_EXPORT_OPTIONS: dict[str, dict[str, type]] = {
    "dynamo": {"dynamic": bool, "strict": bool},
    "onnx": {"dynamic": bool, "optimize": bool, "opset_version": int, "quantize": str},
    "executorch": {"dynamic": bool, "max_batch": int, "max_sequence": int, "et_backend": str, "quantize": str},
}
_REPRO_HEADER = re.compile(r"\s*\[\[?\s*entry\s*\.\s*repro\b")  # [entry.repro...] or [[entry.repro.init]]
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
        problems.append((("inputs", "shapes"), "'inputs.shapes' must be a table: input name = [dims]"))
        shapes = {}
    for name, shape in shapes.items():
        if not (isinstance(shape, list) and shape and all(map(_positive_int, shape))):
            problems.append(
                (("inputs", "shapes", name), f"'inputs.shapes.{name}' must be a non-empty array of positive integers, got {shape!r}")
            )
    values = inputs.get("values", {})
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        return [*problems, (("inputs", "values"), "'inputs.values' must hold one table per input ([entry.repro.inputs.values.NAME])")]
    for name, table in values.items():
        problems += _value_problems(name, table)
    return problems


def _pair(value: Any) -> bool:
    numbers = isinstance(value, list) and len(value) == 2 and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    return numbers and value[0] < value[1]


def _value_problems(name: str, table: Mapping[str, Any]) -> list[tuple[RePath, str]]:
    """One ``[entry.repro.inputs.values.NAME]`` table: a padded mask, a value range, the dtype of a new input."""
    where = ("inputs", "values", name)
    label = f"'inputs.values.{name}"
    problems: list[tuple[RePath, str]] = [
        ((*where, k), f"{label}.{k}': unknown key (allowed: {', '.join(_VALUE_KEYS)})") for k in table if k not in _VALUE_KEYS
    ]
    if "padding" in table and table["padding"] not in ("left", "right"):
        problems.append(((*where, "padding"), f"{label}.padding' must be 'left' or 'right', got {table['padding']!r}"))
    if "padded" in table and not _positive_int(table["padded"]):
        problems.append(((*where, "padded"), f"{label}.padded' must be a positive integer, got {table['padded']!r}"))
    if "padded" in table and "padding" not in table:
        problems.append(((*where, "padded"), f"{label}.padded' needs 'padding' (left or right)"))
    if "range" in table and not _pair(table["range"]):
        problems.append(((*where, "range"), f"{label}.range' must be [low, high] with low < high, got {table['range']!r}"))
    if "range" in table and "padding" in table:
        problems.append(((*where, "range"), f"{label}': a padded mask takes no 'range'"))
    if "dtype" in table and table["dtype"] not in VALUE_DTYPES:
        problems.append(((*where, "dtype"), f"{label}.dtype' must be one of {', '.join(VALUE_DTYPES)}, got {table['dtype']!r}"))
    return problems


def _init_problems(rules: Any) -> list[tuple[RePath, str]]:
    """``[[entry.repro.init]]``: each a table naming the modules it re-initialises and a known rule."""
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        return [(("init",), "'init' must be an array of tables ([[entry.repro.init]]: modules, rule, ...)")]
    problems: list[tuple[RePath, str]] = []
    for number, rule in enumerate(rules, start=1):
        where, label = ("init",), f"init #{number}"
        kind = rule.get("rule")
        if kind not in INIT_RULES:
            problems.append((where, f"{label}: 'rule' must be one of {', '.join(INIT_RULES)}, got {kind!r}"))
            continue
        allowed = ("modules", "rule", "parameter", *INIT_RULES[kind])
        problems += [(where, f"{label}: unknown key {k!r} for rule {kind!r} (allowed: {', '.join(allowed)})")
                     for k in rule if k not in allowed]  # fmt: skip
        modules = rule.get("modules")
        if not (isinstance(modules, list) and modules and all(isinstance(m, str) and m.isidentifier() for m in modules)):
            problems.append((where, f"{label}: 'modules' must be a non-empty array of module class names, got {modules!r}"))
        if "parameter" in rule and not (isinstance(rule["parameter"], str) and rule["parameter"].isidentifier()):
            problems.append((where, f"{label}: 'parameter' must be a parameter name, got {rule['parameter']!r}"))
        missing = [k for k in INIT_RULES[kind] if k not in rule and not (kind == "normal" and k == "mean")]
        if missing:
            problems.append((where, f"{label}: rule {kind!r} needs {', '.join(map(repr, missing))}"))
        for key in ("mean", "std", "value"):
            if key in rule and not (isinstance(rule[key], int | float) and not isinstance(rule[key], bool)):
                problems.append((where, f"{label}: {key!r} must be a number, got {rule[key]!r}"))
        if "std" in rule and isinstance(rule["std"], int | float) and rule["std"] <= 0:
            problems.append((where, f"{label}: 'std' must be positive, got {rule['std']!r}"))
        if "range" in rule and not _pair(rule["range"]):
            problems.append((where, f"{label}: 'range' must be [low, high] with low < high, got {rule['range']!r}"))
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
    problems += _quantize_problems(export, backend)
    dynamic = export.get("dynamic")
    if isinstance(dynamic, bool) and scope not in ("all", "quantize") and dynamic != (scope == "dynamic"):
        problems.append(
            (("export", "dynamic"), f"'export.dynamic' = {str(dynamic).lower()} lies outside the entry's scope {scope!r}")
        )
    return problems


def _quantize_problems(export: Mapping[str, Any], backend: str) -> list[tuple[RePath, str]]:
    """``export.quantize`` names a scheme of the backend."""
    from exporters.quantize.schemes import schemes_of

    scheme = export.get("quantize")
    if isinstance(scheme, str) and scheme not in schemes_of(backend):
        return [(("export", "quantize"), f"'export.quantize' = {scheme!r} is no {backend} scheme "
                                         f"(choose from {', '.join(schemes_of(backend)) or 'none'})")]
    return []


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
    budget = repro.get("budget_s")
    if "budget_s" in repro and not (isinstance(budget, int | float) and not isinstance(budget, bool) and budget > 0):
        problems.append((("budget_s",), f"'budget_s' must be a positive number of seconds, got {budget!r}"))
    if "init" in repro:
        problems += _init_problems(repro["init"])
    if "script" in repro:
        script = repro["script"]
        match = _SCRIPT.fullmatch(script) if isinstance(script, str) else None
        if match is None:
            problems.append((("script",), f"'script' must be a path 'registry/repro/NAME.py', got {script!r}"))
        elif not (registry_dir / "repro" / match.group(1)).is_file():
            problems.append((("script",), f"'script' {script!r}: no such file {registry_dir / 'repro' / match.group(1)}"))
        clash = [k for k in ("config", "inputs", "init") if k in repro]
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
        budget_s=float(repro["budget_s"]) if "budget_s" in repro else None,
        init=tuple(dict(rule) for rule in repro.get("init", ())),
    )


def _repro_line(lines: Sequence[str], start: int, end: int, where: RePath) -> int | None:
    """Line of a key inside ``[entry.repro]``: the deepest ``[entry.repro.a.b]`` header on its path, then
    the ``key =`` line under it; ``repro = {...}`` written inline points at its own line."""
    header_at, depth_found = None, 0
    for depth in range(len(where) + 1):
        dotted = r"\s*\.\s*".join(re.escape(part) for part in ("entry", "repro", *where[:depth]))
        header = re.compile(rf"\s*\[\[?\s*{dotted}\s*\]")
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
