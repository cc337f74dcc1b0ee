"""``generate()`` over a generation bundle's components: greedy (or seeded sampling) decoding, every step in the
runtime.

The loop is the same for every backend and for eager: it runs a decode session (``exporters.bundle.stepping``:
``prefill(prompt)`` and ``decode(tokens)``, each returning the next logits, the cache kept inside the session in
the runtime's own form) and needs the ``generation`` layout of the bundle's manifest. ``ExportedModel.generate``
runs it on the loaded artifacts (``open_session``: I/O binding in ONNX Runtime); ``eager_components`` gives the
same loop the eager wrappers, which is the "eager with the same KV cache" reference of the checks. The loop
itself works on numpy arrays, which every runtime hands over without a copy: per step it chooses a token
(``argmax``), tracks EOS only when there is one, and calls ``decode``.

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

import numpy as np
import torch

from exporters.bundle.stepping import ComponentSession, open_session

__all__ = ["EagerGeneration", "GenerationOutput", "eager_components", "generate", "module_components",
           "run_generation"]

Component = Callable[..., Mapping[str, torch.Tensor]]


@dataclass
class GenerationOutput:
    """New tokens per row, the logits each step chose from (with ``output_logits``), and where the time went.

    ``decode_seconds`` is wall time from the start of the first decode step to the token chosen from the last
    one, everything the loop does in between included: what a caller timing the steps sees."""

    tokens: torch.Tensor  # [batch, new tokens]
    logits: list[torch.Tensor] = field(repr=False)  # one [batch, vocab] per step (empty unless output_logits)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_steps: int = 0

    @property
    def decode_steps_per_second(self) -> float:
        return self.decode_steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens produced by decode steps per second of wall time, all rows together."""
        return self.decode_steps_per_second * self.tokens.shape[0]


def _chooser(do_sample: bool, temperature: float, top_k: int, seed: int | None,
             eos: np.ndarray, min_new_tokens: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """``choose(logits, step)``: the next token of every row (int64 ``[batch]``), EOS masked before
    ``min_new_tokens``. Greedy needs no copy of the logits: masking EOS can change the argmax only when the
    argmax is an EOS token (``np.argmax`` takes the first maximum, as ``torch.argmax`` does), so only then is
    the choice made again on a masked copy."""
    if not do_sample:
        eos_ids = set(eos.tolist())  # a set lookup per row: a few hundred ns, where the array compare takes µs

        def greedy(logits: np.ndarray, step: int) -> np.ndarray:
            token = logits.argmax(-1)
            if step < min_new_tokens and not eos_ids.isdisjoint(token.tolist()):
                token = _suppressed(logits, eos).argmax(-1)
            return token

        return greedy
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    generator = torch.Generator().manual_seed(0 if seed is None else seed)

    def draw(logits: np.ndarray, step: int) -> np.ndarray:
        scores = torch.from_numpy(_suppressed(logits, eos) if step < min_new_tokens else logits).float() / temperature
        if top_k > 0:
            kth = scores.topk(min(top_k, scores.shape[-1]), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(-1).numpy()

    return draw


def run_generation(
    session: Any,
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
    output_logits: bool = False,
) -> GenerationOutput:
    """The decoding loop over a decode ``session`` (exporters.bundle.stepping; see the module docstring);
    ``inputs`` are the prompt's. ``output_logits`` keeps every step's logits (the checks compare them; a long
    generation would otherwise hold ``new tokens x batch x vocab`` floats for nothing)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    eos = layout.get("eos_token_id", []) if eos_token_id is None else eos_token_id
    eos = np.array([eos] if isinstance(eos, int) else list(eos), dtype=np.int64)
    pad = layout.get("pad_token_id") if pad_token_id is None else pad_token_id
    prefill_inputs, fixed = _prompt(layout, inputs)
    started = time.perf_counter()
    logits = session.prefill(prefill_inputs, fixed, max_new_tokens - 1)
    prefill_seconds = time.perf_counter() - started
    eos = eos[(eos >= 0) & (eos < logits.shape[-1])]  # ids past the vocabulary can never be emitted (_suppressed)
    choose = _chooser(do_sample, temperature, top_k, seed, eos, min_new_tokens)
    batch = logits.shape[0]
    tokens = np.zeros((batch, max_new_tokens), dtype=np.int64)
    finished = np.zeros(batch, dtype=bool)
    watch_eos = eos.size > 0
    kept: list[np.ndarray] = []
    decode_started, decode_steps, produced = None, 0, 0
    for step in range(max_new_tokens):
        if output_logits:
            kept.append(logits)
        token = choose(logits, step)
        if watch_eos and step >= min_new_tokens:  # before min_new_tokens no row can emit EOS: nothing to track
            if pad is not None:
                token = np.where(finished, pad, token)
            finished |= _is_eos(token, eos)
        tokens[:, step] = token
        produced = step + 1
        if step == max_new_tokens - 1 or (watch_eos and finished.all()):
            break
        if decode_started is None:
            decode_started = time.perf_counter()
        logits = session.decode(token)
        decode_steps += 1
    decode_seconds = time.perf_counter() - decode_started if decode_started is not None else 0.0
    return GenerationOutput(torch.from_numpy(tokens[:, :produced]), [torch.from_numpy(v) for v in kept],
                            prefill_seconds, decode_seconds, decode_steps)


def run_forced(session: Any, layout: Mapping[str, Any], inputs: Mapping[str, torch.Tensor],
               tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every step's logits of the decoding loop over ``session`` fed ``tokens`` ``[batch, new]`` instead of its
    own choices (teacher forcing): the same steps ``run_generation`` took to choose them, so that a run whose
    rounding differs is compared on the same inputs (exporters.generation.check's flip envelope)."""
    prefill_inputs, fixed = _prompt(layout, inputs)
    logits = [session.prefill(prefill_inputs, fixed, tokens.shape[1] - 1)]
    for step in range(tokens.shape[1] - 1):
        logits.append(session.decode(tokens[:, step].numpy()))
    return [torch.from_numpy(step_logits) for step_logits in logits]


def _is_eos(token: np.ndarray, eos: np.ndarray) -> np.ndarray:
    """``[batch]``: whether each row's token is an EOS token (``np.isin`` costs 9 µs a step; this 1.4 µs)."""
    return (token[:, None] == eos).any(1)


def _suppressed(logits: np.ndarray, eos: np.ndarray) -> np.ndarray:
    """A copy of ``logits`` ``[batch, vocab]`` with the EOS tokens masked (``min_new_tokens``).

    ``eos`` holds only ids inside the vocabulary: ids past it can never be emitted, so there is nothing to mask,
    as in transformers' ``MinNewTokensLengthLogitsProcessor`` (an ``isin`` over the vocabulary). A config may
    list such ids (GLM's ``eos_token_id = [151329, 151336, 151338]`` on a model built with a small vocabulary);
    indexing with them raised ``IndexError`` before a single token was compared.
    """
    scores = logits.copy()
    if eos.size:
        scores[:, eos] = -np.inf
    return scores


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
    return run_generation(open_session(bundle), layout, _prompt_inputs(input_ids, kwargs), **kwargs)


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

    def session(self) -> ComponentSession:
        """A fresh decode session over the wrappers."""
        return ComponentSession(self.components, self.metadata.generation)

    def generate(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> GenerationOutput:
        return run_generation(self.session(), self.metadata.generation, _prompt_inputs(input_ids, kwargs), **kwargs)


def session_of(bundle: Any) -> Any:
    """A fresh decode session of a loaded generation bundle (``open_session``) or of ``EagerGeneration``."""
    return bundle.session() if isinstance(bundle, EagerGeneration) else open_session(bundle)


@dataclass
class _Layout:
    generation: dict[str, Any]
