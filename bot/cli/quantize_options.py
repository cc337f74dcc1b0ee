"""``--quantize SCHEME`` and its settings, shared by ``exportbot export`` and ``exportbot sweep run``, and how a
quantized export's two verdicts are shown.

``quantize_options`` adds the options to a command and hands it one ``quantize`` argument: a
``QuantizeConfig``, or None for a float export (a setting without ``--quantize`` is refused, exit 2).
Which schemes a backend has and what they mean: docs/quantization.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bot.errors import SuggestingChoice, UsageProblem
from exporters.quantize.schemes import GROUP_SIZES, SCHEMES, QuantizeConfig

SCHEME_NAMES = sorted({name for _backend, name in SCHEMES})
_SETTINGS = {  # option parameter -> its default (a non-default value needs --quantize)
    "group_size": 32, "block_size": 32, "calibration": 4, "quantize_embeddings": False,
    "min_cosine": None, "min_top1": None, "min_equal_tokens": None,
}

_OPTIONS = [
    click.option("--quantize", type=SuggestingChoice(SCHEME_NAMES), default=None, metavar="SCHEME",
                 help="Quantize: executorch 8da4w, 8da8w or int8 (PT2E static, calibrated); onnx int8 (dynamic) "
                      "or int4 (MatMulNBits). Validated against the same quantization in PyTorch (fidelity) "
                      "and against float (quality): docs/quantization.md."),
    click.option("--group-size", type=click.Choice([str(s) for s in GROUP_SIZES]), default="32", show_default=True,
                 help="8da4w: input channels per weight scale (a layer the group does not divide: one per channel)."),
    click.option("--block-size", type=click.Choice([str(s) for s in GROUP_SIZES]), default="32", show_default=True,
                 help="onnx int4: input channels per MatMulNBits block."),
    click.option("--calibration", type=click.IntRange(0), default=4, show_default=True,
                 help="executorch int8: random batches calibrated on besides the sample inputs."),
    click.option("--quantize-embeddings", is_flag=True, help="onnx: quantize the token embedding table too."),
    click.option("--min-cosine", type=click.FloatRange(0, 1, min_open=True), default=None,
                 help="Quality floor: cosine similarity of each output with float [default: the scheme's]."),
    click.option("--min-top1", type=click.FloatRange(0, 1, min_open=True), default=None,
                 help="Quality floor: top-1 agreement of the logits with float [default: the scheme's]."),
    click.option("--min-equal-tokens", type=click.IntRange(0), default=None,
                 help="Generation quality floor: greedy steps equal to float's [default: the scheme's]."),
]


def quantize_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the ``--quantize`` options to ``command``, which receives them as ``quantize: QuantizeConfig | None``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        settings = {name: kwargs.pop(name) for name in ("quantize", *_SETTINGS)}
        return command(*args, quantize=quantize_config(**settings), **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def quantize_config(quantize: str | None, group_size: str | int, block_size: str | int, calibration: int,
                    quantize_embeddings: bool, min_cosine: float | None, min_top1: float | None,
                    min_equal_tokens: int | None) -> QuantizeConfig | None:
    """The ``QuantizeConfig`` the options ask for (None without ``--quantize``; a setting alone is refused)."""
    given = {"group_size": int(group_size), "block_size": int(block_size), "calibration": calibration,
             "quantize_embeddings": quantize_embeddings, "min_cosine": min_cosine, "min_top1": min_top1,
             "min_equal_tokens": min_equal_tokens}
    if quantize is None:
        stray = [name for name, value in given.items() if value != _SETTINGS[name]]
        if stray:
            raise UsageProblem(f"--{stray[0].replace('_', '-')} is a quantization setting: add --quantize SCHEME")
        return None
    return QuantizeConfig(quantize, group_size=given["group_size"], block_size=given["block_size"],
                          calibration=calibration, embeddings=quantize_embeddings, min_cosine=min_cosine,
                          min_top1=min_top1, min_equal_tokens=min_equal_tokens)


def print_quantization(console: Console, record: dict[str, Any]) -> None:
    """A quantized export's two verdicts: fidelity per output in steps of its 8-bit grid, and quality against float."""
    if not record:
        return
    fidelity = record.get("fidelity") or {}
    quality = record.get("quality") or {}
    kept = f"; {len(record['per_channel_fallback'])} per channel (group does not divide)" \
        if record.get("per_channel_fallback") else ""
    console.print(f"quantized: {record['scheme']}, {record['quantized']} layers{kept} ({record['method']})",
                  highlight=False, soft_wrap=True)
    if fidelity:
        table = Table(title="fidelity: against the same quantization in PyTorch", title_justify="left")
        for column in ("output", "max abs diff", "one step", "steps"):
            table.add_column(column, justify="left" if column == "output" else "right", overflow="fold")
        for name, row in fidelity.items():
            table.add_row(name, f"{row['max_abs_diff']:.3g}", f"{row['step']:.3g}", f"{row['steps']:.3f}")
        console.print(table)
    if quality:
        console.print(quality.get("summary", f"quality {quality.get('status')}"), highlight=False, soft_wrap=True)
