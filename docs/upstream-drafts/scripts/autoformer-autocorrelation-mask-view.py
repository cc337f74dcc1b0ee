import traceback

import torch
import transformers
from transformers import AutoformerConfig, AutoformerModel

torch.manual_seed(0)
config = AutoformerConfig(
    prediction_length=4, context_length=4, label_length=2, lags_sequence=[1, 2], num_time_features=1,
    d_model=32, encoder_attention_heads=2, decoder_attention_heads=2, encoder_layers=1, decoder_layers=1,
    encoder_ffn_dim=32, decoder_ffn_dim=32,
)
model = AutoformerModel(config).eval()
batch, past = 2, config.context_length + max(config.lags_sequence)
inputs = {
    "past_values": torch.randn(batch, past),
    "past_time_features": torch.randn(batch, past, 1),
    "past_observed_mask": torch.ones(batch, past),
    "future_values": torch.randn(batch, config.prediction_length),
    "future_time_features": torch.randn(batch, config.prediction_length, 1),
}
print("torch", torch.__version__, "transformers", transformers.__version__)
with torch.no_grad():
    print("eager, no mask:", tuple(model(**inputs).last_hidden_state.shape))

# 1. Eager, the encoder given a padding mask (as its forward documents): the mask is added through a view of
#    the (bsz * heads, tgt_len, head_dim) autocorrelation weights as (bsz, heads, tgt_len, src_len).
embeds = torch.randn(batch, config.context_length, model.encoder.value_embedding.value_projection.in_features)
mask = torch.ones(batch, config.context_length, dtype=torch.long)
mask[0, 0] = 0
try:
    with torch.no_grad():
        model.encoder(inputs_embeds=embeds, attention_mask=mask)
    print("eager encoder with a padding mask: OK")
except RuntimeError as error:
    frame = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith("modeling_autoformer.py")][-1]
    print("eager encoder with a padding mask: FAILED:", type(error).__name__, error)
    print(f"  at modeling_autoformer.py:{frame.lineno}: {frame.line}")

# 2. torch.export of the whole model with no mask at all: under export, create_bidirectional_mask builds the
#    full (bsz, 1, tgt_len, src_len) mask instead of returning None, and the same view fails.
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export: OK")
except Exception as error:
    print("torch.export: FAILED:", type(error).__name__, str(error).splitlines()[0])
