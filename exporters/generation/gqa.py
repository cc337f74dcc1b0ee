"""The ONNX in-place KV cache (``--cache in-place --backend onnx``): one ``step`` graph whose attention is ONNX
Runtime's ``com.microsoft.GroupQueryAttention`` with the cache shared between ``past_*`` and ``present_*``.

Why: ONNX Runtime shares one past/present buffer only inside ``GroupQueryAttention`` (GQA), when the caller binds
``past_key_*`` and ``present_key_*`` to the same OrtValue (onnxruntime-genai's builder does exactly this:
``past_present_share_buffer``); onnxscript's fusion rules do not produce GQA from our graphs (docs/generation.md).
So, as the ExecuTorch in-place cache does with ``llama::custom_sdpa`` (exporters.generation.inplace), the
attention itself is an op of ours: ``exportbot::group_query_attention`` (a torch custom op whose eager kernel
computes what GQA computes) used by an attention function registered in transformers' ``AttentionInterface`` and
named in the model's config only for the duration of the step; the model is not edited, its rotary stays its own
(GQA ``do_rotary=0``). The ONNX exporter translates the op into the GQA node (exporters/onnx/translations.py).

What GQA computes, in its shared-buffer form (onnxruntime docs/ContribOperators.md, com.microsoft
GroupQueryAttention; checked on ONNX Runtime 1.32 CPU for a 5-token prompt, 1-token steps and a 3-token chunk into
a 32-slot buffer): the step's ``S`` keys and values are written into ``past_*`` ``[batch, kv_heads,
max_cache_len, head_dim]`` at positions ``total - S .. total - 1`` (``total = seqlens_k + 1`` per row), and each
query attends causally over the first ``total`` slots, query head ``h`` reading key/value head ``h // (heads /
kv_heads)``. ``present_*`` are the whole buffers. Eagerly (and in torch.export) the op returns new tensors; in
ONNX Runtime the loop binds them to the inputs' own buffers (exporters.bundle.stepping.OrtInPlaceSession), so no
step copies the cache.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import StaticLayer

from exporters.generation.attention import named_attention, probe_cache

__all__ = ["ATTENTION", "GqaInPlaceStep", "group_query_attention"]

ATTENTION = "exportbot_onnx_group_query_attention"  # the name the attention function is registered under


@torch.library.custom_op("exportbot::group_query_attention", mutates_args=())
def group_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, past_key: torch.Tensor,
                          past_value: torch.Tensor, seqlens_k: torch.Tensor, total_sequence_length: torch.Tensor,
                          num_heads: int, kv_num_heads: int,
                          scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ONNX Runtime's GQA, shared-buffer form (module docstring): ``query [batch, S, heads * head_dim]``,
    ``key``/``value [batch, S, kv_heads * head_dim]``, caches ``[batch, kv_heads, max_cache_len, head_dim]``,
    ``seqlens_k`` int32 ``[batch]`` (total - 1 per row), ``total_sequence_length`` int32 scalar. Returns the
    attention ``[batch, S, heads * head_dim]`` and the caches with the step written in."""
    batch, steps, _ = query.shape
    head_dim = past_key.shape[-1]
    present_key, present_value = past_key.clone(), past_value.clone()
    outputs = []
    for row in range(batch):
        total = int(seqlens_k[row]) + 1
        start = total - steps
        present_key[row, :, start:total] = key[row].view(steps, kv_num_heads, head_dim).transpose(0, 1)
        present_value[row, :, start:total] = value[row].view(steps, kv_num_heads, head_dim).transpose(0, 1)
        groups = num_heads // kv_num_heads
        keys = present_key[row, :, :total].repeat_interleave(groups, dim=0)  # [heads, total, head_dim]
        values = present_value[row, :, :total].repeat_interleave(groups, dim=0)
        queries = query[row].view(steps, num_heads, head_dim).transpose(0, 1)  # [heads, S, head_dim]
        weights = queries @ keys.transpose(1, 2) * scale
        future = torch.arange(total)[None, :] > torch.arange(start, total)[:, None]  # [S, total]
        weights = weights.masked_fill(future, float("-inf")).softmax(dim=-1)
        outputs.append((weights @ values).transpose(0, 1).reshape(steps, num_heads * head_dim))
    return torch.stack(outputs), present_key, present_value


@group_query_attention.register_fake
def _(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, num_heads, kv_num_heads, scale):
    return torch.empty_like(query), torch.empty_like(past_key), torch.empty_like(past_value)


@dataclass
class _StepCache:
    """One step's cache tensors for the attention function: ``past[layer] = (key, value)`` in, ``present`` out."""

    past: list[tuple[torch.Tensor, torch.Tensor]]
    seqlens_k: torch.Tensor
    total: torch.Tensor
    present: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


_STEP: contextvars.ContextVar[_StepCache] = contextvars.ContextVar("exportbot_gqa_step")


class _NewStatesLayer(StaticLayer):
    """A ``StaticLayer`` whose ``update`` hands the attention function the step's own keys and values: the op
    writes them into the cache (a ``StaticLayer`` would write them itself, a second copy of the buffer)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return key_states, value_states


def gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention interface over ``exportbot::group_query_attention``: ``query [batch, heads, S,
    head_dim]`` and the step's ``key``/``value [batch, kv_heads, S, head_dim]`` (rotary applied by the model)
    in, ``[batch, S, heads, head_dim]`` out; the layer's present caches are kept for the step's outputs. The
    mask is not read: GQA is causal over ``total`` slots."""
    step = _STEP.get()
    batch, heads, length, head_dim = query.shape
    kv_heads = key.shape[1]
    past_key, past_value = step.past[module.layer_idx]
    scale = scaling if scaling is not None else head_dim**-0.5
    output, present_key, present_value = group_query_attention(
        query.transpose(1, 2).reshape(batch, length, heads * head_dim),
        key.transpose(1, 2).reshape(batch, length, kv_heads * head_dim),
        value.transpose(1, 2).reshape(batch, length, kv_heads * head_dim),
        past_key, past_value, step.seqlens_k, step.total, heads, kv_heads, float(scale))
    step.present[module.layer_idx] = (present_key, present_value)
    return output.view(batch, length, heads, head_dim), None


class GqaInPlaceStep(torch.nn.Module):
    """``forward(input_ids [1, n], cache_position [n], past_key_{i}, past_value_{i}) -> {"logits": [1, vocab],
    present_key_{i}, present_value_{i}}`` with every cache ``[1, kv_heads, max_cache_len, head_dim]``.

    The cache handed to the model is transformers' ``StaticCache`` whose layers only pass the step's states on
    (``_NewStatesLayer``); the attention, for the duration of the call, is ``gqa_attention`` (registered in
    transformers' ``AttentionInterface``). ``zero_cache()`` gives the cache's shapes, from a one-token probe
    (each ``StaticLayer`` allocates from the states it first sees)."""

    def __init__(self, model: torch.nn.Module, max_cache_len: int):
        super().__init__()
        from transformers import AttentionInterface

        AttentionInterface.register(ATTENTION, gqa_attention)
        self.model = model
        self.max_cache_len = max_cache_len
        probe = probe_cache(model, max_cache_len)
        self.shapes = [(tuple(layer.keys.shape), tuple(layer.values.shape)) for layer in probe.layers]
        self.dtype = probe.layers[0].keys.dtype

    def zero_cache(self) -> dict[str, torch.Tensor]:
        """The ``past_*`` inputs of a generation's first step: zeros (an unwritten slot is never attended)."""
        cache = {}
        for index, (key_shape, value_shape) in enumerate(self.shapes):
            cache[f"past_key_{index}"] = torch.zeros(key_shape, dtype=self.dtype)
            cache[f"past_value_{index}"] = torch.zeros(value_shape, dtype=self.dtype)
        return cache

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        from transformers import StaticCache

        input_ids, cache_position = inputs["input_ids"], inputs["cache_position"]
        past = [(inputs[f"past_key_{i}"], inputs[f"past_value_{i}"]) for i in range(len(self.shapes))]
        cache = StaticCache(config=self.model.config, max_cache_len=self.max_cache_len)
        cache.layers = [_NewStatesLayer(self.max_cache_len) for _ in past]
        for layer, (key, value) in zip(cache.layers, past):
            layer.lazy_initialization(key, value)
            layer.keys, layer.values = key, value
        last = cache_position[-1]
        step = _StepCache(past, seqlens_k=last.reshape(1).to(torch.int32), total=(last + 1).to(torch.int32))
        with named_attention(self.model, ATTENTION, _STEP, step):
            out = self.model(input_ids=input_ids, past_key_values=cache, position_ids=cache_position[None, :],
                             use_cache=True, logits_to_keep=1)
        present: dict[str, torch.Tensor] = {}
        for index in range(len(past)):
            present[f"present_key_{index}"], present[f"present_value_{index}"] = step.present[index]
        return {"logits": out.logits[:, -1, :], **present}


def gqa_step_inputs(step: GqaInPlaceStep, ids: torch.Tensor) -> dict[str, Any]:
    """A prompt's inputs from position 0 with a zero cache: each validation call a function of its inputs."""
    return {"input_ids": ids, "cache_position": torch.arange(ids.shape[1]), **step.zero_cache()}


def gqa_cache_tensors(step: GqaInPlaceStep) -> list[Mapping[str, Any]]:
    """The ``cache_tensors`` rows of the layout: each past input and the present output bound to its buffer."""
    rows = []
    for index, (key_shape, value_shape) in enumerate(step.shapes):
        for kind, shape in (("key", key_shape), ("value", value_shape)):
            rows.append({"input": f"past_{kind}_{index}", "output": f"present_{kind}_{index}", "layer": index,
                         "kind": kind, "shape": ["batch", "kv_heads", "max_cache_len", "head_dim"],
                         "size": list(shape)})
    return rows
