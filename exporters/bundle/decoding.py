"""``generate()`` over a generation bundle's components: greedy (or seeded sampling) decoding, every step in the
runtime.

The loop is the same for every backend and for eager: it only needs callables ``prefill(**inputs)`` and
``decode(**inputs)`` returning dicts of tensors named as in ``exporters.generation.components`` (``logits``,
``present_key_0`` …), and the ``generation`` layout of the bundle's manifest. ``ExportedModel.generate`` runs
it on the loaded artifacts; ``eager_components`` gives the same loop the eager wrappers, which is the
"eager with the same KV cache" baseline of the benchmarks.

What it does, as ``transformers`` ``generate()`` with a plain greedy config does: the prompt runs once through
``prefill``; each new token is the argmax of the last logits (or a draw from softmax(logits / temperature),
optionally top-k, from a seeded generator); the attention mask grows by one column per step, so left-padded
rows keep their padding masked; a row that emitted an EOS token gets ``pad_token_id`` from then on; the loop
stops when every row has finished or ``max_new_tokens`` is reached. ``min_new_tokens`` masks EOS until then.
The model's own logits processors (repetition penalties, forced or suppressed tokens) are not applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["EagerGeneration", "GenerationOutput", "eager_components", "generate", "module_components",
           "run_generation"]

Component = Callable[..., Mapping[str, torch.Tensor]]


@dataclass
class GenerationOutput:
    """New tokens per row, the logits each step chose from, and where the time went."""

    tokens: torch.Tensor  # [batch, new tokens]
    logits: list[torch.Tensor] = field(repr=False)  # one [batch, vocab] per step
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_steps: int = 0

    @property
    def decode_steps_per_second(self) -> float:
        return self.decode_steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens produced by decode steps per second, all rows together."""
        return self.decode_steps_per_second * self.tokens.shape[0]


def _as_past(outputs: Mapping[str, torch.Tensor], prefix: str, own_copy: bool) -> dict[str, torch.Tensor]:
    # A runtime may hand back tensors backed by its own planned memory, which its next run overwrites:
    # ``own_copy`` keeps a private copy of what the next step feeds back in.
    return {name.replace("present", "past", 1): (value.clone() if own_copy else value)
            for name, value in outputs.items() if name.startswith(prefix)}


def _carried(outputs: Mapping[str, torch.Tensor], own_copy: bool) -> dict[str, torch.Tensor]:
    """The cache a step hands to the next: every ``present_*`` output (key/value, indexer keys, linear-attention
    states: ``generation.cache_tensors``) except the cross-attention cache, which prefill computes once."""
    carried = {name: value for name, value in outputs.items() if not name.startswith("present_cross")}
    return _as_past(carried, "present_", own_copy)


def _chooser(do_sample: bool, temperature: float, top_k: int, seed: int | None) -> Callable[[torch.Tensor], torch.Tensor]:
    if not do_sample:
        return lambda scores: scores.argmax(-1)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    generator = torch.Generator().manual_seed(0 if seed is None else seed)

    def draw(scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float() / temperature
        if top_k > 0:
            kth = scores.topk(min(top_k, scores.shape[-1]), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(-1)

    return draw


def run_generation(
    components: Mapping[str, Component],
    layout: Mapping[str, Any],
    inputs: Mapping[str, torch.Tensor],
    max_new_tokens: int = 16,
    min_new_tokens: int = 0,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    own_copies: bool = False,
) -> GenerationOutput:
    """The decoding loop over ``components`` (see the module docstring); ``inputs`` are the prompt's."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    eos = layout.get("eos_token_id", []) if eos_token_id is None else eos_token_id
    eos = torch.tensor([eos] if isinstance(eos, int) else list(eos), dtype=torch.long)
    pad = layout.get("pad_token_id") if pad_token_id is None else pad_token_id
    choose = _chooser(do_sample, temperature, top_k, seed)
    encoder_decoder = layout["kind"] == "encoder-decoder"
    prefill_inputs, fixed = _prompt(layout, inputs)
    started = time.perf_counter()
    out = components["prefill"](**prefill_inputs)
    prefill_seconds = time.perf_counter() - started
    logits = out["logits"]
    past = _carried(out, own_copies)
    if encoder_decoder:  # computed once; fed unchanged to every step
        fixed |= _as_past(out, "present_cross", True) | {"encoder_hidden_states": out["encoder_hidden_states"].clone()}
    mask = None if encoder_decoder else prefill_inputs["attention_mask"]
    batch = logits.shape[0]
    finished = torch.zeros(batch, dtype=torch.bool)
    tokens: list[torch.Tensor] = []
    step_logits: list[torch.Tensor] = []
    decode_seconds, decode_steps = 0.0, 0
    for step in range(max_new_tokens):
        step_logits.append(logits.detach().clone())
        scores = logits.clone()
        if step < min_new_tokens:
            _suppress(scores, eos)
        token = choose(scores)
        if pad is not None:
            token = torch.where(finished, torch.tensor(pad), token)
        tokens.append(token)
        finished |= torch.isin(token, eos)
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        feed = {**fixed, **past}
        if encoder_decoder:
            feed["decoder_input_ids"] = token[:, None]
        else:
            mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=1)
            feed["input_ids"], feed["attention_mask"] = token[:, None], mask
        started = time.perf_counter()
        out = components["decode"](**feed)
        decode_seconds += time.perf_counter() - started
        decode_steps += 1
        logits = out["logits"]
        past = _carried(out, own_copies)
    return GenerationOutput(torch.stack(tokens, dim=1), step_logits, prefill_seconds, decode_seconds, decode_steps)


def _suppress(scores: torch.Tensor, eos: torch.Tensor) -> None:
    """Mask the EOS tokens of ``scores`` ``[batch, vocab]`` in place (``min_new_tokens``).

    Ids past the vocabulary are skipped: they can never be emitted, so there is nothing to mask, as in
    transformers' ``MinNewTokensLengthLogitsProcessor`` (an ``isin`` over the vocabulary). A config may list
    such ids (GLM's ``eos_token_id = [151329, 151336, 151338]`` on a model built with a small vocabulary);
    indexing with them raised ``IndexError`` before a single token was compared.
    """
    eos = eos[(eos >= 0) & (eos < scores.shape[-1])]
    if eos.numel():
        scores[:, eos] = float("-inf")


def _prompt(layout: Mapping[str, Any], inputs: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor],
                                                                                 dict[str, torch.Tensor]]:
    """Prefill's inputs, and the inputs every decode step gets unchanged (encoder-decoder: the source mask)."""
    if layout["kind"] == "decoder-only":
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask")
        prompt = {"input_ids": ids, "attention_mask": torch.ones_like(ids) if mask is None else mask}
        if "pixel_values" in inputs:  # a vision-language prefill (docs/generation.md)
            prompt["pixel_values"] = inputs["pixel_values"]
        return prompt, {}
    name = layout["encoder_input"]
    if name not in inputs:
        raise ValueError(f"this model's prefill takes {name!r}")
    source = inputs[name]
    prompt = {name: source}
    fixed: dict[str, torch.Tensor] = {}
    if name == "input_ids":
        mask = inputs.get("attention_mask")
        prompt["attention_mask"] = fixed["attention_mask"] = torch.ones_like(source) if mask is None else mask
    prompt["decoder_input_ids"] = torch.full((source.shape[0], 1), layout["decoder_start_token_id"], dtype=torch.long)
    return prompt, fixed


def generate(bundle: Any, input_ids: torch.Tensor | None = None, **kwargs: Any) -> GenerationOutput:
    """``exporters.load(dir).generate(input_ids, attention_mask=…, max_new_tokens=…)`` (see ``run_generation``)."""
    layout = bundle.metadata.generation
    if not layout:
        raise TypeError(f"{bundle.directory} is not a generation bundle (export.json has no generation section); "
                        "export it with export_for_generation / `exportbot export --task text-generation`")
    components = {name: bundle.components[name] for name in layout["components"]}
    return run_generation(components, layout, _prompt_inputs(input_ids, kwargs),
                          own_copies=bundle.metadata.backend == "executorch", **kwargs)


def _prompt_inputs(input_ids: torch.Tensor | None, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The prompt tensors among ``generate``'s arguments (removed from ``kwargs``, which keeps the options)."""
    inputs = {name: kwargs.pop(name) for name in ("attention_mask", "input_features", "pixel_values") if name in kwargs}
    inputs = {name: value for name, value in inputs.items() if value is not None}
    if input_ids is not None:
        inputs["input_ids"] = input_ids
    return inputs


def eager_components(plans: list[Any]) -> dict[str, Component]:
    """The eager wrapper modules of a generation export, callable like the loaded components."""
    return module_components({plan.name: plan.module for plan in plans})


def module_components(modules: Mapping[str, torch.nn.Module]) -> dict[str, Component]:
    """Component modules (eager wrappers, or a quantized bundle's PyTorch references) callable like the loaded
    components, without autograd."""

    def no_grad(module: torch.nn.Module) -> Component:
        def run(**inputs: torch.Tensor) -> Mapping[str, torch.Tensor]:
            with torch.no_grad():
                return module(**inputs)

        return run

    return {name: no_grad(module) for name, module in modules.items()}


class EagerGeneration:
    """The eager wrappers behind the same interface as a loaded bundle (``.metadata.generation``,
    ``.generate``): the "eager with the same KV cache" baseline, and a reference for the checks."""

    def __init__(self, plans: list[Any], layout: Mapping[str, Any]):
        self.components = eager_components(plans)
        self.metadata = _Layout(dict(layout))

    def generate(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> GenerationOutput:
        return run_generation(self.components, self.metadata.generation, _prompt_inputs(input_ids, kwargs), **kwargs)


@dataclass
class _Layout:
    generation: dict[str, Any]
