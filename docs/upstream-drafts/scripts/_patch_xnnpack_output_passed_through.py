import torch
from importlib.metadata import version
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", version("executorch"))


class ReturnsAClone(torch.nn.Module):
    def forward(self, x):
        y = torch.cat([x, x * 2], dim=1).permute(0, 2, 1)
        return y, y.clone()


x = torch.randn(2, 3, 4)
try:
    to_edge_transform_and_lower(torch.export.export(ReturnsAClone(), (x,)), partitioner=[XnnpackPartitioner()])
    print("lowered")
except RuntimeError as error:
    print("RuntimeError:", error)
