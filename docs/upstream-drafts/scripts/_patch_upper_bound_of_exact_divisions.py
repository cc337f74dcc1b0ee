from importlib.metadata import version

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch.export import Dim

print("torch", torch.__version__, "executorch", version("executorch"))


class RelativeShift(torch.nn.Module):  # XLNet's rel_shift_bnij on [batch, heads, sequence, 2 * sequence] scores
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, input_ids):
        q = self.embed(input_ids).reshape(input_ids.shape[0], input_ids.shape[1], 2, 4)
        scores = torch.einsum("bind,bjnd->bnij", q, torch.cat([q, q.flip(1)], dim=1))
        size = scores.shape
        shifted = scores.reshape(size[0], size[1], size[3], size[2])[:, :, 1:, :]
        shifted = shifted.reshape(size[0], size[1], size[2], size[3] - 1)
        return torch.index_select(shifted, 3, torch.arange(input_ids.shape[1]))


ids = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(5))
dims = {"input_ids": {0: Dim.AUTO(min=2, max=8), 1: Dim.AUTO(min=2, max=128)}}
program = torch.export.export(RelativeShift().eval(), (), {"input_ids": ids}, dynamic_shapes=dims, strict=False)
sizes = [str(n.meta["val"].shape) for n in program.graph.nodes if "//" in str(getattr(n.meta.get("val"), "shape", ""))]
print("sizes with a floor division:", sizes[:2])
lowered = to_edge_transform_and_lower(program).to_executorch()  # portable kernels only
print("planned arena bytes:", lowered.executorch_program.execution_plan[0].non_const_buffer_sizes)
try:
    Runtime.get().load_program(lowered.buffer).load_method("forward")
    print("loaded")
except RuntimeError as error:
    print("RuntimeError:", error)
