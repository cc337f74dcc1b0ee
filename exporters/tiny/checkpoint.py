"""A tiny checkpoint directory with a tokenizer: what ``exportbot export ./my-checkpoint`` is tried on offline.

A checkpoint is a directory of ``config.json``, weights (``model.safetensors``) and the tokenizer that turns
text into its ids. The hub is out of reach here, so this writes one: the tiny model of ``exporters.tiny``
(random, deterministic) and a byte-pair tokenizer trained with the ``tokenizers`` library on a few built-in
sentences, small enough for the tiny vocabulary. The model's special token ids are the tokenizer's, as in a
real checkpoint, so text in, ids through the bundle and text out agree. ``weights=False`` writes the config
alone (a model random-initialised from it, as ``exportbot export`` does for such a directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SPECIAL_TOKENS", "train_tokenizer", "write_tiny_checkpoint"]

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
_CORPUS = """\
the quick brown fox jumps over the lazy dog.
a model exported once runs anywhere its runtime does.
tokens go in, logits come out, and the cache grows by one row every step.
hello world, this is a tiny checkpoint with a tokenizer of its own.
batch one and a prompt of one token are the shapes a deployment sends most.
"""


def train_tokenizer(vocab_size: int) -> Any:
    """A lower-casing byte-pair tokenizer of at most ``vocab_size`` ids, trained on ``_CORPUS``: every letter,
    digit and common punctuation mark is in it, so any such text encodes; the special tokens come first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    alphabet = [*"abcdefghijklmnopqrstuvwxyz0123456789 .,!?'-", "▁"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(_CORPUS.splitlines(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


def write_tiny_checkpoint(directory: Path | str, class_name: str = "LlamaForCausalLM", seed: int = 0,
                          weights: bool = True) -> Path:
    """Write ``class_name``'s tiny model (``weights``) or its config alone, with a trained tokenizer, to
    ``directory``; returns it."""
    from exporters.tiny import build_tiny

    directory = Path(directory)
    model = build_tiny(class_name, seed).model
    tokenizer = train_tokenizer(min(model.config.get_text_config(decoder=True).vocab_size, 200))
    ids = {name.replace("_token", "_token_id"): tokenizer.convert_tokens_to_ids(token)
           for name, token in SPECIAL_TOKENS.items() if name != "unk_token"}
    if getattr(model.config, "is_encoder_decoder", False):
        ids["decoder_start_token_id"] = ids["pad_token_id"]  # as T5 and BART checkpoints start
    generation = getattr(model, "generation_config", None)  # a model that cannot generate has none
    for config in [model.config] + ([generation] if generation is not None else []):
        for name, value in ids.items():
            setattr(config, name, value)
    directory.mkdir(parents=True, exist_ok=True)
    if weights:
        model.save_pretrained(directory)
    else:
        model.config.save_pretrained(directory)
        if model.can_generate():
            model.generation_config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
