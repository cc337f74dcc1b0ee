"""Command-line options shared by several ``exportbot`` commands, defined once so they read the same."""

from __future__ import annotations

from pathlib import Path

import click

registry_option = click.option(
    "--registry",
    "registry_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Ledger directory [default: $EXPORTBOT_REGISTRY, else registry/].",
)
pins_option = click.option(
    "--pins",
    "pin_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Pin file [default: constraints.txt next to the registry or above it].",
)
github_url_option = click.option(
    "--github-url",
    default=None,
    help="GitHub API base URL (GitHub Enterprise: https://HOST/api/v3) [default: https://api.github.com].",
)
token_env_option = click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help="Read the token from this environment variable [default: GITHUB_TOKEN, then GH_TOKEN]. "
    "The token is never printed, logged or written.",
)

venv_cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where isolated per-version environments are kept and reused [default: .exportbot-cache/venvs].",
)


def index_option(default: Path, help: str) -> click.Option:
    return click.option(
        "--index", "index_file", type=click.Path(dir_okay=False, path_type=Path), default=default,
        show_default=True, help=help,
    )


def probes_option(default: int, help: str) -> click.Option:
    return click.option("--probes", type=click.IntRange(1), default=default, show_default=True, help=help)

