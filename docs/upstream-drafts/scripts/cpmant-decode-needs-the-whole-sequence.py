import torch
import transformers
from transformers import CpmAntConfig, CpmAntForCausalLM

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = CpmAntConfig(
    vocab_size=256, hidden_size=32, num_attention_heads=4, dim_head=8, dim_ff=64, num_hidden_layers=2,
    prompt_types=32, prompt_length=32, segment_types=32, init_std=0.1,
)
model = CpmAntForCausalLM(config).eval()
ids = torch.randint(3, 256, (2, 8))
with torch.no_grad():
    prefill = model(input_ids=ids, use_cache=True)
    step = prefill.logits[:, -1].argmax(-1, keepdim=True)
    full = model(input_ids=torch.cat([ids, step], 1), past_key_values=prefill.past_key_values, use_cache=True)
    print("decode step with the whole sequence: logits", tuple(full.logits.shape))
    prefill = model(input_ids=ids, use_cache=True)
    try:
        model(input_ids=step, past_key_values=prefill.past_key_values, use_cache=True)
        print("decode step with only the new token: OK")
    except Exception as error:
        print("decode step with only the new token: FAILED:", type(error).__name__, str(error).splitlines()[0])
