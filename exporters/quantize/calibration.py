"""The batches a static scheme calibrates its activation ranges on: the sample inputs, a user's own, and random ones.

A static scheme fixes each activation's scale ahead of time from the ranges it saw, so an activation beyond
them is clipped at run time. The sample inputs alone are one batch; ``--calibration N`` adds N random batches
of the sample's shapes, drawn the way the sample was: float inputs with its mean and spread, token ids
uniformly within the range the sample's own ids span, masks as they are (a padded row stays padded).
From Python, ``QuantizeConfig(calibration_inputs=[...])`` adds a user's own batches (real text calibrates
better than random ids; docs/quantization.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def random_batch(sample: Mapping[str, Any], generator: torch.Generator) -> dict[str, Any]:
    """One batch like ``sample``: same names, shapes and dtypes; values drawn as the module docstring says."""
    batch: dict[str, Any] = {}
    for name, value in sample.items():
        if not isinstance(value, torch.Tensor) or "mask" in name or value.dtype == torch.bool or value.numel() == 0:
            batch[name] = value
        elif value.is_floating_point():
            mean, spread = value.double().mean(), value.double().std().clamp_min(1e-3) if value.numel() > 1 else 1.0
            batch[name] = (torch.randn(value.shape, generator=generator, dtype=torch.float64) * spread + mean).to(value.dtype)
        else:
            low, high = int(value.min()), int(value.max())
            batch[name] = torch.randint(low, high + 1, value.shape, generator=generator, dtype=value.dtype)
    return batch


def calibration_batches(sample: Mapping[str, Any], extra: int, own: tuple[Mapping[str, Any], ...] = (),
                        seed: int = 0) -> list[dict[str, Any]]:
    """The sample, the user's ``own`` batches, then ``extra`` random batches (seeded: the same on every run)."""
    generator = torch.Generator().manual_seed(seed)
    return [dict(sample), *(dict(batch) for batch in own), *(random_batch(sample, generator) for _ in range(extra))]
