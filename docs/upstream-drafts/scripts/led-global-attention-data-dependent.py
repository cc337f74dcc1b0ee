import torch
import transformers
from transformers import LEDConfig, LEDModel

torch.manual_seed(0)
config = LEDConfig(
    vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
    decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, attention_window=[4],
    max_encoder_position_embeddings=64, max_decoder_position_embeddings=64,
)
model = LEDModel(config).eval()
inputs = {
    "input_ids": torch.randint(3, 64, (2, 8)),
    "attention_mask": torch.ones(2, 8, dtype=torch.long),
    "decoder_input_ids": torch.randint(3, 64, (2, 4)),
}
print("torch", torch.__version__, "transformers", transformers.__version__)
with torch.no_grad():
    print("eager:", tuple(model(**inputs).last_hidden_state.shape))


def first_line(error):
    lines = str(error).splitlines()
    caused = [line.strip() for line in lines if line.startswith("Caused by") or "modeling_led.py" in line]
    return f"{type(error).__name__}: {lines[0]} | {' | '.join(caused)}"


# Static shapes: the encoder branches on whether any token has global attention.
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export static: OK")
except Exception as error:
    print("torch.export static: FAILED:", first_line(error))

# Dynamic sequence length: _chunk computes the chunk count with torch.div on a size.
seq = torch.export.Dim("seq", min=2, max=32)
try:
    torch.export.export(model, (), kwargs=inputs, dynamic_shapes={
        "input_ids": {1: 4 * seq}, "attention_mask": {1: 4 * seq}, "decoder_input_ids": None})
    print("torch.export dynamic: OK")
except Exception as error:
    print("torch.export dynamic: FAILED:", first_line(error))
