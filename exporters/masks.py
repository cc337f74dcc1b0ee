"""Attention masks built by broadcasting instead of ``torch.vmap``, shared by the ONNX and ExecuTorch patches.

transformers' ``sdpa_mask`` builds a 4D mask from an index-based mask function in one of two ways: broadcasting
the four index ranges against each other (its default), or ``torch.vmap`` over them, which it switches to as
soon as a model adds an ``or_mask_function``/``and_mask_function`` (Gemma 3's image blocks, streaming speech
encoders' chunk masks). ``torch.export`` keeps vmap's ``_vmap_increment_nesting``/``_add_batch_dim`` calls in the
graph, and the decompositions that torch.onnx and ExecuTorch run afterwards cannot re-trace them. transformers
writes every mask function to be index-based so that the broadcasting path works (its ``_non_vmap_expansion_sdpa``
says so), which is what ``broadcast_expansion`` runs instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def broadcast_expansion(mask_function: Callable) -> Callable:
    """The drop-in for ``masking_utils._vmap_expansion_sdpa(mask_function)``: the same (batch, head, query, kv)
    boolean mask, from the mask function applied once to broadcastable index views."""
    from transformers import masking_utils

    def expand(batch: torch.Tensor, head: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> Any:
        mask = mask_function(*masking_utils._non_vmap_expansion_sdpa(batch, head, query, key))
        return mask.expand(batch.shape[0], head.shape[0], query.shape[0], key.shape[0])

    return expand
