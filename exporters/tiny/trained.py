"""Llama checkpoints made here, no download: a small one trained on a synthetic corpus, and a random large one.

A random tiny model predicts nothing (its next-token distributions are near-uniform), so a quality check on
it is inconclusive by construction (exporters.quantize.quality). ``trained_llama`` gives quality checks a
model with structure: a Llama of hidden 64 trained for a fixed number of steps (about a minute on two busy
cores) on sequences that follow rules a next-token predictor can learn: arithmetic progressions modulo the
vocabulary (start and step drawn per sequence) and a random k-gram repeated. After training its greedy path
continues a progression, so top-1 agreement and greedy tokens mean something. The step count, not a time
budget, ends training, so every build of one recipe trains the same way (up to float reduction order).

``llama_checkpoint`` writes a random-initialised Llama of a chosen size (the quantization benchmark's hidden
512 x 8 layers) as a checkpoint directory; both are cached by their recipe under a directory the caller names
(``.exportbot-cache/`` in tests and benchmarks) and rebuilt only when the recipe changes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

SPECIAL_TOKENS = 4  # 0 pad, 1 bos, 2 eos, 3 unused: the corpus draws its tokens above them


@dataclass(frozen=True)
class TrainingRecipe:
    """Everything that decides the trained model (its cache key)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 128
    vocab: int = 96
    sequence: int = 48
    batch: int = 32
    steps: int = 500
    learning_rate: float = 3e-3
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def llama_config(hidden: int, layers: int, heads: int, intermediate: int, vocab: int, positions: int) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, intermediate_size=intermediate, vocab_size=vocab,
                       max_position_embeddings=positions, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       tie_word_embeddings=False, architectures=["LlamaForCausalLM"])


def synthetic_sequences(count: int, length: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """``[count, length]`` token ids: half arithmetic progressions modulo the usable vocabulary, half a random
    k-gram (k from 2 to 5) repeated."""
    usable = vocab - SPECIAL_TOKENS
    positions = torch.arange(length)
    starts = torch.randint(0, usable, (count, 1), generator=generator)
    steps = torch.randint(1, 6, (count, 1), generator=generator)
    progressions = (starts + steps * positions) % usable
    widths = torch.randint(2, 6, (count, 1), generator=generator)
    grams = torch.randint(0, usable, (count, 5), generator=generator)
    repeats = grams.gather(1, positions.expand(count, length) % widths)
    kind = torch.rand(count, 1, generator=generator) < 0.5
    return torch.where(kind, progressions, repeats) + SPECIAL_TOKENS


def corpus_prompts(batch: int, prompt_length: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Prompts drawn from the training corpus (the trained model is confident on them), left-padded as
    ``exporters.generation.components.make_prompts`` pads: row ``i`` loses ``i * prompt_length // 3`` tokens."""
    generator = torch.Generator().manual_seed(seed)
    ids = synthetic_sequences(batch, prompt_length, vocab, generator)
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        cut = min(row * prompt_length // 3, prompt_length - 1)
        mask[row, :cut], ids[row, :cut] = 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def train(recipe: TrainingRecipe) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` trained on ``recipe``'s synthetic corpus (next-token cross-entropy, AdamW)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(recipe.seed)
    generator = torch.Generator().manual_seed(recipe.seed)
    model = LlamaForCausalLM(llama_config(recipe.hidden, recipe.layers, recipe.heads, recipe.intermediate,
                                          recipe.vocab, 4 * recipe.sequence))
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, recipe.learning_rate, total_steps=recipe.steps)
    model.train()
    for _ in range(recipe.steps):
        tokens = synthetic_sequences(recipe.batch, recipe.sequence, recipe.vocab, generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return model.eval()


def trained_llama(cache: Path, recipe: TrainingRecipe | None = None) -> Path:
    """The checkpoint directory of ``recipe``'s trained Llama under ``cache``, trained first if not there yet."""
    recipe = recipe or TrainingRecipe()
    return _cached(Path(cache) / f"trained-llama-{recipe.key()}", lambda: train(recipe), asdict(recipe))


def llama_checkpoint(cache: Path, hidden: int = 512, layers: int = 8, heads: int = 8, intermediate: int = 1376,
                     vocab: int = 8000, seed: int = 0) -> Path:
    """A random-initialised ``LlamaForCausalLM`` checkpoint of this size under ``cache`` (made once)."""
    from transformers import LlamaForCausalLM

    shape = {"hidden": hidden, "layers": layers, "heads": heads, "intermediate": intermediate, "vocab": vocab,
             "seed": seed}
    key = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]

    def build() -> torch.nn.Module:
        torch.manual_seed(seed)
        return LlamaForCausalLM(llama_config(hidden, layers, heads, intermediate, vocab, 256)).eval()

    return _cached(Path(cache) / f"llama-{hidden}x{layers}-{key}", build, shape)


def _cached(directory: Path, build: Callable[[], torch.nn.Module], recipe: dict[str, object]) -> Path:
    """``directory`` once it holds a saved model; built, saved beside it and renamed into place otherwise (so a
    process stopped halfway leaves no half-written checkpoint that a later one would take for finished)."""
    if (directory / "recipe.json").is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        build().save_pretrained(staging)
        (staging / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
        try:
            staging.rename(directory)
        except OSError:  # another process finished the same recipe first
            if not (directory / "recipe.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
