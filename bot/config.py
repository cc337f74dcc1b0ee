"""The bot's settings: the ``[tool.exportbot]`` table of ``pyproject.toml``.

Why pyproject.toml and not flags: the scheduled job and a developer's ``exportbot pr`` must agree on
where the rolling PR lives (repository, branch, labels), or the two would open competing PRs. Reading is
strict: an unknown key or a value of the wrong type is a :class:`ConfigError` naming the key, because a
typo such as ``lables`` would otherwise silently fall back to a default and the bot would label PRs
differently than the maintainers asked for. A missing table gives the defaults.

Example::

    [tool.exportbot]
    repository = "acme/exportbot"          # owner/name of the repository the PR goes to
    base_branch = "main"
    branch = "exportbot/shrink"            # the one rolling PR's head branch
    labels = ["exportbot", "ledger-shrink"]
    reviewers = []
    runs = 2                               # re-runs per model and mode a removal needs (else: draft)
    timeout = 600                          # seconds per re-run export
    dashboard = false                      # keep one dashboard issue up to date
    dashboard_title = "exportbot ledger dashboard"
    registry = "registry"                  # the ledger directory, relative to the repository root
    min_release_age_days = 3               # exportbot watch: a release this young is not proposed yet
    bump_branch_prefix = "exportbot/bump-" # one rolling bump PR per package group: exportbot/bump-<group>
    bump_labels = ["exportbot", "dependency-bump"]

    [tool.exportbot.coupled]               # package = the packages it moves with (one bump group)
    executorch = ["torch"]                 # executorch is built for one torch release
    torchao = ["torch"]                    # torchao follows torch
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

CONFIG_FILE = "pyproject.toml"
DEFAULT_RUNS = 2  # re-runs of each export an audit makes (flaky passes show up)
DEFAULT_TIMEOUT = 600.0  # seconds one re-run export may take
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")
# What git allows in a branch name, minus the rarely used characters that make URLs and shells awkward.
_BRANCH = re.compile(r"(?!/)(?!.*(?:\.\.|//|@\{|/$|\.lock$|\.$))[A-Za-z0-9._/-]+")


class ConfigError(ValueError):
    """``[tool.exportbot]`` cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class BotConfig:
    """Where and how the bot proposes ledger removals; the defaults suit a repository on github.com."""

    repository: str | None = None
    base_branch: str = "main"
    branch: str = "exportbot/shrink"
    labels: tuple[str, ...] = ("exportbot", "ledger-shrink")
    reviewers: tuple[str, ...] = ()
    runs: int = DEFAULT_RUNS
    timeout: float = DEFAULT_TIMEOUT
    dashboard: bool = False
    dashboard_title: str = "exportbot ledger dashboard"
    registry: str = "registry"
    min_release_age_days: float = 3.0
    bump_branch_prefix: str = "exportbot/bump-"
    bump_labels: tuple[str, ...] = ("exportbot", "dependency-bump")
    coupled: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: {"executorch": ("torch",), "torchao": ("torch",)}
    )


def find_config(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` (default: the working directory) or a parent."""
    start = (start or Path.cwd()).resolve()
    return next((d / CONFIG_FILE for d in (start, *start.parents) if (d / CONFIG_FILE).is_file()), None)


def load_config(path: Path | None) -> BotConfig:
    """The settings in ``path``'s ``[tool.exportbot]``; defaults when ``path`` is None or has no table."""
    if path is None:
        return BotConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    table = data.get("tool", {}).get("exportbot", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.exportbot] must be a table")
    return parse_config(table, str(path))


def parse_config(table: Mapping[str, Any], source: str = CONFIG_FILE) -> BotConfig:
    """Check every key of a ``[tool.exportbot]`` table and build the config; first problem wins."""
    known = {f.name for f in fields(BotConfig)}
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{source}: [tool.exportbot] unknown key {key!r} (known: {', '.join(sorted(known))})"
            )
    values: dict[str, Any] = {}
    for key, value in table.items():
        problem = _CHECKS[key](value)
        if problem:
            raise ConfigError(f"{source}: [tool.exportbot] {key!r} {problem}, got {value!r}")
        if key == "coupled":
            value = {name: tuple(others) for name, others in value.items()}
        values[key] = tuple(value) if isinstance(value, list) else value
    return BotConfig(**values)


def _string(pattern: re.Pattern[str] | None = None, what: str = "a non-empty string") -> Any:
    def check(value: Any) -> str | None:
        ok = isinstance(value, str) and bool(value.strip()) and (pattern is None or pattern.fullmatch(value))
        return None if ok else f"must be {what}"

    return check


def _names(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return None
    return "must be an array of non-empty strings"


def _positive_int(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "must be an integer of at least 1"


def _positive_number(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return None if ok else "must be a positive number of seconds"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _non_negative_number(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return None if ok else "must be a number of days of at least 0"


def _coupling(value: Any) -> str | None:
    ok = isinstance(value, dict) and all(isinstance(k, str) and k and _names(v) is None for k, v in value.items())
    return None if ok else "must be a table: package = [packages it moves with]"


_CHECKS = {
    "repository": _string(_REPOSITORY, "'owner/name'"),
    "base_branch": _string(_BRANCH, "a branch name"),
    "branch": _string(_BRANCH, "a branch name"),
    "labels": _names,
    "reviewers": _names,
    "runs": _positive_int,
    "timeout": _positive_number,
    "dashboard": _boolean,
    "dashboard_title": _string(),
    "registry": _string(re.compile(r"(?!/)(?!.*\.\.)[^\\\s]+"), "a relative directory path"),
    "min_release_age_days": _non_negative_number,
    "bump_branch_prefix": _string(_BRANCH, "a branch name prefix"),
    "bump_labels": _names,
    "coupled": _coupling,
}
