import torch
from executorch.exir import to_edge_transform_and_lower


class CheckedGrid(torch.nn.Module):
    def forward(self, pixel_values, spatial_shapes):
        height, width = spatial_shapes[0].tolist()
        torch._check(height > 0)
        torch._check(width > 0)
        torch._check(height * width <= pixel_values.shape[1])  # as Siglip2 checks its resized position grid
        grid = torch.arange(height * width, dtype=pixel_values.dtype).reshape(height, width)
        return pixel_values[:, : height * width].sum() + grid.sum(0).sum()


program = torch.export.export(CheckedGrid(), (torch.randn(2, 16), torch.tensor([[2, 3]])))
to_edge_transform_and_lower(program).to_executorch()
print("OK")
