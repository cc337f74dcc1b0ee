"""The tiny builder's generation knobs: config fields a generation export needs, and tries past degenerate models.

Two problems of random tiny models that a generation export meets and a single-graph export does not:

* **Encoder-style configs behind a causal LM head.** BERT-family ``*ForCausalLM`` / ``*LMHeadModel`` classes
  (BertLMHeadModel, ElectraForCausalLM, XLMRobertaForCausalLM, ...) have configs whose ``is_decoder`` defaults
  to False; the model then runs bidirectionally and turns its cache off (``use_cache = False`` unless
  ``config.is_decoder``, modeling_bert.py:639-642), and transformers warns "If you want to use
  `BertLMHeadModel` as a standalone, add `is_decoder=True.`" (modeling_bert.py:833-834). A user generating
  from such a head sets ``is_decoder=True``; ``generation_overrides`` does the same for every config with that
  field set False, so the knob is data of the config, not a list of classes.
* **Degenerate greedy paths.** A random model can emit one token forever; the generation check calls that
  ``inconclusive`` (a broken cache would reproduce it). The usual cause is a head tied to the input embedding:
  the last hidden state of a shallow random model is still mostly the current token's embedding, so the logits
  ``E h`` peak at that same token (measured on the tiny Gemma, BioGPT, Bloom, VaultGemma, Youtu and
  BlenderbotSmall: every seed 0-3 echoes, an untied head does not). ``lively_attempt`` tries a bounded list of
  builds (``ATTEMPTS``) with eager ``generate()`` only (no export, about a second each) and returns the first
  whose greedy path is not degenerate, with every try recorded; when all are degenerate it returns the first,
  and the export's own check still reports ``inconclusive``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ATTEMPTS", "eager_tokens", "generation_overrides", "lively_attempt"]

# (seed, config overrides), in order: the plain build; an untied output head (the echo above); a larger init
# scale (T5 and Gemma needed it in scripts/generation_matrix.py); another seed. Fields a config lacks are ignored.
ATTEMPTS: tuple[tuple[int, dict[str, Any]], ...] = (
    (0, {}),
    (0, {"tie_word_embeddings": False}),
    (0, {"initializer_range": 0.5, "initializer_factor": 4.0}),
    (1, {}),
)


def generation_overrides(config: Any) -> dict[str, Any]:
    """Config fields a decoder-only generation export sets on ``config`` (a default config): ``is_decoder``
    where the config has it set False (an encoder-style config behind a causal LM head)."""
    if getattr(config, "is_decoder", None) is False and not getattr(config, "is_encoder_decoder", False):
        return {"is_decoder": True}
    return {}


def eager_tokens(model: torch.nn.Module, batch: int, prompt_length: int, seed: int, new_tokens: int) -> torch.Tensor:
    """Eager greedy tokens on the prompts a generation export of ``model`` with ``seed`` is checked on."""
    from exporters.generation.check import eager_generate
    from exporters.generation.components import (
        ENCODER_DECODER,
        _eos,
        _pad,
        decoder_start_ids,
        generation_kind,
        sample_prompts,
    )

    kind = generation_kind(model)
    layout: dict[str, Any] = {"kind": kind, "eos_token_id": _eos(model), "pad_token_id": _pad(model)}
    if kind == ENCODER_DECODER:
        layout["decoder_start_token_id"] = int(decoder_start_ids(model, 1)[0, 0])
    prompts = sample_prompts(model, batch=batch, prompt_length=prompt_length, seed=seed)
    tokens, _, _ = eager_generate(model, layout, prompts, new_tokens)
    return tokens


def lively_attempt(
    build: Callable[[int, dict[str, Any]], torch.nn.Module], overrides: dict[str, Any] | None = None,
    batch: int = 2, prompt_length: int = 8, new_tokens: int = 16,
    attempts: tuple[tuple[int, dict[str, Any]], ...] = ATTEMPTS,
) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The first ``(seed, overrides)`` of ``attempts`` whose eager greedy path is not degenerate, and every try.

    ``build(seed, overrides)`` is the generation export's own model builder, so the chosen try is what the
    export then builds. A try that cannot build or generate ends the search at the first attempt: the export
    itself reproduces and reports that error. When every try is degenerate, the first is returned and the
    export's check reports ``inconclusive``.
    """
    from exporters.generation.check import degenerate

    base = dict(overrides or {})
    tried: list[dict[str, Any]] = []
    for seed, extra in attempts:
        merged = {**base, **extra}
        try:
            tokens = eager_tokens(build(seed, merged), batch, prompt_length, seed, new_tokens)
        except Exception as error:  # not this rule's business: the export shows it with its stage
            tried.append({"seed": seed, "overrides": merged, "error": f"{type(error).__name__}: {error}"[:200]})
            break
        tried.append({"seed": seed, "overrides": merged, "degenerate": degenerate(tokens)})
        if not tried[-1]["degenerate"]:
            return seed, merged, tried
    first_seed, first_extra = attempts[0]
    return first_seed, {**base, **first_extra}, tried
