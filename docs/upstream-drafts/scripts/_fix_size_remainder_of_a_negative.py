import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime


class PadToBlocks(torch.nn.Module):
    """LongT5's _pad_to_multiple then its block split (modeling_longt5.py:91): pad to a multiple of 16, one
    block per 16 positions, the block length as the padded length over the block count."""

    def forward(self, x):
        padded = x.shape[0] + (-x.shape[0] % 16)  # Python: 8 + (-8) % 16 == 16
        blocks = padded // 16  # 1
        return x.new_zeros(blocks, padded // blocks)  # (1, 16)


x = torch.ones(8)
print("eager:", tuple(PadToBlocks()(x).shape), flush=True)
program = torch.export.export(PadToBlocks(), (x,), dynamic_shapes=({0: torch.export.Dim.AUTO(min=2, max=15)},))
print([str(n.target) for n in program.graph.nodes if n.op == "call_function"], flush=True)
pte = to_edge_transform_and_lower(program).to_executorch().buffer
loaded = Runtime.get().load_program(pte)
print("executorch:", tuple(loaded.load_method("forward").execute([x])[0].shape), flush=True)
