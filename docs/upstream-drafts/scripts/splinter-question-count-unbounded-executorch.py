import functools
import time
from importlib.metadata import version

import torch
import transformers
import executorch.exir.passes.replace_view_copy_with_view_pass as view_pass
import executorch.exir.tensor as et_tensor
import executorch.exir.tensor_layout as et_layout
from executorch.exir import to_edge_transform_and_lower
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, guard_or_false, guard_or_true
from transformers import SplinterConfig, SplinterForPreTraining

print("torch", torch.__version__, "transformers", transformers.__version__, "executorch", version("executorch"))
torch.manual_seed(0)
config = SplinterConfig(
    vocab_size=256, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=64, question_token_id=104,
)
model = SplinterForPreTraining(config).eval()
input_ids = torch.tensor([[101, 104, 7, 104, 9, 10, 11, 102], [101, 104, 12, 13, 14, 15, 16, 102]])  # 2 and 1 questions
inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
with torch.no_grad():
    eager = model(**inputs)
print("eager: start_logits", tuple(eager.start_logits.shape))


def first_line(error):
    text = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {text[0][:160] if text else ''}"


def lower(label):
    start = time.time()
    try:
        program = torch.export.export(model, (), kwargs=inputs, strict=False)
    except Exception as error:
        print(f"{label}: torch.export FAILED: {first_line(error)}")
        return
    try:
        to_edge_transform_and_lower(program).to_executorch()
        print(f"{label}: to_executorch OK ({time.time() - start:.0f} s)")
    except Exception as error:
        print(f"{label}: to_executorch FAILED ({time.time() - start:.0f} s): {first_line(error)}")


# 1. The whole model, stock ExecuTorch: stops before memory planning, on aten.bincount (not Core ATen).
lower("whole model, stock executorch")


# 2. The same method with bincount / searchsorted written in Core ATen ops (same values: rows is sorted and every
#    row has a question, which the method checks), and the width still `num_questions.max()`.
def prepare_question_positions(self, input_ids, bound=False):
    rows, flat_positions = torch.where(input_ids == self.config.question_token_id)
    batch = torch.arange(input_ids.size(0), device=input_ids.device)
    num_questions = (rows.unsqueeze(0) == batch.unsqueeze(1)).sum(1)  # bincount(rows)
    first_idx = (rows.unsqueeze(0) < rows.unsqueeze(1)).sum(1)  # searchsorted(rows, rows, side="left")
    cols = torch.arange(rows.size(0), device=rows.device) - first_idx
    width = num_questions.max()
    if bound:  # the proposed fix: a row cannot hold more questions than it has tokens
        width = width.item()
        torch._check(width <= input_ids.size(1))
    positions = torch.full((input_ids.size(0), width), self.config.pad_token_id, dtype=torch.long,
                           device=input_ids.device)
    positions[rows, cols] = flat_positions
    return positions


SplinterForPreTraining._prepare_question_positions = prepare_question_positions
with torch.no_grad():
    print("core-ATen count: eager unchanged:", torch.equal(model(**inputs).start_logits, eager.start_logits))
lower("core-ATen count, stock executorch")

# ExecuTorch's dim_order_from_stride guards on the unbacked size of the nonzero result (a separate ExecuTorch bug);
# order the strides by divisibility instead, as torch does, so that the lowering reaches memory planning.
original_dim_order = et_tensor.dim_order_from_stride


def dim_order_by_multiples(stride):
    """Dims by decreasing stride, ties in dim order: a pair is ordered when it is known, or when one stride is a
    multiple of the other (a multiple of a positive stride is never the smaller one, as torch orders strides)."""

    def compare(i, j):
        a, b = stride[i], stride[j]
        if guard_or_false(a < b) or (guard_or_false(b % a == 0) and guard_or_true(a != b)):
            return -1
        if guard_or_false(a >= b) or guard_or_false(a % b == 0):
            return 1
        raise ValueError(f"cannot order the strides {a} and {b}")

    return tuple(sorted(range(len(stride)), key=functools.cmp_to_key(compare), reverse=True))


def dim_order_from_stride(stride):
    try:
        return original_dim_order(stride)
    except GuardOnDataDependentSymNode:
        return dim_order_by_multiples(stride)


for module in (et_tensor, et_layout, view_pass):
    module.dim_order_from_stride = dim_order_from_stride
lower("core-ATen count, with the dim-order patch")

# 3. The width bounded by the sequence length.
SplinterForPreTraining._prepare_question_positions = lambda self, ids: prepare_question_positions(self, ids, True)
with torch.no_grad():
    print("bounded width: eager unchanged:", torch.equal(model(**inputs).start_logits, eager.start_logits))
lower("bounded width, with the dim-order patch")
