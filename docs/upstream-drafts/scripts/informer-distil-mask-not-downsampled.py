import torch
import transformers
from transformers import InformerConfig, InformerModel

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = InformerConfig(
    prediction_length=4, context_length=4, input_size=1, lags_sequence=[1, 2, 3, 4, 5, 6, 7], num_time_features=0,
    d_model=32, encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2,
    encoder_layers=2, decoder_layers=2, distil=True,
)
model = InformerModel(config).eval()
inputs = {  # context_length + max(lags_sequence) past steps, no time features
    "past_values": torch.randn(2, 11), "past_time_features": torch.zeros(2, 11, 0),
    "past_observed_mask": torch.ones(2, 11),
}
with torch.no_grad():
    print("eager: last_hidden_state", tuple(model(**inputs).last_hidden_state.shape))
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export: OK")
except Exception as error:
    print("torch.export: FAILED:", type(error).__name__, str(error).splitlines()[0])
