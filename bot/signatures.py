"""Error texts reduced to what identifies the bug: one normaliser shared by the sweep's triage, the drafts'
verification and the issue search (pure).

Why one: a failure is recognised three times (grouped in a sweep, matched against a draft's run, compared with
an upstream issue's text) and each must drop the same noise (addresses, paths, shape symbols, sizes, line
numbers, numbered node names, terminal colours), or the same bug would read as three different ones.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+~-]+){2,}/?")
_SYMBOL = re.compile(r"\b([su])\d+\b")  # torch's shape symbols: s0 (backed), u0 (unbacked)
_NUMBERED_NAME = re.compile(r"(?<=[A-Za-z])_\d+\b")  # FX node and module names: add_3, layer_0
_NUMBER = re.compile(r"(?<!\w)\d+(?:\.\d+)*(?:[eE][-+]?\d+)?(?!\w)")
_STEM = re.compile(r"^(.+?)(?:Model|For[A-Z]|LMHead|Encoder|Decoder|Backbone|PreTrained)")
SIGNATURE_CHARS = 200


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (torch.onnx colours its step banners)."""
    return _ANSI.sub("", text)


def model_stem(model: str) -> str:
    """The family part of a class name (``Bert`` of ``BertForMaskedLM``), which errors repeat in class names."""
    match = _STEM.match(model)
    return match.group(1) if match else model


def normalize_text(text: str, model: str | None = None) -> str:
    """Every line of ``text`` normalised as :func:`normalize_error` normalises its first one."""
    normalized = _HEX.sub("0x?", strip_ansi(text))
    normalized = _PATH.sub("<path>", normalized)
    if model:
        stem = model_stem(model)
        normalized = re.sub(rf"\b{re.escape(stem)}\w*", "<Model>", normalized)
        normalized = re.sub(rf"(?<![A-Za-z0-9]){re.escape(stem.lower())}(?![A-Za-z0-9])", "<model>", normalized)
    normalized = _SYMBOL.sub(r"\1?", normalized)
    normalized = _NUMBERED_NAME.sub("_N", normalized)
    return _NUMBER.sub("N", normalized)


def normalize_error(text: str, model: str | None = None) -> str:
    """A signature for an error message: the same bug in two models, or at two shapes, gives the same string.

    Addresses become ``0x?``, paths ``<path>``, shape symbols ``s?``/``u?``, numbers ``N`` (so
    ``[2, 8, 64]`` becomes ``[N, N, N]`` and line numbers disappear), numbered node names ``add_N``, and names
    built on the model's family (``BertSelfAttention``, ``modeling_bert``) ``<Model>``/``<model>``. Only the
    first non-blank line is kept, whitespace collapsed: it names the failure; the rest is context.
    """
    line = next((line for line in normalize_text(text, model).splitlines() if line.strip()), "")
    return " ".join(line.split())[:SIGNATURE_CHARS]
