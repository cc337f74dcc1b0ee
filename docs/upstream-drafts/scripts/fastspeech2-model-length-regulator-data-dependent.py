import torch
import transformers
from transformers import FastSpeech2ConformerConfig, FastSpeech2ConformerModel

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = FastSpeech2ConformerConfig(
    hidden_size=32, vocab_size=78, num_mel_bins=16, encoder_num_attention_heads=2, encoder_layers=2,
    decoder_layers=2, decoder_num_attention_heads=2, max_source_positions=16,
)
model = FastSpeech2ConformerModel(config).eval()
input_ids = torch.randint(0, 78, (2, 8))
inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
with torch.no_grad():
    print("eager: spectrogram", tuple(model(**inputs, return_dict=True).spectrogram.shape))
try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export: OK")
except Exception as error:
    lines = str(error).splitlines()
    where = [line.strip() for line in lines if line.strip().startswith("File ") or line.startswith("    if ")]
    print("torch.export: FAILED:", type(error).__name__, lines[0][:100], "|", " | ".join(where[-2:]))
