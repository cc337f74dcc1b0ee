import torch
from executorch.exir import to_edge_transform_and_lower


class EmptyLatentCache(torch.nn.Module):
    def forward(self, x):
        latent = x[..., :0].unsqueeze(1)  # [batch, 1, sequence, 0]
        return x * 2, torch.cat([latent, latent], dim=2)


x = torch.randn(2, 8, 4)
dims = ({0: torch.export.Dim.AUTO(min=1, max=8), 1: torch.export.Dim.AUTO(min=1, max=128)},)
program = torch.export.export(EmptyLatentCache(), (x,), dynamic_shapes=dims)
edge = to_edge_transform_and_lower(program)
edge.to_executorch()
print("OK")
