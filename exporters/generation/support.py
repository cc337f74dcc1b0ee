"""Whether a model can be exported for generation at all: a KV cache in transformers' ``Cache``, or a clear no.

``export_for_generation`` exports ``prefill`` and ``decode`` components that pass the key/value cache from one
step to the next as flat tensors (exporters.generation.components). That needs a model whose forward takes a
``past_key_values`` ``Cache`` and returns it. Models that keep their generation state some other way fail
deep inside the first eager prefill with an ``AttributeError`` that says nothing useful
(``'MambaCausalLMOutput' object has no attribute 'past_key_values'``); this module names the reason first,
from the model's forward signature and config, before anything is traced:

* no ``past_key_values`` parameter: the state, if any, lives elsewhere (``cache_params``: Mamba's conv and
  SSM states; ``state``: RWKV's tensors, updated in place; ``mems``: XLNet's memory; ``cache``: XLM, whose
  ``generate()`` re-runs the whole, bidirectional sequence each step), or there is none (OpenAI GPT's
  ``generate()`` recomputes the whole sequence every step);
* the drafting assistants' ``shared_kv_states`` (another model's keys and values) and Reformer's
  ``past_buckets_states`` are caches outside ``Cache`` as well.

A model whose forward takes ``past_key_values`` but declares an output with no ``past_key_values`` field
(RecurrentGemma: ``-> CausalLMOutput``; it keeps its recurrent and conv states in module attributes) is refused
before tracing too: given the cache ``generate()`` builds, its first prefill would fail inside
``get_seq_length``. Not transformers' ``_is_stateful`` flag: it marks every model with recurrent states (it
means "no cache rollback for assisted decoding"), and Qwen3-Next, Qwen3.5, Zamba2, Zaya, Falcon-H1, Kimi-Linear,
NemotronH, OLMo-Hybrid and Bailing-Hybrid set it while keeping those states in the ``Cache``'s linear-attention
layers, which the components carry (exporters/generation/cache.py). A model that takes ``past_key_values`` and
returns no cache at run time is caught at its first eager prefill by ``returned_cache``: a BERT-style encoder with
an LM head and ``config.is_decoder`` False turns its cache off (``use_cache = False`` unless ``is_decoder``,
modeling_bert.py:639-642), and transformers warns "add `is_decoder=True`" for exactly this (the tiny builder's
generation knobs set it: exporters.tiny.generation).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["GenerationUnsupported", "check_supported", "returned_cache", "unsupported_reason"]

# Forward parameters that hold a model's generation state when it is not a ``past_key_values`` Cache.
_OTHER_STATE = {
    "cache_params": "its state is `cache_params`, per-layer recurrent (and conv) states, not keys and values",
    "state": "its recurrent state is `state`, a list of tensors outside transformers' Cache, updated in place",
    "mems": "its memory is `mems` (per-layer hidden states, not keys and values)",
    "cache": "its `cache` is not carried between steps: generate() re-runs the whole sequence every step",
    "past_buckets_states": "its cache is `past_buckets_states` (LSH buckets and hidden states, outside Cache)",
    "shared_kv_states": "it reads `shared_kv_states`, keys and values of another model (a drafting assistant)",
}


class GenerationUnsupported(ValueError):
    """The model cannot be exported as prefill + decode with a KV cache; the message says why, in one line."""


def _parameters(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot be exported for KV-cache generation, or None if nothing says it cannot."""
    name, config = type(model).__name__, model.config
    if getattr(config, "is_encoder_decoder", False):
        return None  # the decoder's cache is checked by the encoder-decoder components
    parameters = _parameters(model)
    if "past_key_values" not in parameters:
        other = next((text for field, text in _OTHER_STATE.items() if field in parameters), None)
        return (f"{name} has no KV cache for a decode step: its forward takes no `past_key_values`"
                + (f"; {other}" if other else "; generate() re-runs the whole sequence every step"))
    declared = _declared_outputs(model)
    if declared and not any("past_key_values" in output.__dataclass_fields__ for output in declared):
        return (f"{name} returns no KV cache ({' | '.join(output.__name__ for output in declared)} has no "
                "past_key_values): it is a stateful model, keeping state in its modules between calls, outside "
                "transformers' Cache")  # the words returned_cache said at the first prefill before this check
    return None


def _declared_outputs(model: torch.nn.Module) -> list[type]:
    """The output dataclasses (``ModelOutput``s) that ``model.forward``'s return annotation names; [] if none
    (or if the annotations do not resolve: then ``returned_cache`` decides at the first prefill)."""
    import typing

    try:
        annotation = typing.get_type_hints(type(model).forward).get("return")
    except Exception:
        return []
    return [a for a in typing.get_args(annotation) or (annotation,)
            if isinstance(a, type) and hasattr(a, "__dataclass_fields__")]


def check_supported(model: torch.nn.Module) -> None:
    """Raise ``GenerationUnsupported`` naming the reason when ``model`` cannot be exported for generation."""
    reason = unsupported_reason(model)
    if reason is not None:
        raise GenerationUnsupported(reason)


def returned_cache(model: torch.nn.Module, output: Any) -> Any:
    """The ``Cache`` a forward returned as ``past_key_values``; ``GenerationUnsupported`` when it returned none.

    RecurrentGemma takes ``past_key_values`` (for its attention layers) but keeps its recurrent and conv states
    in module attributes (``self.conv1d_state``, ``self.rg_lru.recurrent_states``) and returns a
    ``CausalLMOutput`` with no cache at all: no flat-tensor decode step can carry that state.
    """
    from transformers import Cache

    cache = getattr(output, "past_key_values", None)
    if isinstance(cache, Cache):
        return cache
    if getattr(model.config, "is_decoder", None) is False:
        why = ("config.is_decoder is False, so it runs as a bidirectional encoder with its cache off; "
               "build it with is_decoder=True to generate from it")
    else:
        why = "it keeps no cache"
    raise GenerationUnsupported(f"{type(model).__name__} returns no KV cache ({type(output).__name__} has no "
                                f"past_key_values): {why}")
