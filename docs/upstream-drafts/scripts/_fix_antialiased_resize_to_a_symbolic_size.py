import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime


class ResizeTo(torch.nn.Module):
    def forward(self, x, width):
        width = width.item()  # a size read from a tensor, as Siglip2 reads its position grid
        torch._check(width >= 1)
        torch._check(width <= 8)
        return torch.nn.functional.interpolate(x, size=(3, width), mode="bilinear", antialias=True)


x, width = torch.randn(1, 2, 4, 4), torch.tensor(5)
print("eager:", tuple(ResizeTo()(x, width).shape))
pte = to_edge_transform_and_lower(torch.export.export(ResizeTo(), (x, width))).to_executorch().buffer
program = Runtime.get().load_program(pte)
print("executorch:", tuple(program.load_method("forward").execute([x, width])[0].shape))
