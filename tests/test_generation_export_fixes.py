"""Fast checks of the generation export's own fixes (no export, no model build unless stated).

Each test fails without the fix it names; the slow end-to-end evidence is the sweep re-run
(``sweeps/generation/onnx-export.rerun.jsonl``).
"""

from __future__ import annotations

import torch

from exporters.generation_loop import run_generation

VOCAB = 8


def _components(favourite: int):
    """A decoder-only prefill/decode pair whose logits always prefer ``favourite``, then token 5."""

    def step(**inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = inputs["input_ids"].shape[0]
        logits = torch.zeros(batch, VOCAB)
        logits[:, favourite], logits[:, 5] = 2.0, 1.0
        return {"logits": logits, "present_key_0": torch.zeros(batch, 1, 1, 2),
                "present_value_0": torch.zeros(batch, 1, 1, 2)}

    return {"prefill": step, "decode": step}


def test_min_new_tokens_skips_eos_ids_outside_the_vocabulary():
    # GLM's config lists eos ids 151329.. that a small-vocabulary model cannot emit; masking them must not
    # index past the logits (IndexError before), and the in-vocabulary EOS must still be masked.
    layout = {"kind": "decoder-only", "eos_token_id": [2, 151329], "pad_token_id": 0}
    prompt = {"input_ids": torch.tensor([[3, 4]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)}
    out = run_generation(_components(favourite=2), layout, prompt, max_new_tokens=3, min_new_tokens=2)
    assert out.tokens.tolist() == [[5, 5, 2]]
