import torch
import transformers
from transformers import EncodecConfig, EncodecModel, MimiConfig, MimiModel

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)


def summary(error):
    lines = str(error).splitlines()
    where = [line.strip() for line in lines if line.startswith("Caused by") or (line.strip().startswith("File") and "modeling_" in line)]
    return f"{type(error).__name__}: {lines[0][:200]} | {' | '.join(where)}"


encodec = EncodecModel(EncodecConfig(
    hidden_size=32, num_filters=32, upsampling_ratios=[8, 5, 4, 2], num_lstm_layers=1, codebook_size=64,
    codebook_dim=32,  # pad_mode="reflect" and use_causal_conv=True are the defaults
)).eval()
mimi = MimiModel(MimiConfig(
    hidden_size=32, num_filters=16, upsampling_ratios=[8, 6, 5, 4], codebook_size=64, codebook_dim=32,
    vector_quantization_hidden_dimension=32, num_quantizers=2, upsample_groups=32, num_hidden_layers=1,
    intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
)).eval()
for name, model in (("EncodecModel", encodec), ("MimiModel", mimi)):
    audio = torch.randn(2, 1, 1920)
    with torch.no_grad():
        out = model(input_values=audio)
    print(name, "eager: audio_values", tuple(out.audio_values.shape))
    for conv in (m for m in model.modules() if hasattr(m, "padding_total")):
        print(name, "padding_total is a", type(conv.padding_total).__name__, "buffer:",
              any(b is conv.padding_total for b in conv.buffers(recurse=False)))
        break
    try:
        torch.export.export(model, (), kwargs={"input_values": audio})
        print(name, "torch.export static: OK")
    except Exception as error:
        print(name, "torch.export static: FAILED:", summary(error))


# The same models with the conv sizes as Python ints (what the original EnCodec code does): both export.
def as_python_ints(model):
    for conv in [m for m in model.modules() if hasattr(m, "padding_total")]:
        for name in ("stride", "kernel_size", "padding_total", "padding_left", "padding_right"):
            value = getattr(conv, name, None)
            if isinstance(value, torch.Tensor):
                conv._buffers.pop(name, None)
                conv.__dict__.pop(name, None)
                setattr(conv, name, int(value))
        conv._get_extra_padding_for_conv1d = extra_padding.__get__(conv)


def extra_padding(self, hidden_states):
    length = hidden_states.shape[-1]
    n_frames = -(-(length - self.kernel_size + self.padding_total) // self.stride)  # ceil((L - K + P) / S)
    return n_frames * self.stride + self.kernel_size - self.padding_total - length


for name, model in (("EncodecModel", encodec), ("MimiModel", mimi)):
    audio = torch.randn(2, 1, 1920)
    with torch.no_grad():
        before = model(input_values=audio).audio_values
        as_python_ints(model)
        after = model(input_values=audio).audio_values
    print(name, "with int sizes: eager unchanged:", torch.equal(before, after))
    try:
        program = torch.export.export(model, (), kwargs={"input_values": audio})
        same = torch.allclose(program.module()(input_values=audio).audio_values, after, atol=1e-5)
        print(name, "with int sizes: torch.export static: OK; matches eager:", same)
    except Exception as error:
        print(name, "with int sizes: torch.export static: FAILED:", summary(error))
