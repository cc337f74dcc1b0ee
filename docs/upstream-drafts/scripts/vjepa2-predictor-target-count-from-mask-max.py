import functools
import importlib.metadata
import time
import torch
import transformers
import executorch
import executorch.exir.passes.replace_view_copy_with_view_pass as view_pass
import executorch.exir.tensor as et_tensor
import executorch.exir.tensor_layout as et_layout
from executorch.exir import to_edge_transform_and_lower
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, guard_or_false, guard_or_true
from transformers import VJEPA2Config, VJEPA2Model
from transformers.models.vjepa2 import modeling_vjepa2

print("torch", torch.__version__, "transformers", transformers.__version__, "executorch", importlib.metadata.version("executorch"))
torch.manual_seed(0)
config = VJEPA2Config(
    patch_size=16, crop_size=32, frames_per_clip=4, tubelet_size=2, hidden_size=32, num_attention_heads=4,
    num_hidden_layers=1, mlp_ratio=2.0, num_pooler_layers=1, pred_hidden_size=32, pred_num_attention_heads=4,
    pred_num_hidden_layers=1, pred_num_mask_tokens=2, pred_mlp_ratio=2.0,
)
model = VJEPA2Model(config).eval()
inputs = {"pixel_values_videos": torch.randn(1, 4, 3, 32, 32)}  # 2 x 2 x 2 = 8 patches; masks default to arange(8)
with torch.no_grad():
    eager = model(**inputs)
print("eager: predictor last_hidden_state", tuple(eager.predictor_output.last_hidden_state.shape))


def first_line(error):
    return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"


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


lower("stock executorch")

# ExecuTorch's own dim_order_from_stride guards on the unbacked size first (a separate ExecuTorch bug); order
# the strides by divisibility instead, the way torch orders them, so that the lowering reaches memory planning.
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
lower("with the dim-order patch")

# The count taken from the mask's shape: gathering rows of a repeated mask token gives the mask token, so the
# target tokens are the mask token expanded to each target mask's shape, with no size read from mask values.
original_forward = modeling_vjepa2.VJEPA2PredictorEmbeddings.forward


def forward(self, hidden_states, context_mask, target_mask, mask_index=1):
    B = hidden_states.size(0)
    context = self.predictor_embeddings(hidden_states)
    target = self.mask_tokens[mask_index % self.num_mask_tokens]  # [1, 1, D]
    target = torch.cat([target.expand(m.size(0), m.size(1), -1) for m in target_mask], dim=0)
    context = context.repeat(len(context_mask), 1, 1)
    embeddings = torch.cat([context, target], dim=1)
    masks = torch.cat([torch.cat(context_mask, dim=0), torch.cat(target_mask, dim=0)], dim=1)
    return embeddings, masks


modeling_vjepa2.VJEPA2PredictorEmbeddings.forward = forward
with torch.no_grad():
    after = model(**inputs)
print("count from the mask's shape: eager unchanged:",
      torch.equal(eager.predictor_output.last_hidden_state, after.predictor_output.last_hidden_state))
lower("count from the mask's shape (dim-order patch still on)")
