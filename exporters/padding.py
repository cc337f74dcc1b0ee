"""Padded attention masks: a sample's padding, and the same padding at another shape.

One padding rule read from one place by both sides: the tiny factory pads its samples' masks with it
(``exporters.tiny`` re-exports these functions), and the dynamo exporter resizes a sample's mask to the
shapes it validates at (``resized_mask``). It lives outside ``exporters.tiny`` so that no exporter
depends on the model factory.
"""

from __future__ import annotations

import torch


# All-ones masks hide every masking bug (a sign-flipped ``1 - mask`` gives the same zeros): sample masks pad
# every other row, as a batch of prompts of different lengths does. Decoder-only models are padded on the left
# (as for generation), every other model on the right. ``resized_mask`` keeps that pattern at another shape.
def padding_side(model: torch.nn.Module) -> str:
    """``left`` for decoder-only language models (a causal-LM class, or a model of a family that has one and
    no masked-LM head), ``right`` for encoders, encoder-decoders and everything else."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return "right"
    from transformers.models.auto import modeling_auto

    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    model_type = getattr(config, "model_type", None)
    if type(model).__name__ in causal.values() or (model_type in causal and model_type not in masked):
        return "left"
    return "right"


def padded_mask(batch: int, sequence: int, side: str, pads: int | None = None) -> torch.Tensor:
    """``(batch, sequence)`` mask of ones, with the odd rows padded by ``pads`` zeros (a quarter of the sequence
    by default, at least one) on ``side``; every row keeps at least one token."""
    mask = torch.ones(batch, sequence, dtype=torch.long)
    count = min(max(1, sequence // 4) if pads is None else pads, sequence - 1)
    if count > 0:
        columns = slice(0, count) if side == "left" else slice(sequence - count, sequence)
        mask[1::2, columns] = 0
    return mask


def _padding_of(row: torch.Tensor) -> tuple[str, int] | None:
    """(side, pads) of a 0/1 row that is ones with contiguous zeros at one end; None for any other row."""
    zeros = int((row == 0).sum())
    if zeros == 0:
        return "right", 0
    if zeros < row.numel() and bool((row[:zeros] == 0).all()):
        return "left", zeros
    if zeros < row.numel() and bool((row[-zeros:] == 0).all()):
        return "right", zeros
    return None


def resized_mask(original: torch.Tensor, shape: list[int]) -> torch.Tensor | None:
    """``original`` (a padded 2-d mask) at ``shape``: row ``i`` pads like original row ``i % batch``, on the same
    side, by as many zeros (fewer when the new row would have no token left). None when ``original`` is not a
    padded mask (3-d, values other than 0/1, holes), so the caller resamples it another way."""
    if original.dim() != 2 or len(shape) != 2 or original.is_floating_point() or original.numel() == 0:
        return None
    if not bool(((original == 0) | (original == 1)).all()):
        return None
    rows = [_padding_of(row) for row in original]
    if any(row is None for row in rows):
        return None
    batch, sequence = shape
    mask = torch.ones(batch, sequence, dtype=original.dtype)
    for index in range(batch):
        side, pads = rows[index % len(rows)]
        count = min(pads, sequence - 1)
        if count > 0:
            mask[index, slice(0, count) if side == "left" else slice(sequence - count, sequence)] = 0
    return mask
