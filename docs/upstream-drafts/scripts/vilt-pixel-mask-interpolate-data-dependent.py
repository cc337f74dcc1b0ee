import torch
import transformers
from transformers import ViltConfig, ViltModel

torch.manual_seed(0)
config = ViltConfig(
    vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
    image_size=32, patch_size=8, max_image_length=-1, max_position_embeddings=16,
)
model = ViltModel(config).eval()
inputs = {
    "input_ids": torch.randint(3, 64, (2, 8)),
    "attention_mask": torch.ones(2, 8, dtype=torch.long),
    "pixel_values": torch.randn(2, 3, 32, 32),
    "pixel_mask": torch.ones(2, 32, 32, dtype=torch.long),  # no padding at all
}
print("torch", torch.__version__, "transformers", transformers.__version__)
with torch.no_grad():
    print("eager:", tuple(model(**inputs).last_hidden_state.shape))
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export: OK")
except Exception as error:
    lines = str(error).splitlines()
    where = [line.strip() for line in lines if line.startswith("Caused by") or "modeling_vilt.py" in line]
    print("torch.export: FAILED:", f"{type(error).__name__}: {lines[0]} | {' | '.join(where)}")
