"""Every command's ``--help`` ends with 2-4 real examples.

A command's examples are the ``Examples:`` block of its docstring, or, where it has none, the entry
in ``EXAMPLES`` below (kept here so command modules stay as their owners wrote them). ``attach_examples``
moves them into the command's epilog, so they print last, after the options. tests/test_export_cli.py
parses every example against the command it names, so they stay real.
"""

from __future__ import annotations

import re

import click

EXAMPLES: dict[str, list[str]] = {
    "lint": [
        "exportbot lint",
        "exportbot lint --registry registry --no-classes",
    ],
    "audit": [
        "exportbot audit --tracker registry/upstream-snapshot.json",
        "exportbot audit --entry led-global-attention-data-dependent --all --json -",
        "exportbot audit --workarounds --entry _fix_rsub_scalar --markdown audit.md",
    ],
    "sweep run": [
        "exportbot sweep run --backend onnx --static --match 'Bert*' --results bert.jsonl",
        "exportbot sweep run --backend executorch --dynamic --shard 1/4 --jobs 2",
        "exportbot sweep run --task text-generation --backend onnx --match 'Llama*' --results generation.jsonl",
    ],
    "sweep merge": [
        "exportbot sweep merge sweeps/all.jsonl sweeps/shard-1.jsonl sweeps/shard-2.jsonl",
        "exportbot sweep merge onnx-static-shard-3-of-8.jsonl onnx-static-shard-3-of-8.jsonl rerun-3.jsonl",
    ],
    "sweep triage": [
        "exportbot sweep triage sweeps/catalogue/onnx-static-shard-*-of-8.jsonl",
        "exportbot sweep triage sweeps/catalogue/*-dynamic-shard-*-of-8.jsonl --top 5",
    ],
    "sweep coverage": [
        "exportbot sweep coverage --out docs/coverage.md",
        "exportbot sweep coverage sweeps/catalogue/onnx-static-shard-*-of-8.jsonl --out onnx-static.md",
    ],
    "pr": [
        "exportbot pr --report audit.json",
        "exportbot pr --report audit.json --apply --repo me/exportbot",
    ],
    "pin-check": [
        "exportbot pin-check run --base-pins base-constraints.txt --out pin-check.json",
        "exportbot pin-check publish --result pin-check.json --pr 42 --head-sha 0123456789abcdef0123456789abcdef01234567 --dry-run",
    ],
    "workarounds": [
        "exportbot workarounds index --out docs/workaround-index.md",
        "exportbot workarounds remove _fix_rsub_scalar --dry-run",
    ],
    "workarounds index": [
        "exportbot workarounds index --out docs/workaround-index.md",
        "exportbot workarounds index sweeps/catalogue/onnx-*-shard-*-of-8.jsonl --out onnx-index.md",
    ],
    "upstream": [
        "exportbot upstream status",
        "exportbot upstream draft udop-combine-embeddings-python-indexing",
        "exportbot upstream verify --changed origin/main",
    ],
    "workarounds remove": [
        "exportbot workarounds remove _fix_rsub_scalar --dry-run",
        "exportbot workarounds remove _fix_rsub_scalar",
    ],
}

_BLOCK = re.compile(r"\n[ \t]*\x08?\n?[ \t]*Examples?:[ \t]*\n((?:[ \t]+exportbot [^\n]*(?:\n|$))+)")


def examples_of(command: click.Command, path: str) -> list[str]:
    """The command's examples: its docstring's ``Examples:`` block, then ``EXAMPLES``'s, at most four."""
    match = _BLOCK.search(command.help or "")
    own = [line.strip() for line in match[1].splitlines() if line.strip()] if match else []
    return list(dict.fromkeys([*own, *EXAMPLES.get(path, [])]))[:4]


def attach_examples(command: click.Command, path: str = "") -> None:
    """Move the examples of ``command`` and of every subcommand to their epilogs (printed last)."""
    examples = examples_of(command, path)
    if examples and command.help:
        command.help = _BLOCK.sub("\n", command.help).rstrip()
    if examples and not command.epilog:
        command.epilog = "\b\nExamples:\n" + "\n".join(f"  {example}" for example in examples)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            attach_examples(sub, f"{path} {name}".strip())
