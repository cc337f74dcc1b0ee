import importlib.metadata

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", importlib.metadata.version("executorch"))


class MaxDim(torch.nn.Module):
    def __init__(self, dim, keepdim):
        super().__init__()
        self.dim, self.keepdim = dim, keepdim

    def forward(self, x):  # 4-D float input, only the values used
        return x.max(dim=self.dim, keepdim=self.keepdim).values


for dim, keepdim in [(3, True), (3, False), (-1, True), (1, True), (1, False)]:
    program = torch.export.export(MaxDim(dim, keepdim).eval(), (torch.randn(2, 3, 4, 5),))
    try:
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
        print(f"dim={dim} keepdim={keepdim}: OK")
    except Exception as error:
        print(f"dim={dim} keepdim={keepdim}: FAILED:", type(error).__name__, str(error).splitlines()[0][:120])
