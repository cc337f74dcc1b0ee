from importlib.metadata import version

import torch
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", version("executorch"))


class CountedGrid(torch.nn.Module):
    """A [2, rows, cols] tensor whose rows and cols are counts read from the inputs (data-dependent sizes), as
    Siglip2's patch grid read from its spatial shapes: contiguous strides (rows*cols, cols, 1). cols >= 2 is
    known, so ordering cols against 1 is decided; rows*cols against cols is not."""

    def forward(self, x, y):
        rows, cols = (x > 0).sum().item(), (y > 0).sum().item()
        torch._check(cols >= 2)  # at least 2 patches a row
        torch._check(rows <= x.numel())
        torch._check(cols <= y.numel())
        return x.new_ones(2, rows, cols) * 2


x, y = torch.randn(4, 5, generator=torch.Generator().manual_seed(3)), torch.randn(6, generator=torch.Generator().manual_seed(4))
program = torch.export.export(CountedGrid(), (x, y))
print("exported; output strides:", program.graph_module.graph.output_node().args[0][0].meta["val"].stride())
try:
    to_edge_transform_and_lower(program).to_executorch()
    print("lowered")
except Exception as error:
    lines = str(error).splitlines()
    print(type(error).__name__ + ":", lines[0], "|", " | ".join(line for line in lines if line.startswith("Caused by")))
