import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime


class PadToBlocks(torch.nn.Module):
    def forward(self, x):
        return x.new_zeros(x.shape[0], -x.shape[0] % 16 + 1)  # Python: (-8) % 16 == 8, so 9 columns


x = torch.ones(8)
print("eager:", tuple(PadToBlocks()(x).shape))
program = torch.export.export(PadToBlocks(), (x,), dynamic_shapes=({0: torch.export.Dim.AUTO(min=2, max=15)},))
print([str(n.target) for n in program.graph.nodes if n.op == "call_function"])
pte = to_edge_transform_and_lower(program).to_executorch().buffer
loaded = Runtime.get().load_program(pte)
print("executorch:", tuple(loaded.load_method("forward").execute([x])[0].shape))
