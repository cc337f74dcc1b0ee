import torch
import transformers
from transformers import GitConfig, GitForCausalLM

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = GitConfig(
    vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "image_size": 32, "patch_size": 8},
    vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=128, initializer_range=0.1, pad_token_id=0, bos_token_id=101, eos_token_id=102,
    tie_word_embeddings=False,
)
model = GitForCausalLM(config).eval()
# A text-only, left-padded batch: row 1 has 3 pad slots. Only the ids under those pad slots differ between runs.
ids = torch.randint(3, 256, (2, 8))
mask = torch.ones_like(ids)
mask[1, :3] = 0
outputs = []
for pad_ids in ([0, 0, 0], [7, 8, 9]):
    run = ids.clone()
    run[1, :3] = torch.tensor(pad_ids)
    with torch.no_grad():
        out = model.generate(input_ids=run, attention_mask=mask, max_new_tokens=8, do_sample=False,
                             pad_token_id=0, eos_token_id=None, return_dict_in_generate=True, output_logits=True)
    outputs.append(torch.stack(out.logits, 1))  # [batch, step, vocab]
    print("pad ids", pad_ids, "new tokens row 1", out.sequences[1, 8:].tolist())
diff = (outputs[0] - outputs[1]).abs().amax(-1)  # [batch, step]
print("max |logits difference| per step, row 0:", [round(v, 4) for v in diff[0].tolist()])
print("max |logits difference| per step, row 1:", [round(v, 4) for v in diff[1].tolist()])
# The bug: the prefill (step 0) and the unpadded row ignore the pad ids, row 1's decode steps do not.
assert diff[0].max() == 0 and diff[1, 0] == 0, "the prefill or the unpadded row already depends on the pad ids"
changed = (diff[1] > 1e-4).nonzero().flatten().tolist()
if changed:
    raise AssertionError(f"the ids under masked pad slots change row 1's logits from decode step {changed[0]} on "
                         f"(steps {changed}): the decode-step mask attends the pad slots")
print("row 1's logits do not depend on the pad ids: OK")
