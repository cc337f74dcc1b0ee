"""What both in-place steps (exporters.generation.inplace on ExecuTorch, exporters.generation.gqa on ONNX) do
around the model: size the cache from a one-token probe, and run the model with an attention function of ours
named in its config for that call only (so the model is not edited and its own ``generate()``, the reference of
every check, keeps its attention)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["named_attention", "probe_cache"]


def probe_cache(model: torch.nn.Module, max_cache_len: int) -> Any:
    """A ``StaticCache`` of ``max_cache_len`` after the model ran one token into it: each ``StaticLayer``
    allocates from the states it first sees, so its tensors carry the layer's heads, head size and dtype."""
    from transformers import StaticCache

    probe = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        model(input_ids=torch.zeros(1, 1, dtype=torch.long), past_key_values=probe, use_cache=True)
    return probe


@contextlib.contextmanager
def named_attention(model: torch.nn.Module, name: str, variable: contextvars.ContextVar[Any],
                    value: Any) -> Iterator[None]:
    """Within the block, the model's config names the attention function registered as ``name`` and
    ``variable`` holds ``value`` (what the function needs beyond the model's arguments); both restored after."""
    config = model.config
    own, config._attn_implementation = config._attn_implementation, name
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)
        config._attn_implementation = own
