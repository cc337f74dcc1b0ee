"""The in-place KV cache (``cache = "in-place"``, ``exportbot export --cache in-place``): one ExecuTorch method
whose key/value cache lives in the program as mutable buffers, written in place at the step's positions.

Why: the flat-tensor components (exporters.generation.components) feed the whole cache into every decode step and
copy it out again, so a step's cost grows with the context and carries a full cache copy (issue 48: our ``.pte``
decoded at 0.05-0.28x ExecuTorch's own LLM path). Here the cache is transformers' own ``StaticCache`` (one
``StaticLayer`` per attention layer, ``[batch, kv_heads, max_cache_len, head_dim]``), its tensors registered as
buffers of the wrapper, so torch.export sees ``index_copy_`` into a buffer (a buffer mutation) and ExecuTorch
keeps each as a memory-planned mutable buffer, neither input nor output. A step feeds only its tokens and their
positions; the same method serves the prompt (``sequence`` tokens at positions ``0 .. n-1``) and every decode
step (one token at position ``n``), so prefill and decode share the buffers without two methods.

What ExecuTorch guarantees about a mutable buffer's first value: nothing, unless the ``.pte`` holds it. Its
emitter serializes only the shape of a mutated buffer (its initial state "meaningless",
executorch/exir/emit/_emitter.py) unless a pass marks it ``et_init_buffer``; the runtime then starts from whatever
the planned arena holds. A cache slot past the current position is masked (attention weight exactly 0), but
``0 x NaN`` is NaN, so garbage there would poison every output. The exporter therefore keeps the zeros of every
mutated buffer in the ``.pte`` (exporters.executorch.program.backend_config), which the runtime copies in when the
method is loaded; slots written by an earlier ``generate()`` on the same loaded method are finite and masked.

Supported: decoder-only models whose every cache layer is full attention (``StaticLayer``), batch 1, unpadded
prompts, the ExecuTorch backend. Everything else is refused by ``check_in_place`` in one line before any tracing.
The position the cache is written at is the model's own counter (``StaticLayer.cumulative_length``), set from the
``cache_position`` input at the start of every step, so no state carries between calls except the cache itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.export import Dim

from exporters.generation.components import (
    DECODER_ONLY,
    IMAGE_INPUT,
    IN_PLACE,
    ComponentPlan,
    _eos,
    _pad,
    generation_kind,
)

__all__ = ["InPlaceStep", "InPlaceUnsupported", "check_in_place", "in_place_layout", "plan_in_place"]

STEP = "step"  # the component's name: one method for the prompt and every decode step


class InPlaceUnsupported(ValueError):
    """A model, backend or sample the in-place cache does not serve: one line naming what and why."""


def check_in_place(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], backend: str) -> None:
    """Refuse, before any tracing, what the in-place mode does not serve (module docstring)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer


    if backend != "executorch":
        raise InPlaceUnsupported(f"--cache in-place keeps the cache as ExecuTorch mutable buffers; --backend is "
                                 f"{backend} (use --cache dynamic)")
    if generation_kind(model) != DECODER_ONLY:
        raise InPlaceUnsupported(f"--cache in-place serves decoder-only models; {type(model).__name__} is "
                                 "encoder-decoder (use --cache dynamic)")
    if IMAGE_INPUT in inputs:
        raise InPlaceUnsupported("--cache in-place serves text prompts; this prefill takes pixel_values")
    ids = inputs["input_ids"]
    if ids.shape[0] != 1:
        raise InPlaceUnsupported(f"--cache in-place serves batch 1; the sample prompts have batch {ids.shape[0]} "
                                 "(--batch-size 1)")
    mask = inputs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise InPlaceUnsupported("--cache in-place serves unpadded prompts; the sample prompt is padded")
    layers = StaticCache(config=model.config, max_cache_len=8).layers
    other = sorted({type(layer).__name__ for layer in layers if type(layer) is not StaticLayer})
    if other:
        raise InPlaceUnsupported(f"--cache in-place keeps full-attention layers only; {type(model).__name__} has "
                                 f"{', '.join(other)} cache layers (use --cache dynamic)")


class InPlaceStep(torch.nn.Module):
    """``forward(input_ids [1, n], cache_position [n]) -> {"logits": [1, vocab]}``, the cache updated in place.

    The cache's tensors are made by running the model once on one token (each ``StaticLayer`` allocates its
    tensors from the key/value states it first sees, so head counts and head sizes are the model's own), then
    zeroed and registered as non-persistent buffers: what torch.export lifts as mutable buffers."""

    def __init__(self, model: torch.nn.Module, max_cache_len: int):
        super().__init__()
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 1, dtype=torch.long), past_key_values=self.cache, use_cache=True)
        for index, layer in enumerate(self.cache.layers):
            layer.keys.zero_()
            layer.values.zero_()
            layer.cumulative_length.zero_()
            self.register_buffer(f"key_cache_{index}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{index}", layer.values, persistent=False)
            self.register_buffer(f"cache_length_{index}", layer.cumulative_length, persistent=False)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> dict[str, torch.Tensor]:
        # The layers are handed this module's buffers on every call: torch.export swaps a module's buffers for
        # its traced stand-ins, never a plain object's attributes, and a tensor it does not find among the
        # buffers is lifted as a constant (whose mutation then goes nowhere).
        for index, layer in enumerate(self.cache.layers):
            layer.keys = getattr(self, f"key_cache_{index}")
            layer.values = getattr(self, f"value_cache_{index}")
            layer.cumulative_length = getattr(self, f"cache_length_{index}")
            layer.cumulative_length.copy_(cache_position[0])  # the write position, set by the caller
        out = self.model(input_ids=input_ids, past_key_values=self.cache, position_ids=cache_position[None, :],
                         use_cache=True, logits_to_keep=1)
        return {"logits": out.logits[:, -1, :]}


def plan_in_place(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], longest: int) -> list[Any]:
    """The one component of an in-place bundle: its samples are prompts from position 0 (the prompt, two tokens
    shorter, one token), so each validation call is a function of its inputs alone; decode positions are covered
    by the token-for-token check, which runs the loaded method as ``generate()`` does."""

    def prompt(ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"input_ids": ids, "cache_position": torch.arange(ids.shape[1])}

    ids = inputs["input_ids"]
    if ids.shape[1] < 4:
        raise InPlaceUnsupported("--cache in-place: sample prompts must be at least 4 tokens long (--sequence-length)")
    sequence = Dim("sequence", min=1, max=longest)
    spec = {"input_ids": {1: sequence}, "cache_position": {0: sequence}}
    step = InPlaceStep(model, longest).eval()
    return [ComponentPlan(STEP, step, prompt(ids), spec, prompt(ids[:, 2:]),
                          smaller_inputs=[("one-token prompt", prompt(ids[:, :1]))])]


def in_place_layout(model: torch.nn.Module, plans: list[Any], max_cache_len: int, backend: str) -> dict[str, Any]:
    """The ``generation`` section of an in-place bundle's ``export.json`` (docs/export-format.md)."""
    step = plans[0].module
    layers = step.cache.layers
    return {
        "kind": "decoder-only",
        "cache": IN_PLACE,
        "components": [STEP],
        "layers": len(layers),
        "max_cache_len": max_cache_len,
        "batch": "static",
        "batch_size": 1,
        "cache_layers": [type(layer).__name__ for layer in layers],
        "cache_buffers": {
            "names": "key_cache_{layer}, value_cache_{layer} (and cache_length_{layer}, the write position)",
            "key_shape": list(layers[0].keys.shape), "value_shape": list(layers[0].values.shape),
            "where": "mutable buffers of the program, updated in place: neither inputs nor outputs",
        },
        "cache_tensors": [],
        "step_inputs": "input_ids [1, n] and cache_position [n]: the prompt at 0..n-1, then one token a step",
        "logits": "logits: [batch, vocab], last position only",
        "position_ids": "cache_position",
        "eos_token_id": _eos(model),
        "pad_token_id": _pad(model),
        "backend": backend,
    }
