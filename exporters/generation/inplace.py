"""The in-place KV cache (``cache = "in-place"``, ``exportbot export --cache in-place``): one ExecuTorch method
whose key/value cache lives in the program as mutable buffers, written in place at the step's positions.

Why: the flat-tensor components (exporters.generation.components) feed the whole cache into every decode step and
copy it out again, so a step's cost grows with the context and carries a full cache copy (issue 48: our ``.pte``
decoded at 0.05-0.28x ExecuTorch's own LLM path). Here the cache is transformers' own ``StaticCache`` with one
sequence-major layer per attention layer (``[batch, max_cache_len, kv_heads, head_dim]``), its tensors registered
as buffers of the wrapper, so torch.export sees a buffer mutation and ExecuTorch keeps each as a memory-planned
mutable buffer, neither input nor output. A step feeds only its tokens and their positions; the same method serves
the prompt (``sequence`` tokens at positions ``0 .. n-1``) and every decode step (one token at position ``n``), so
prefill and decode share the buffers without two methods.

The writes and the attention are ExecuTorch's LLM custom ops, as its own LLM export uses them
(``executorch.extension.llm.custom_ops``, installed with executorch 1.5.1): ``llama::update_cache`` writes the
step's keys and values into the buffer in place at the start position, and ``llama::custom_sdpa`` attends
causally from that position, reading ``start + n`` slots rather than all ``max_cache_len`` and needing no mask.
The model is not edited: the attention function is registered in transformers' ``AttentionInterface`` and the
model's config names it only for the duration of the wrapper's call. Measured on Llama 512 x 8 (batch 1, cache
1,088): a first version with ``index_copy_`` into ``StaticLayer``'s ``[batch, heads, max_cache_len, head_dim]``
and transformers' SDPA over every slot ran 12-17 ms a token against 2.5 ms with the custom ops
(benchmarks/results/decode-inplace-index-copy.json, decode-inplace.json; docs/generation.md).

What ExecuTorch guarantees about a mutable buffer's first value: nothing, unless the ``.pte`` holds it. Its
emitter serializes only the shape of a mutated buffer (its initial state "meaningless",
executorch/exir/emit/_emitter.py) unless a pass marks it ``et_init_buffer``; the runtime then starts from whatever
the planned arena holds. A cache slot past the current position must never poison a result (``0 x NaN`` is NaN
wherever a masked slot is multiplied by a zero weight), so the exporter keeps the zeros of every mutated buffer in
the ``.pte`` (exporters.executorch.program.backend_config), which the runtime copies in when the method is loaded;
slots written by an earlier ``generate()`` on the same loaded method are finite, and past the new position.

Supported: decoder-only models whose every cache layer is full attention (``StaticLayer``), batch 1, unpadded
prompts, the ExecuTorch backend. Everything else is refused by ``check_in_place`` in one line before any tracing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

import torch
from torch.export import Dim
from transformers.cache_utils import StaticLayer

from exporters.generation.attention import named_attention, probe_cache
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
# ExecuTorch: the cache as the program's mutable buffers (this module); ONNX Runtime: the cache as inputs and
# outputs of GroupQueryAttention that the loop binds to one buffer (exporters.generation.gqa).
IN_PLACE_BACKENDS = ("executorch", "onnx")


class InPlaceUnsupported(ValueError):
    """A model, backend or sample the in-place cache does not serve: one line naming what and why."""


def check_in_place(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], backend: str,
                   quantized: bool = False) -> None:
    """Refuse, before any tracing, what the in-place mode does not serve (module docstring); ``quantized``: the
    exporter quantizes (not validated with the custom ops: refused rather than shipped untested)."""
    from transformers import StaticCache

    if backend not in IN_PLACE_BACKENDS:
        raise InPlaceUnsupported(f"--cache in-place serves --backend executorch (mutable buffers) or onnx "
                                 f"(GroupQueryAttention's shared buffer); --backend is {backend} (use --cache dynamic)")
    if quantized:
        raise InPlaceUnsupported("--cache in-place is float only for now: --quantize with it is not validated "
                                 "(use --cache dynamic)")
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


# The start position of the step being run, for the attention function (transformers calls it with the model's
# arguments only): set by ``InPlaceStep.forward`` around the model call.
_STEP_START: contextvars.ContextVar[Any] = contextvars.ContextVar("exportbot_in_place_start")
ATTENTION = "exportbot_executorch_custom_sdpa"  # the name the attention function is registered under


def load_custom_ops() -> None:
    """ExecuTorch's LLM custom ops (``llama::update_cache``, ``llama::custom_sdpa``): their eager kernels for
    torch.export and validation, and their runtime kernels for the ExecuTorch runtime that runs the ``.pte``."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (registers the ops on import)


class SequenceMajorLayer(StaticLayer):
    """A ``StaticLayer`` whose keys and values are ``[batch, max_cache_len, kv_heads, head_dim]``, the layout of
    ExecuTorch's ``update_cache`` and ``custom_sdpa``; ``update`` writes the step's states in place at the step's
    start position and returns the whole buffers (the attention function reads only up to the position)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        start = _STEP_START.get()
        torch.ops.llama.update_cache(key_states.transpose(1, 2), self.keys, start)
        torch.ops.llama.update_cache(value_states.transpose(1, 2), self.values, start)
        return self.keys, self.values


def custom_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention interface over ExecuTorch's ``custom_sdpa``: causal from the step's start position
    over the sequence-major cache (grouped key/value heads included), so a decode step reads ``start + 1`` slots,
    not ``max_cache_len``, and needs no mask. Returns ``[batch, sequence, heads, head_dim]`` as transformers'
    attention functions do."""
    output = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, _STEP_START.get(), None, 0.0, True, scaling)
    return output, None


class InPlaceStep(torch.nn.Module):
    """``forward(input_ids [1, n], cache_position [n]) -> {"logits": [1, vocab]}``, the cache updated in place.

    The cache is transformers' ``StaticCache`` with its layers made sequence-major (``SequenceMajorLayer``), and
    the model's attention, for the duration of the call only, is ``custom_sdpa_attention`` (registered in
    transformers' ``AttentionInterface``; the model's own ``generate()`` is untouched). Head counts and sizes come
    from running the model once on one token (each ``StaticLayer`` allocates from the states it first sees); the
    buffers are then zeros of the same sizes, registered as non-persistent buffers of this module: what
    torch.export lifts as mutable buffers. ``cache_position[0]`` is the start position (an unbacked size in the
    trace, checked to keep the step inside the cache)."""

    def __init__(self, model: torch.nn.Module, max_cache_len: int):
        super().__init__()
        from transformers import AttentionInterface, StaticCache

        load_custom_ops()
        AttentionInterface.register(ATTENTION, custom_sdpa_attention)
        self.model = model
        self.max_cache_len = max_cache_len
        probe = probe_cache(model, max_cache_len)
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        self.cache.layers = [SequenceMajorLayer(max_cache_len) for _ in probe.layers]
        for index, (layer, shaped) in enumerate(zip(self.cache.layers, probe.layers)):
            layer.lazy_initialization(shaped.keys, shaped.values)
            batch, heads, length, _ = shaped.keys.shape
            layer.keys = torch.zeros(batch, length, heads, shaped.keys.shape[3], dtype=shaped.keys.dtype)
            layer.values = torch.zeros(batch, length, heads, shaped.values.shape[3], dtype=shaped.values.dtype)
            self.register_buffer(f"key_cache_{index}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{index}", layer.values, persistent=False)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> dict[str, torch.Tensor]:
        # The layers are handed this module's buffers on every call: torch.export swaps a module's buffers for
        # its traced stand-ins, never a plain object's attributes, and a tensor it does not find among the
        # buffers is lifted as a constant (whose mutation then goes nowhere).
        for index, layer in enumerate(self.cache.layers):
            layer.keys = getattr(self, f"key_cache_{index}")
            layer.values = getattr(self, f"value_cache_{index}")
        start = cache_position[0].item()
        torch._check_is_size(start)
        torch._check(start + input_ids.shape[1] <= self.max_cache_len)
        with named_attention(self.model, ATTENTION, _STEP_START, start):
            out = self.model(input_ids=input_ids, past_key_values=self.cache, position_ids=cache_position[None, :],
                             use_cache=True, logits_to_keep=1)
        return {"logits": out.logits[:, -1, :]}


def plan_in_place(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], longest: int,
                  backend: str = "executorch") -> list[Any]:
    """The one component of an in-place bundle: its samples are prompts from position 0 (the prompt, two tokens
    shorter, one token), so each validation call is a function of its inputs alone; decode positions are covered
    by the token-for-token check, which runs the loaded method as ``generate()`` does. On ONNX the step also
    takes the cache (``past_*``, zeros from position 0; static shapes) and returns it (``present_*``)."""
    from exporters.generation.gqa import GqaInPlaceStep, gqa_step_inputs

    ids = inputs["input_ids"]
    if ids.shape[1] < 4:
        raise InPlaceUnsupported("--cache in-place: sample prompts must be at least 4 tokens long (--sequence-length)")
    sequence = Dim("sequence", min=1, max=longest)
    spec: dict[str, Any] = {"input_ids": {1: sequence}, "cache_position": {0: sequence}}
    if backend == "onnx":
        step: torch.nn.Module = GqaInPlaceStep(model, longest).eval()

        def prompt(ids: torch.Tensor) -> dict[str, Any]:
            return gqa_step_inputs(step, ids)

        spec |= {name: None for name in step.zero_cache()}
    else:
        step = InPlaceStep(model, longest).eval()

        def prompt(ids: torch.Tensor) -> dict[str, Any]:
            return {"input_ids": ids, "cache_position": torch.arange(ids.shape[1])}

    return [ComponentPlan(STEP, step, prompt(ids), spec, prompt(ids[:, 2:]),
                          smaller_inputs=[("one-token prompt", prompt(ids[:, :1]))])]


def in_place_layout(model: torch.nn.Module, plans: list[Any], max_cache_len: int, backend: str) -> dict[str, Any]:
    """The ``generation`` section of an in-place bundle's ``export.json`` (docs/export-format.md): the same for
    both backends but for where the cache lives (ExecuTorch: mutable buffers of the program; ONNX: the step's
    ``past_*`` inputs and ``present_*`` outputs, which the loop binds to one buffer each, exporters.generation.gqa)."""
    step = plans[0].module
    if backend == "onnx":
        from exporters.generation.gqa import gqa_cache_tensors

        (key_shape, value_shape) = step.shapes[0]
        layer_types = ["StaticLayer"] * len(step.shapes)
        buffers = {
            "names": "past_key_{layer}, past_value_{layer}: [batch, kv_heads, max_cache_len, head_dim]",
            "key_shape": list(key_shape), "value_shape": list(value_shape),
            "where": "inputs past_* and outputs present_* of GroupQueryAttention, bound to the same buffer "
                     "(ONNX Runtime I/O binding): written in place at the step's positions",
        }
        cache_tensors = gqa_cache_tensors(step)
        step_inputs = ("input_ids [1, n], cache_position [n] and the bound past_*: the prompt at 0..n-1, then "
                       "one token a step")
    else:
        layers = step.cache.layers
        layer_types = [type(layer).__name__ for layer in layers]
        buffers = {
            "names": "key_cache_{layer}, value_cache_{layer}: [batch, max_cache_len, kv_heads, head_dim]",
            "key_shape": list(layers[0].keys.shape), "value_shape": list(layers[0].values.shape),
            "where": "mutable buffers of the program, updated in place: neither inputs nor outputs",
        }
        cache_tensors = []
        step_inputs = "input_ids [1, n] and cache_position [n]: the prompt at 0..n-1, then one token a step"
    return {
        "kind": "decoder-only",
        "cache": IN_PLACE,
        "components": [STEP],
        "layers": len(layer_types),
        "max_cache_len": max_cache_len,
        "batch": "static",
        "batch_size": 1,
        "cache_layers": layer_types,
        "cache_buffers": buffers,
        "cache_tensors": cache_tensors,
        "step_inputs": step_inputs,
        "logits": "logits: [batch, vocab], last position only",
        "position_ids": "cache_position",
        "eos_token_id": _eos(model),
        "pad_token_id": _pad(model),
        "backend": backend,
    }
