"""The generation cache as flat tensors: every state of every layer kind, built as the model's ``generate()`` does.

Why: a hybrid model's cache is not one key/value pair per layer. transformers (``cache_utils.py``) gives each layer
of ``DynamicCache(config=...)`` the class its ``config.layer_types`` entry maps to: attention layers hold ``keys``
and ``values`` (``[batch, heads, past, head_dim]``); indexed (sparse-attention) layers add an indexer key cache
(``[batch, past, index_head_dim]``); linear-attention / Mamba layers hold conv and recurrent states of a fixed
size (no past dim), possibly several per layer; hybrid layers hold both; dummy layers (KV sharing, MLP-only
layers) hold nothing. A wrapper that rebuilt a plain ``DynamicCache`` of key/value pairs fed such a model a
cache without its linear-attention layers (``IndexError`` in ``get_conv_state``) or without indexer keys
(``Cannot call update_indexer on layer 0 which is a DynamicLayer``).

So the components build the cache with the model's own layer classes (``new_cache``), flatten every state tensor
of every layer into named inputs and outputs (``flatten``), and restore a decode step's cache from them
(``restore``). Names: ``{past,present}_{key,value,indexer_key}_{layer}`` for per-token states (they grow by one
along their past dim every decode step) and ``{past,present}_{conv,recurrent}_{layer}_{state}`` for a
linear-attention layer's fixed-size states (replaced every step). ``layout_tensors`` lists them all in
``export.json`` (``generation.cache_tensors``), so a runtime can feed a step's outputs back without a model.

One deliberate difference from ``generate()``'s cache: sliding-window layers (``DynamicSlidingWindowLayer``, and
the sliding half of ``LinearAttentionAndSlidingWindowAttentionLayer``) become full-length layers, and the model's
own sliding-window mask hides the keys outside the window (docs/generation.md, "Sliding-window models"): one
cache shape for every layer, and no Python-int ``cumulative_length`` baked into the graph.

A second one: a linear-attention layer's prefill conv update takes one path for any prompt length
(``_update_conv_state_any_length``). transformers pads the prompt's conv input to ``conv_kernel_size`` only when
it is shorter (``if full_conv_states.shape[-1] < self.conv_kernel_size``, cache_utils.py:1215); torch.export takes
the branch of the 8-token sample and guards ``sequence >= conv_kernel_size``, so a prefill exported with Lfm3's
7-wide conv accepted only prompts of 7 to 64 tokens (the second validation shape, 6 tokens, was refused:
``input 'input_ids' dim 1 (sequence) is 6, outside the exported range 7..64``), and every other hybrid's prompts
had to be at least its conv width (4) long. Left-padding by the whole kernel width for every length stores the
same conv state and, since every caller runs a causal conv over the returned states and keeps the last
``seq_len`` outputs (zero left context either way), computes the same outputs, with no branch.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CacheTensor", "cache_dynamic_shapes", "flatten", "layout_tensors", "new_cache", "restore", "zero_padded_slots"]


@dataclass(frozen=True)
class CacheTensor:
    """One state tensor of one cache layer: where it lives in the layer, its flat name, its dims."""

    layer: int
    kind: str  # key, value, indexer_key, indexer_position, conv, recurrent
    state: int | None  # a linear-attention layer's state index; None for per-token states
    batch_dim: int
    past_dim: int | None  # the dim that grows by one every decode step; None: a fixed-size state

    def name(self, prefix: str) -> str:
        suffix = f"{self.layer}" if self.state is None else f"{self.layer}_{self.state}"
        return f"{prefix}_{self.kind}_{suffix}"


# Per-token states of an attention layer: attribute, kind, batch dim, past dim.
_TOKEN_STATES = (
    ("keys", "key", 0, 2),
    ("values", "value", 0, 2),
    ("indexer_keys", "indexer_key", 0, 1),  # DynamicIndexedLayer: [batch, past, index_head_dim]
    ("indexer_position_ids", "indexer_position", 1, 2),  # DynamicIndexedLayer: [position_dims, batch, past]
)
_LINEAR_STATES = (("conv_states", "conv"), ("recurrent_states", "recurrent"))


def _layer_classes() -> tuple[type, ...]:
    """The layer classes this layout flattens completely (after ``new_cache``'s sliding-window substitution)."""
    from transformers.cache_utils import (
        DummyLayer,
        DynamicIndexedLayer,
        DynamicLayer,
        LinearAttentionAndFullAttentionLayer,
        LinearAttentionLayer,
    )

    return DynamicLayer, DynamicIndexedLayer, LinearAttentionLayer, LinearAttentionAndFullAttentionLayer, DummyLayer


def new_cache(model: torch.nn.Module) -> Any:
    """An empty ``DynamicCache`` with the layer classes ``generate()`` gives ``model`` (its text config's
    ``layer_types``), sliding-window layers made full-length (module docstring)."""
    from transformers import DynamicCache
    from transformers.cache_utils import (
        DynamicLayer,
        DynamicSlidingWindowLayer,
        LinearAttentionAndFullAttentionLayer,
        LinearAttentionAndSlidingWindowAttentionLayer,
    )

    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicSlidingWindowLayer:
            cache.layers[i] = DynamicLayer()
        elif type(layer) is LinearAttentionAndSlidingWindowAttentionLayer:
            cache.layers[i] = LinearAttentionAndFullAttentionLayer(number_of_states=layer.number_of_states)
        elif type(layer) not in _layer_classes():
            raise ValueError(f"{type(model).__name__}: cache layer {i} is a {type(layer).__name__}, whose states the "
                             "generation cache layout does not know (exporters/generation/cache.py)")
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            layer.update_conv_state = functools.partial(_update_conv_state_any_length, layer)
    return cache


def _update_conv_state_any_length(layer: Any, conv_states: torch.Tensor, state_idx: int = 0,
                                  conv_kernel_size: int | None = None, **kwargs: Any) -> torch.Tensor:
    """The layer's own ``update_conv_state``, with a prefill's input left-padded by the kernel width first.

    Why: its prefill pads only an input shorter than the kernel, a branch on the prompt length that torch.export
    turns into the guard ``sequence >= conv_kernel_size`` (module docstring). Padded by the whole width, the input
    is never shorter, the stored state (its last ``conv_kernel_size`` columns) is the same, and the returned
    states are the same columns behind more zeros, which the callers' causal conv reads as the zero left context
    it has anyway. Decode steps (``has_previous_state``) and ``record_past`` are the layer's own path unchanged.
    """
    update = type(layer).update_conv_state
    if layer.record_past or layer.has_previous_state[state_idx]:
        return update(layer, conv_states, state_idx, conv_kernel_size, **kwargs)
    if not layer.is_conv_states_initialized[state_idx]:  # as the layer would: sized by the kernel, not the padding
        layer.lazy_initialization(conv_states=conv_states, state_idx=state_idx, conv_kernel_size=conv_kernel_size)
    padded = torch.nn.functional.pad(conv_states, (layer.conv_kernel_size[state_idx], 0))
    return update(layer, padded, state_idx, conv_kernel_size, **kwargs)


def _tensors(cache: Any) -> list[tuple[CacheTensor, torch.Tensor]]:
    """Every state tensor the layers of ``cache`` hold, in layer order."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    found = []
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for attribute, kind in _LINEAR_STATES:
                for state, value in getattr(layer, attribute).items():
                    if value is not None:
                        found.append((CacheTensor(i, kind, state, 0, None), value))
        for attribute, kind, batch_dim, past_dim in _TOKEN_STATES:
            value = getattr(layer, attribute, None)
            if isinstance(value, torch.Tensor):
                found.append((CacheTensor(i, kind, None, batch_dim, past_dim), value))
    return found


def flatten(cache: Any, prefix: str, keep: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """``{prefix}_…`` name → tensor for every state of ``cache``.

    ``keep`` (a ``[batch, sequence]`` 0/1 mask) zeroes the per-token states of masked positions: a prefill's
    padded slots are masked in every later step, so their contents never matter, and zeroed the cache is the
    same in every runtime (a left-padded row's fully masked queries give NaN or uniform attention depending on
    the kernel). Integer states (positions) and fixed-size linear-attention states are left as they are.
    """
    flat = {}
    for spec, value in _tensors(cache):
        if keep is not None and spec.past_dim is not None and value.is_floating_point():
            value = zero_padded_slots(value, keep, spec.batch_dim, spec.past_dim)
        flat[spec.name(prefix)] = value
    return flat


def zero_padded_slots(state: torch.Tensor, attention_mask: torch.Tensor, batch_dim: int = 0,
                      past_dim: int = 2) -> torch.Tensor:
    """``state`` with the prompt's padded slots (along ``past_dim``) zeroed.

    A state longer than the mask holds positions the model prepends itself (CpmAnt's ``prompt_length`` learned
    prompt tokens, 32 for the tiny model: 40 slots for an 8-token prompt); those are never padding and are kept.
    """
    keep = attention_mask.to(state.dtype)
    extra = state.shape[past_dim] - keep.shape[1]
    if extra > 0:
        keep = torch.cat([keep.new_ones(keep.shape[0], extra), keep], dim=1)
    shape = [1] * state.dim()
    shape[batch_dim], shape[past_dim] = keep.shape
    return state * keep.reshape(shape)


def restore(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], prefix: str = "past") -> Any:
    """The cache a decode step continues from: ``new_cache(model)`` refilled from the flat ``{prefix}_…`` inputs.

    Attention states go in through the layers' own ``update`` / ``update_indexer`` (concatenated to an empty
    cache, as ``DynamicCache(ddp_cache_data)`` does). Linear-attention states are set as the layer's prefill
    left them: a copy of each (the layer updates them in place with ``copy_``, which must not write into the
    step's inputs), ``conv_kernel_size`` from the conv state's last dim, and ``has_previous_state`` set where a
    conv state exists, since ``update_conv_state`` is what sets it in eager.
    """
    cache = new_cache(model)
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    for i, layer in enumerate(cache.layers):
        key, value = inputs.get(f"{prefix}_key_{i}"), inputs.get(f"{prefix}_value_{i}")
        if key is not None and value is not None:
            layer.update(key, value)
        if f"{prefix}_indexer_key_{i}" in inputs:
            layer.update_indexer(inputs[f"{prefix}_indexer_key_{i}"])
        if f"{prefix}_indexer_position_{i}" in inputs:
            layer.indexer_position_ids = inputs[f"{prefix}_indexer_position_{i}"]
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            _restore_linear(layer, i, inputs, prefix)
    return cache


def _restore_linear(layer: Any, index: int, inputs: Mapping[str, torch.Tensor], prefix: str) -> None:
    for state in range(layer.number_of_states):
        conv = inputs.get(CacheTensor(index, "conv", state, 0, None).name(prefix))
        recurrent = inputs.get(CacheTensor(index, "recurrent", state, 0, None).name(prefix))
        for value in (conv, recurrent):
            if value is not None and layer.device is None:
                layer.dtype, layer.device = value.dtype, value.device
        if conv is not None:
            layer.conv_states[state] = conv.clone()
            layer.conv_kernel_size[state] = conv.shape[-1]
            layer.is_conv_states_initialized[state] = True
            layer.has_previous_state[state] = True
        if recurrent is not None:
            layer.recurrent_states[state] = recurrent.clone()
            layer.is_recurrent_states_initialized[state] = True


def _parse(flat: Mapping[str, torch.Tensor], prefix: str) -> list[CacheTensor]:
    """The ``CacheTensor`` of every ``{prefix}_…`` cache name in ``flat`` (the inverse of ``CacheTensor.name``)."""
    kinds = {kind: (batch_dim, past_dim) for _, kind, batch_dim, past_dim in _TOKEN_STATES}
    kinds |= {kind: (0, None) for _, kind in _LINEAR_STATES}
    found = []
    for name in flat:
        if not name.startswith(prefix + "_"):
            continue
        rest = name[len(prefix) + 1:]
        kind = max((k for k in kinds if rest.startswith(k + "_")), key=len, default=None)
        if kind is None:
            continue
        numbers = rest[len(kind) + 1:].split("_")
        if not all(n.isdigit() for n in numbers) or len(numbers) != (2 if kinds[kind][1] is None else 1):
            continue
        state = int(numbers[1]) if len(numbers) == 2 else None
        found.append(CacheTensor(int(numbers[0]), kind, state, *kinds[kind]))
    return found


def cache_dynamic_shapes(flat: Mapping[str, torch.Tensor], prefix: str, batch: Any, past: Any) -> dict[str, Any]:
    """torch.export dims of the cache inputs among ``flat``: the batch everywhere, ``past`` on per-token states."""
    return {spec.name(prefix): {spec.batch_dim: batch, **({spec.past_dim: past} if spec.past_dim is not None else {})}
            for spec in _parse(flat, prefix)}


def layout_tensors(flat: Mapping[str, torch.Tensor], prefix: str = "past") -> list[dict[str, Any]]:
    """``generation.cache_tensors`` of ``export.json``: every cache input of decode, its output, shape and role."""
    rows = []
    for spec in _parse(flat, prefix):
        shape: list[Any] = list(flat[spec.name(prefix)].shape)
        shape[spec.batch_dim] = "batch"
        if spec.past_dim is not None:
            shape[spec.past_dim] = "past"
        rows.append({
            "input": spec.name(prefix), "output": spec.name("present"), "layer": spec.layer, "kind": spec.kind,
            **({"state": spec.state} if spec.state is not None else {}), "shape": shape,
            "grows": f"concatenated along dim {spec.past_dim} by every decode step" if spec.past_dim is not None
            else "replaced by every decode step (fixed size)",
        })
    return rows
