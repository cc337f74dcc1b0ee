import importlib.metadata

import torch
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", importlib.metadata.version("executorch"))


class EmptyThenFilled(torch.nn.Module):
    def forward(self, x):  # [batch, length]
        out = x.new_empty([x.shape[0], 2, x.shape[1]])
        out[:, 0] = x * 2
        out[:, 1] = x + 1
        return out


dims = {"x": {0: torch.export.Dim("batch", min=2, max=8), 1: torch.export.Dim("length", min=2, max=64)}}
program = torch.export.export(EmptyThenFilled(), (), {"x": torch.randn(2, 8)}, dynamic_shapes=dims)
print("exported:", [n.meta["val"].shape for n in program.graph.nodes if n.op == "placeholder"], program.range_constraints)
(exported_x_shape,) = [str(list(n.meta["val"].shape)) for n in program.graph.nodes if n.op == "placeholder"]
edge = to_edge_transform_and_lower(program)
lowered = edge.exported_program()
print("lowered: ", [n.meta["val"].shape for n in lowered.graph.nodes if n.op == "placeholder"], lowered.range_constraints)
lowered_x_shape = [n.meta["val"].shape for n in lowered.graph.nodes if n.op == "placeholder"][-1]
specialised = [f"x dim {dim}" for dim, size in enumerate(lowered_x_shape) if str(size).isdigit()]  # prints its value
assert not specialised, (f"to_edge_transform_and_lower specialised {', '.join(specialised)}, which torch.export kept "
                         f"dynamic: exported {exported_x_shape}, lowered {list(lowered_x_shape)}")
