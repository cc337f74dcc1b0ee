from importlib.metadata import version

import torch
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", version("executorch"))


class WhereRows(torch.nn.Module):
    def forward(self, x):
        return torch.stack(torch.where(x > 0)) * 2  # [2, count], strides (count, 1)


x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
program = torch.export.export(WhereRows(), (x,))
print("exported; output strides:", program.graph_module.graph.output_node().args[0][0].meta["val"].stride())
try:
    to_edge_transform_and_lower(program).to_executorch()
    print("lowered")
except Exception as error:
    print(type(error).__name__ + ":", str(error).splitlines()[0])
