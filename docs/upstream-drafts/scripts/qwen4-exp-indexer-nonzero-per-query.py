import torch
import transformers
from transformers import Qwen4ExpTextConfig, Qwen4ExpTextModel

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = Qwen4ExpTextConfig(  # tiny: 3 linear-attention layers and one indexed (QSA) attention layer
    vocab_size=256, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    max_position_embeddings=128, initializer_range=0.1, tie_word_embeddings=False, pad_token_id=1,
    rope_parameters={"rope_theta": 10000.0, "rope_type": "default", "mrope_section": [1, 1, 2]},
    linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=16,
    linear_num_value_heads=32, moe_intermediate_size=64, shared_expert_intermediate_size=64, num_experts_per_tok=2,
    num_experts=4, layer_types=["linear_attention", "linear_attention", "linear_attention", "indexed_attention"],
    hc_count=4, hc_lowrank=320, ple_layer_ids=[], ple_embed_dim=32, ple_conv_kernel_size=4, ngram_size=3,
    heads_per_ngram=8, ngram_vocab_size_base=20000000, make_ngram_vocab_size_divisible_by=128, split_ngram_parts=512,
    indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=4, indexer_compress_ratio=2,
)
model = Qwen4ExpTextModel(config).eval()
input_ids = torch.randint(2, 256, (2, 8))
inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
with torch.no_grad():
    print("eager: last_hidden_state", tuple(model(**inputs).last_hidden_state.shape))
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export: OK")
except Exception as error:
    lines = str(error).splitlines()
    where = [line.strip() for line in lines if line.startswith("Caused by")]
    print("torch.export: FAILED:", type(error).__name__, lines[0][:100], "|", " | ".join(where))
