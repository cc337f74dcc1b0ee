"""Export a generative model as the components a generation loop runs: ``prefill`` and ``decode``.

Why components and flat tensors: a forward-only export takes a ``Cache`` object it cannot get back from its
own outputs, so nothing can be generated from it. Each component here is a small wrapper module whose inputs
and outputs are plain named tensors (``past_key_0`` in, ``present_key_0`` out), so every runtime (ONNX Runtime,
the ExecuTorch runtime, a ``.pt2`` program) can feed one step's cache into the next without knowing anything
about transformers' cache classes. The wrapper builds a fresh ``DynamicCache`` from its inputs on every call
(with the model's own layer classes, so linear-attention and indexed layers keep their states:
``exporters.generation.cache``), so eager runs of a component are pure functions of their inputs: validation
never sees eager's in-place cache updates (the ``nondeterministic`` verdict a plain decode-step export got).

Components:

* decoder-only (Llama, Qwen, Mistral, Gemma, Phi-3, GPT-2, OPT, MoE): ``prefill`` (prompt, no past → logits
  of the last position and the cache) and ``decode`` (one token and the cache → logits and the grown cache).
  Position ids are computed inside the graph from the 2-D attention mask (``cumsum - 1``, as ``generate()``
  does), so left-padded batches of different prompt lengths need nothing but the mask.
* encoder-decoder (T5, BART, Whisper): ``prefill`` runs the encoder and the first decoder step (the
  decoder's start tokens) and returns the encoder states, the self-attention cache and the cross-attention
  cache; ``decode`` takes one token, the self-attention cache (grown every step) and the cross-attention
  cache (computed once, passed back unchanged, never recomputed).

Cache layout (recorded in ``export.json`` under ``generation``): a *dynamic* cache whose past length is a
dynamic dim, ``[batch, kv_heads, past, head_dim]`` per attention layer (other layer kinds:
``exporters.generation.cache``), with a bound ``max_cache_len`` on prompt plus
new tokens. ONNX and ``.pt2`` keep the batch dynamic; ExecuTorch keeps the batch static (the export's batch)
and bounds every sequence dim by ``max_cache_len``, because its memory planner needs upper bounds (unbounded
dims run only at the example shape) and one dynamic dim per tensor keeps XNNPACK's reshapes delegated.
docs/generation.md explains the choice against a static ``max_cache_len`` cache.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.export import Dim

from exporters.generation.cache import (
    cache_dynamic_shapes,
    flatten,
    layout_tensors,
    new_cache,
    restore,
    zero_padded_slots,  # noqa: F401  (public here since the CpmAnt fix; lives beside flatten, which uses it)
)
from exporters.generation.support import returned_cache

__all__ = [
    "CACHE_MODES",
    "DEFAULT_MAX_CACHE_LEN",
    "IN_PLACE",
    "ComponentPlan",
    "GenerationExportConfig",
    "cache_layout",
    "default_max_cache_len",
    "generation_kind",
    "plan_components",
]

DECODER_ONLY = "decoder-only"
ENCODER_DECODER = "encoder-decoder"
# How a bundle holds its KV cache: flat tensors fed in and returned by every step, or (ExecuTorch) mutable buffers
# of one method updated in place (exporters.generation.inplace).
DYNAMIC_CACHE, IN_PLACE = "dynamic", "in-place"
CACHE_MODES = (DYNAMIC_CACHE, IN_PLACE)
IMAGE_INPUT = "pixel_values"  # a vision-language model's prefill input (vision encoder + projector inside)


# The cache a bundle holds when nothing else is asked for: the model's own context, capped here, since ExecuTorch
# plans memory for the whole bound (docs/generation.md, "Cache").
DEFAULT_MAX_CACHE_LEN = 2048
# Config fields that name a decoder's context (the longest sequence its positions cover), in the order tried.
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_target_positions", "n_ctx", "max_sequence_length",
                  "seq_length")


@dataclass
class GenerationExportConfig:
    """Sizes a generation export is built for.

    ``max_cache_len`` bounds prompt plus generated tokens (ExecuTorch plans memory for it and rejects longer
    sequences; ONNX and ``.pt2`` record it as the export's tested limit); None (the default): the model's
    context, at most ``DEFAULT_MAX_CACHE_LEN`` (``default_max_cache_len``). ``max_batch`` bounds a dynamic
    batch. ``static_batch`` fixes the batch to the sample inputs' (default: only for ExecuTorch). ``cache``:
    ``dynamic`` (the cache as flat tensors in and out of every step) or ``in-place`` (ExecuTorch: the cache as
    mutable buffers of one method, exporters.generation.inplace).
    """

    max_cache_len: int | None = None
    max_batch: int = 8
    static_batch: bool | None = None
    cache: str = DYNAMIC_CACHE

    def __post_init__(self) -> None:
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {', '.join(CACHE_MODES)}, got {self.cache!r}")
        if self.max_cache_len is not None and self.max_cache_len < 4:
            raise ValueError(f"max_cache_len must be at least 4, got {self.max_cache_len}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}")

    def cache_len(self, model: torch.nn.Module) -> int:
        """``max_cache_len``, or the default for ``model``."""
        return self.max_cache_len if self.max_cache_len is not None else default_max_cache_len(model.config)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_context(config: Any) -> int | None:
    """The longest sequence the decoder's positions cover (``max_position_embeddings`` and its other names), or
    None when its config names none (relative positions: T5)."""
    text = config.get_text_config(decoder=True)
    for name in CONTEXT_FIELDS:
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def default_max_cache_len(config: Any) -> int:
    """The cache length a bundle of this model holds by default: its context, at most ``DEFAULT_MAX_CACHE_LEN``."""
    context = model_context(config)
    return min(context, DEFAULT_MAX_CACHE_LEN) if context is not None else DEFAULT_MAX_CACHE_LEN


def generation_kind(model: torch.nn.Module) -> str:
    """``decoder-only`` or ``encoder-decoder``; anything without a language-model head is refused."""
    config = model.config
    if not hasattr(model, "generate") or not callable(getattr(model, "can_generate", None)) or not model.can_generate():
        raise ValueError(f"{type(model).__name__} has no generation head (can_generate() is False)")
    return ENCODER_DECODER if getattr(config, "is_encoder_decoder", False) else DECODER_ONLY


def _layers(model: torch.nn.Module) -> int:
    text = model.config.get_text_config(decoder=True)
    for name in ("num_hidden_layers", "decoder_layers", "num_decoder_layers", "n_layer", "num_layers"):
        value = getattr(text, name, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"{type(model).__name__}: cannot tell the number of decoder layers from its config")


def _accepts(model: torch.nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _positions(attention_mask: torch.Tensor, query_length: int) -> torch.Tensor:
    """Position ids of the last ``query_length`` tokens, as ``generate()`` derives them from a padded mask."""
    positions = attention_mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(attention_mask == 0, 0)
    return positions[:, -query_length:]


def _pairs(tensors: Mapping[str, torch.Tensor], prefix: str, layers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(tensors[f"{prefix}_key_{i}"], tensors[f"{prefix}_value_{i}"]) for i in range(layers)]


# ── Components: wrapper modules with flat tensor inputs and outputs ──
class DecoderOnlyStep(torch.nn.Module):
    """One forward of a decoder-only model: ``prefill`` (no past inputs) or ``decode`` (past in, present out).

    Returns only the last position's logits (``logits_to_keep=1`` where the model takes it): a generation
    loop needs nothing else, and prefill then never materialises ``[batch, prompt, vocab]``.
    """

    def __init__(self, model: torch.nn.Module, with_past: bool):
        super().__init__()
        self.model = model
        self.with_past = with_past
        self.position_ids = _accepts(model, "position_ids")
        self.logits_to_keep = _accepts(model, "logits_to_keep")

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        cache = restore(self.model, inputs) if self.with_past else new_cache(self.model)
        kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask,
                                  "past_key_values": cache, "use_cache": True}
        if self.position_ids:
            kwargs["position_ids"] = _positions(attention_mask, input_ids.shape[1])
        if self.logits_to_keep:
            kwargs["logits_to_keep"] = 1
        if IMAGE_INPUT in inputs:  # a vision-language prefill: the model merges image features into its embeds
            kwargs[IMAGE_INPUT] = inputs[IMAGE_INPUT]
        out = self.model(**kwargs)
        # A prefill's padded slots are zeroed (generation_cache.flatten): masked forever after, equal everywhere.
        present = flatten(returned_cache(self.model, out), "present", keep=None if self.with_past else attention_mask)
        return {"logits": out.logits[:, -1, :], **present}


class EncoderDecoderStep(torch.nn.Module):
    """``prefill``: encoder plus the first decoder step; ``decode``: one decoder step on both caches.

    The cross-attention cache is an input of ``decode`` and not an output: it never changes after prefill,
    and returning it would copy every layer's encoder keys on every step.
    """

    def __init__(self, model: torch.nn.Module, with_past: bool, encoder_input: str):
        super().__init__()
        self.model = model
        self.with_past = with_past
        self.layers = _layers(model)
        self.encoder_input = encoder_input
        self.encoder_mask = encoder_input == "input_ids"  # speech encoders (Whisper) take no mask

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        from transformers import DynamicCache, EncoderDecoderCache
        from transformers.modeling_outputs import BaseModelOutput

        kwargs: dict[str, Any] = {"decoder_input_ids": inputs["decoder_input_ids"], "use_cache": True}
        if self.encoder_mask:
            kwargs["attention_mask"] = inputs["attention_mask"]
        if self.with_past:
            kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=inputs["encoder_hidden_states"])
            kwargs["past_key_values"] = EncoderDecoderCache(
                DynamicCache(_pairs(inputs, "past", self.layers)),
                DynamicCache(_pairs(inputs, "past_cross", self.layers)),
            )
        else:
            kwargs[self.encoder_input] = inputs[self.encoder_input]
            kwargs["past_key_values"] = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.model(**kwargs)
        result = {"logits": out.logits[:, -1, :]}
        result.update(flatten(out.past_key_values.self_attention_cache, "present"))
        if not self.with_past:
            result["encoder_hidden_states"] = out.encoder_last_hidden_state
            result.update(flatten(out.past_key_values.cross_attention_cache, "present_cross"))
        return result


# ── Planning: which components, with which sample inputs and dynamic dims ──
@dataclass
class ComponentPlan:
    """One component to export: its wrapper module, sample inputs at two shapes, and dynamic-shape spec.

    ``second_inputs`` come from a real eager prefill of a shorter prompt (and one more row when the batch is
    dynamic), so a decode step's cache, mask and past length always agree with each other.
    """

    name: str
    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    dynamic_shapes: dict[str, Any]
    second_inputs: dict[str, torch.Tensor] | None = None
    # traced size-oblivious (exporters.generation.export.size_oblivious_tracing): a decode that meets a past of
    # length 1, or whose caches share one named past dim
    size_oblivious: bool = False
    # ``[(label, inputs)]`` below the traced ranges: a one-token prompt, batch 1 (exporters.minimum_sizes)
    smaller_inputs: list[tuple[str, dict[str, torch.Tensor]]] = field(default_factory=list)


def _encoder_input(model: torch.nn.Module, inputs: Mapping[str, Any]) -> str:
    for name in ("input_ids", "input_features"):
        if name in inputs:
            return name
    raise ValueError(f"{type(model).__name__}: generation inputs need input_ids or input_features")


def decoder_start_ids(model: torch.nn.Module, batch: int) -> torch.Tensor:
    """The decoder's first token for every row (``decoder_start_token_id``, as ``generate()`` starts)."""
    start = model.generation_config.decoder_start_token_id
    if start is None:
        start = model.config.decoder_start_token_id
    if isinstance(start, (list, tuple)):
        start = start[0]
    if start is None:
        raise ValueError(f"{type(model).__name__}: no decoder_start_token_id in its config")
    return torch.full((batch, 1), int(start), dtype=torch.long)


def static_batch(config: GenerationExportConfig, backend: str) -> bool:
    """Whether the batch is fixed: as configured, else only for ExecuTorch."""
    return config.static_batch if config.static_batch is not None else backend == "executorch"


def plan_components(
    model: torch.nn.Module, inputs: Mapping[str, Any], config: GenerationExportConfig, backend: str
) -> list[ComponentPlan]:
    """The components of a generation export; decode's sample cache comes from running eager prefill once.

    Dims: ``batch`` and the prompt's ``sequence`` are named dims shared by every input that has them. A
    decoder-only decode's past length is one named ``past`` dim shared by every cache input, traced
    size-oblivious (exporters.generation.export.size_oblivious_tracing says why); should torch still refuse
    it for a model, export_component retries it as ``Dim.AUTO`` (each cache input then gets its own symbol,
    and decode attention does not fuse). An encoder-decoder's past is ``Dim.AUTO``: as a named dim, torch's
    constraint solver rejects the contiguity guard of the cache's ``cat`` (``Min(8*past + 8, 16*past + 16) ==
    8*past + 8``, true for every past length) as a constraint violation.
    """
    # A vision tower hands back one feature tensor per image (a Python list over the batch), so torch.export
    # specialises the batch of a vision-language prefill: its bundles keep the sample's batch.
    static = static_batch(config, backend) or IMAGE_INPUT in inputs
    batch: Any = Dim.STATIC if static else Dim("batch", min=1, max=config.max_batch)
    inputs = dict(inputs)
    if "attention_mask" not in inputs and "input_ids" in inputs:
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    longest = config.cache_len(model)
    if generation_kind(model) == DECODER_ONLY:
        return _plan_decoder_only(model, inputs, batch, longest, static)
    return _plan_encoder_decoder(model, inputs, batch, longest, static)


def _second_prompt(prompt: Mapping[str, torch.Tensor], sequence_inputs: tuple[str, ...],
                   static_batch: bool) -> dict[str, torch.Tensor]:
    """The prompt two tokens shorter (left-cut, so padding stays on the left) and, for a dynamic batch, with
    row 0 repeated once more."""
    second = {}
    for name, value in prompt.items():
        if name in sequence_inputs and value.shape[1] > 3:
            value = value[:, 2:]
        if not static_batch:
            value = torch.cat([value, value[:1]], dim=0)
        second[name] = value
    return second


def _smaller_prompts(prompt: Mapping[str, torch.Tensor], static_batch: bool, padding_side: str,
                     ) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """The smallest prompts a deployment sends, each validated on its own so that a failure names its dim: one
    token per row (the column every row holds: the last of left-padded prompts, the first of right-padded
    ones), and one row (row 0, never padded) when the batch is dynamic. A prompt with an image holds its
    placeholder tokens, so it has no one-token form."""
    shapes = []
    if "input_ids" in prompt and IMAGE_INPUT not in prompt:
        column = slice(-1, None) if padding_side == "left" else slice(0, 1)
        shapes.append(("one-token prompt", {name: value[:, column] if name in ("input_ids", "attention_mask") else value
                                            for name, value in prompt.items()}))
    if not static_batch:
        shapes.append(("batch 1", {name: value[:1] for name, value in prompt.items()}))
    return shapes


def _cache_spec(names: list[str], batch: Any, past: Any) -> dict[str, Any]:
    return {name: {0: batch, 2: past} for name in names}


def _as_past(outputs: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {name.replace("present", "past", 1): value for name, value in outputs.items() if name.startswith(prefix)}


def _plan_decoder_only(model: torch.nn.Module, inputs: dict[str, Any], batch: Any, longest: int,
                       static_batch: bool) -> list[ComponentPlan]:
    prefill = DecoderOnlyStep(model, with_past=False).eval()

    def decode_inputs(prompt: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            first = prefill(**prompt)
        token = first["logits"].argmax(-1, keepdim=True)
        mask = torch.cat([prompt["attention_mask"], torch.ones_like(token)], dim=1)
        return {"input_ids": token, "attention_mask": mask, **_as_past(first, "present_")}

    prompt = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    if IMAGE_INPUT in inputs:
        prompt[IMAGE_INPUT] = inputs[IMAGE_INPUT]
    if prompt["input_ids"].shape[1] < 2:
        raise ValueError("sample prompts must be at least 2 tokens long: torch.export specialises a size of 1")
    second = _second_prompt(prompt, ("input_ids", "attention_mask"), static_batch)
    sequence = Dim("sequence", min=1, max=longest)
    step = decode_inputs(prompt)
    # One named past dim for every cache input (keys, values, indexer states alike: they all grow by one token a
    # step, sliding-window layers included since new_cache keeps them whole): the exported graph then has one
    # past length, which onnxscript's attention fusions need to fuse decode attention (docs/generation.md).
    past = Dim("past", min=1, max=longest - 1)
    decode_spec = {
        "input_ids": {0: batch},
        "attention_mask": {0: batch, 1: Dim.AUTO(min=2, max=longest)},
        **cache_dynamic_shapes(step, "past", batch, past),
    }
    smaller = _smaller_prompts(prompt, static_batch, "left")
    return [
        ComponentPlan("prefill", prefill, prompt,
                      {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence},
                       **({IMAGE_INPUT: {0: batch}} if IMAGE_INPUT in prompt else {})}, second, smaller_inputs=smaller),
        ComponentPlan("decode", DecoderOnlyStep(model, with_past=True).eval(), step, decode_spec,
                      decode_inputs(second), size_oblivious=True,
                      smaller_inputs=[(label, decode_inputs(p)) for label, p in smaller]),
    ]


def _plan_encoder_decoder(model: torch.nn.Module, inputs: dict[str, Any], batch: Any, longest: int,
                          static_batch: bool) -> list[ComponentPlan]:
    encoder_input = _encoder_input(model, inputs)
    prefill = EncoderDecoderStep(model, with_past=False, encoder_input=encoder_input).eval()
    decode = EncoderDecoderStep(model, with_past=True, encoder_input=encoder_input).eval()
    texts = encoder_input == "input_ids"
    encoder_sequence = Dim("encoder_sequence", min=1, max=longest) if texts else None  # audio: frames fixed

    def decode_inputs(prompt: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            first = prefill(**prompt)
        step = {"decoder_input_ids": first["logits"].argmax(-1, keepdim=True)}
        if texts:
            step["attention_mask"] = prompt["attention_mask"]
        step["encoder_hidden_states"] = first["encoder_hidden_states"]
        step = {**step, **_as_past(first, "present_key"), **_as_past(first, "present_value"),
                **_as_past(first, "present_cross")}
        # After the single start token the self-attention past is 1 long, and torch.export specialises a
        # sample size of 1: one eager decode step first makes the sample past 2 long, so it stays dynamic.
        with torch.no_grad():
            second_step = decode(**step)
        return {**step, "decoder_input_ids": second_step["logits"].argmax(-1, keepdim=True),
                **_as_past(second_step, "present_key"), **_as_past(second_step, "present_value")}

    source = inputs[encoder_input]
    prompt = {encoder_input: source}
    if texts:
        prompt["attention_mask"] = inputs["attention_mask"]
    prompt["decoder_input_ids"] = decoder_start_ids(model, source.shape[0])
    second = _second_prompt(prompt, ("input_ids", "attention_mask"), static_batch)
    step = decode_inputs(prompt)
    prefill_spec: dict[str, Any] = {encoder_input: {0: batch, 1: encoder_sequence} if texts else {0: batch},
                                    "decoder_input_ids": {0: batch}}
    decode_spec: dict[str, Any] = {"decoder_input_ids": {0: batch}}
    if texts:
        prefill_spec["attention_mask"] = decode_spec["attention_mask"] = {0: batch, 1: encoder_sequence}
    decode_spec["encoder_hidden_states"] = {0: batch, 1: encoder_sequence}
    past = Dim.AUTO(min=1, max=longest - 1)
    decode_spec.update(_cache_spec([n for n in step if n.startswith(("past_key", "past_value"))], batch, past))
    decode_spec.update(_cache_spec([n for n in step if n.startswith("past_cross")], batch, encoder_sequence))
    smaller = _smaller_prompts(prompt, static_batch, "right")
    return [
        ComponentPlan("prefill", prefill, prompt, prefill_spec, second, smaller_inputs=smaller),
        ComponentPlan("decode", decode, step, decode_spec, decode_inputs(second), size_oblivious=True,
                      smaller_inputs=[(label, decode_inputs(p)) for label, p in smaller]),
    ]


def cache_layout(model: torch.nn.Module, plans: list[ComponentPlan], config: GenerationExportConfig,
                 backend: str) -> dict[str, Any]:
    """The ``generation`` section of ``export.json``: how a loop feeds one step's outputs to the next."""
    kind = generation_kind(model)
    decode = next(p for p in plans if p.name == "decode")
    tensors = layout_tensors(decode.inputs)
    layout: dict[str, Any] = {
        "kind": kind,
        "cache": DYNAMIC_CACHE,
        "components": [p.name for p in plans],
        "layers": _layers(model) if kind == ENCODER_DECODER else len(new_cache(model).layers),
        "max_cache_len": config.cache_len(model),
        "batch": "static" if static_batch(config, backend) or IMAGE_INPUT in plans[0].inputs else "dynamic",
        "batch_size": int(decode.inputs["input_ids" if kind == DECODER_ONLY else "decoder_input_ids"].shape[0]),
        **_state_groups(model, kind, tensors),
        "cache_tensors": tensors,
        "logits": "logits: [batch, vocab], last position only",
        "position_ids": "computed in the graph from attention_mask (cumsum - 1)",
        "eos_token_id": _eos(model),
        "pad_token_id": _pad(model),
    }
    if IMAGE_INPUT in plans[0].inputs:
        layout["image_input"] = {
            "name": IMAGE_INPUT, "shape": list(plans[0].inputs[IMAGE_INPUT].shape[1:]),
            "image_token_id": image_token_id(model), "tokens_per_image": tokens_per_image(model),
            "where": "prefill only: the vision encoder and projector run inside prefill; decode is text-only",
        }
    if kind == ENCODER_DECODER:
        cross = decode.inputs["past_cross_key_0"]
        layout["encoder_input"] = next(n for n in plans[0].inputs if n in ("input_ids", "input_features"))
        layout["decoder_start_token_id"] = int(plans[0].inputs["decoder_input_ids"][0, 0])
        layout["cross_attention"] = {
            "inputs": "past_cross_{key,value}_{layer}",
            "outputs_of_prefill": "present_cross_{key,value}_{layer}",
            "shape": ["batch", int(cross.shape[1]), "encoder_sequence", int(cross.shape[3])],
            "grows": "never: computed once by prefill, fed unchanged to every decode step",
        }
    layout["backend"] = backend
    return layout


def _state_groups(model: torch.nn.Module, kind: str, tensors: list[dict[str, Any]]) -> dict[str, Any]:
    """A summary of ``cache_tensors`` by layer kind: which layers hold which states, named how."""
    def layers(*kinds: str) -> list[int]:
        return sorted({row["layer"] for row in tensors if row["kind"] in kinds})

    def shape(kind: str) -> list[Any] | None:
        return next((row["shape"] for row in tensors if row["kind"] == kind), None)

    groups: dict[str, Any] = {}
    if kind == DECODER_ONLY:
        groups["cache_layers"] = [type(layer).__name__ for layer in new_cache(model).layers]
    if layers("key"):
        groups["self_attention"] = {"inputs": "past_{key,value}_{layer}", "outputs": "present_{key,value}_{layer}",
                                    "layers": layers("key"), "key_shape": shape("key"), "value_shape": shape("value"),
                                    "grows": "concatenated along dim 2 by every decode step"}
    if layers("indexer_key"):
        groups["indexer"] = {"inputs": "past_indexer_key_{layer}", "outputs": "present_indexer_key_{layer}",
                             "layers": layers("indexer_key"), "shape": shape("indexer_key"),
                             "grows": "concatenated along dim 1 by every decode step"}
    if layers("conv", "recurrent"):
        groups["linear_attention"] = {
            "inputs": "past_{conv,recurrent}_{layer}_{state}", "outputs": "present_{conv,recurrent}_{layer}_{state}",
            "layers": layers("conv", "recurrent"), "grows": "never: fixed-size states, replaced by every decode step"}
    return groups


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _eos(model: torch.nn.Module) -> list[int]:
    return _ids(model.generation_config.eos_token_id) or _ids(getattr(model.config, "eos_token_id", None))


def _pad(model: torch.nn.Module) -> int | None:
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = getattr(model.config, "pad_token_id", None)
    ids = _ids(pad)
    return ids[0] if ids else (_eos(model) or [None])[0]


def sample_prompts(model: torch.nn.Module, batch: int = 2, prompt_length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """Generation inputs for ``model`` (see ``make_prompts``)."""
    kind = generation_kind(model)
    if kind == DECODER_ONLY and image_token_id(model) is not None:
        return image_prompts(model, batch, prompt_length, seed)
    speech = kind == ENCODER_DECODER and "input_features" in inspect.signature(model.forward).parameters
    return make_prompts(kind, "input_features" if speech else "input_ids", model.config, _pad(model),
                        batch, prompt_length, seed)


def make_prompts(kind: str, encoder_input: str, config: Any, pad: int | None, batch: int = 2,
                 prompt_length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch of random prompts of different lengths, padded as a tokenizer pads them for generation.

    Decoder-only prompts are left-padded (row ``i`` loses ``i * prompt_length // 3`` tokens to padding, as
    ``padding_side="left"`` batches do); encoder inputs are right-padded; speech models get random log-mel
    features of the encoder's fixed frame count (``2 * max_source_positions``).
    """
    if prompt_length < 1 or batch < 1:
        raise ValueError(f"prompt_length and batch must be at least 1, got {prompt_length}, {batch}")
    generator = torch.Generator().manual_seed(seed)
    if encoder_input == "input_features":
        features = (batch, config.num_mel_bins, 2 * config.max_source_positions)
        return {"input_features": torch.randn(*features, generator=generator)}
    vocab = config.get_text_config(decoder=True).vocab_size
    ids = torch.randint(3, vocab, (batch, prompt_length), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        cut = min(row * prompt_length // 3, prompt_length - 1)
        if cut:
            index = slice(0, cut) if kind == DECODER_ONLY else slice(prompt_length - cut, prompt_length)
            mask[row, index] = 0
            ids[row, index] = pad if pad is not None else 0
    return {"input_ids": ids, "attention_mask": mask}


# ── Vision-language models: one image per row, its placeholder tokens in the prompt ──
def image_token_id(model: torch.nn.Module) -> int | None:
    """The image placeholder token of a vision-language model whose forward takes ``pixel_values``, else None."""
    config = model.config
    token = getattr(config, "image_token_id", getattr(config, "image_token_index", None))
    has_vision = getattr(config, "vision_config", None) is not None and _accepts(model, IMAGE_INPUT)
    return int(token) if token is not None and has_vision else None


def tokens_per_image(model: torch.nn.Module) -> int:
    """Placeholder tokens one image takes: the rows of its projected features (one eager vision forward)."""
    vision = model.config.vision_config
    pixels = torch.zeros(1, vision.num_channels, vision.image_size, vision.image_size)
    with torch.no_grad():
        features = model.get_image_features(pixel_values=pixels)
    features = getattr(features, "pooler_output", features)
    first = features[0] if isinstance(features, (list, tuple)) else features.reshape(-1, features.shape[-1])
    return int(first.shape[0])


def image_prompts(model: torch.nn.Module, batch: int = 2, prompt_length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """Prompts of a vision-language model (see ``make_image_prompts``)."""
    vision = model.config.vision_config
    return make_image_prompts(image_token_id(model), tokens_per_image(model), (vision.num_channels, vision.image_size,
                              vision.image_size), model.config.get_text_config(decoder=True).vocab_size, _pad(model),
                              batch, prompt_length, seed)


def make_image_prompts(token: int, count: int, pixels: tuple[int, ...], vocab: int, pad: int | None, batch: int = 2,
                       prompt_length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """``2`` lead tokens, one image's ``count`` placeholders, ``prompt_length`` text tokens per row; row ``i > 0``
    is left-padded over its lead tokens (so prompts differ in length and every row keeps its whole image), and
    random ``pixel_values`` of shape ``pixels`` per row. The lead tokens are what the second validation shape
    cuts. A bundle's manifest has every argument (``generation.image_input``), so prompts need no model."""
    if prompt_length < 1 or batch < 1:
        raise ValueError(f"prompt_length and batch must be at least 1, got {prompt_length}, {batch}")
    generator = torch.Generator().manual_seed(seed)
    lead = 2
    ids = torch.randint(3, vocab, (batch, lead + count + prompt_length), generator=generator)
    ids[ids == token] = 3 if token != 3 else 4  # no stray placeholder among the text tokens
    ids[:, lead:lead + count] = token
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        mask[row, :lead] = 0
        ids[row, :lead] = pad if pad is not None else 0
    return {"input_ids": ids, "attention_mask": mask, IMAGE_INPUT: torch.randn(batch, *pixels, generator=generator)}
