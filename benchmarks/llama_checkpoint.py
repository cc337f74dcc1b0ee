"""The benchmarks' local Llama checkpoint: hidden 512, 8 layers, random weights, a trained tokenizer.

Shared by the decode benchmark (``bench_decode.py``) and the quantization benchmark, so both measure the same
model, and so every anchor that reads a checkpoint directory (onnxruntime-genai's builder, ExecuTorch's LLM
export, transformers' ``from_pretrained``) reads the same files: no download, nothing from the hub. The weights
are seeded (the same checkpoint on every run); the context (``max_position_embeddings`` 2,048) covers the
longest benchmarked prompt plus its new tokens, and is the generation bundle's default ``max_cache_len``.

    from llama_checkpoint import llama_512x8_checkpoint   # with benchmarks/ on sys.path
    directory = llama_512x8_checkpoint()                   # .exportbot-cache/bench/llama-512x8, written once
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LLAMA_512X8", "llama_512x8_checkpoint"]

ROOT = Path(__file__).resolve().parent.parent
LLAMA_512X8 = {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8,
               "num_key_value_heads": 8, "vocab_size": 8000, "max_position_embeddings": 2048}
TOKENIZER_VOCAB = 200  # the tokenizer covers the first ids; prompts are random ids over the whole vocabulary


def llama_512x8_checkpoint(directory: Path | None = None, seed: int = 0) -> Path:
    """Write the checkpoint to ``directory`` (default ``.exportbot-cache/bench/llama-512x8``) unless it is
    already there (``config.json`` and ``model.safetensors``); returns the directory."""
    directory = directory or ROOT / ".exportbot-cache" / "bench" / "llama-512x8"
    if (directory / "config.json").is_file() and (directory / "model.safetensors").is_file():
        return directory
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from exporters.tiny.checkpoint import SPECIAL_TOKENS, train_tokenizer

    tokenizer = train_tokenizer(TOKENIZER_VOCAB)
    ids = {name.replace("_token", "_token_id"): tokenizer.convert_tokens_to_ids(token)
           for name, token in SPECIAL_TOKENS.items() if name != "unk_token"}
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**LLAMA_512X8, **ids)).eval()
    for name, value in ids.items():
        setattr(model.generation_config, name, value)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
