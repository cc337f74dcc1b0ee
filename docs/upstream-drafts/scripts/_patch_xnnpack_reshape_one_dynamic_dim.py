import torch
from torch.export import Dim, export
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower


class Unsqueeze(torch.nn.Module):
    def forward(self, x):  # rotary-embedding style: (batch, seq, dim) -> (batch, seq, dim, 1)
        return (x * 2).unsqueeze(-1)


class Conv1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):  # (batch, channels, length)
        return self.conv(x)


batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=64)
for name, model, x, shapes in [
    ("unsqueeze_copy", Unsqueeze(), torch.randn(2, 8, 4), {"x": {0: batch, 1: seq}}),
    ("conv1d", Conv1d(), torch.randn(2, 4, 8), {"x": {0: batch, 2: seq}}),
]:
    program = export(model.eval(), (x,), dynamic_shapes=shapes)
    try:
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
        print(name, "OK")
    except Exception as error:
        print(name, "FAILED:", type(error).__name__, str(error).splitlines()[0][:200])
