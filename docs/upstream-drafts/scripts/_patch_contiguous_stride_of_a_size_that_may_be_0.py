import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim


class RemainderTail(torch.nn.Module):
    """Whole groups of 4 positions, and the `length mod 4` tail after them (empty at the sample length 8)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 16)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        whole = 4 * (x.shape[1] // 4)
        return x[:, :whole].sum(1), x[:, whole:].cumsum(1)


program = torch.export.export(
    RemainderTail().eval(), (torch.randint(0, 16, (2, 8)),),
    dynamic_shapes={"input_ids": {0: Dim.AUTO(min=1, max=8), 1: Dim.AUTO(min=1, max=128)}},
)
edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
try:
    edge.to_executorch()
    print("to_executorch: ok")
except RuntimeError as error:
    print("to_executorch:", error)
