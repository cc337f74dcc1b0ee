import torch
from torch.export import Dim, export
from executorch.exir import to_edge


class Chunk(torch.nn.Module):
    def forward(self, x):  # MoE experts: gate, up = gate_up.chunk(2, dim=-1) on (tokens, 2 * intermediate)
        gate, up = x.chunk(2, dim=-1)
        return gate * up


program = export(Chunk(), (torch.randn(6, 8),), dynamic_shapes={"x": {0: Dim("tokens", min=2, max=64)}})
print("torch.export input shape:", program.graph_module.graph.find_nodes(op="placeholder")[0].meta["val"].shape)
edge = to_edge(program).exported_program()
print("to_edge input shape:     ", edge.graph_module.graph.find_nodes(op="placeholder")[0].meta["val"].shape)
print("to_edge range_constraints:", edge.range_constraints)
