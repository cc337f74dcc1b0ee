import torch
import transformers
from transformers import LongformerConfig, LongformerForQuestionAnswering

print("torch", torch.__version__, "transformers", transformers.__version__)
torch.manual_seed(0)
config = LongformerConfig(
    vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
    attention_window=4, max_position_embeddings=64, bos_token_id=0, pad_token_id=1, sep_token_id=2,
)
model = LongformerForQuestionAnswering(config).eval()
# <s> question </s></s> context </s>: exactly three separators per row, as the QA head requires
input_ids = torch.tensor([[0, 5, 6, 2, 2, 7, 8, 2], [0, 9, 2, 2, 10, 11, 12, 2]])
inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
with torch.no_grad():
    print("eager: start_logits", tuple(model(**inputs).start_logits.shape))


def summary(error):
    lines = str(error).splitlines()
    where = [line.strip() for line in lines if line.startswith("Caused by")]
    return f"{type(error).__name__}: {lines[0][:120]} | {' | '.join(where)}"


try:
    torch.export.export(model, (), kwargs=inputs)
    print("torch.export static: OK")
except Exception as error:
    print("torch.export static: FAILED:", summary(error))

# The same model with the global attention mask given: the question-end search is skipped, and the encoder's
# `if is_global_attn:` branch is next.
question = torch.arange(8) < torch.tensor([[3], [2]])
try:
    torch.export.export(model, (), kwargs={**inputs, "global_attention_mask": question.long()})
    print("torch.export static, global_attention_mask given: OK")
except Exception as error:
    print("torch.export static, global_attention_mask given: FAILED:", summary(error))
