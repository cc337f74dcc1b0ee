from importlib.metadata import version

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

print("torch", torch.__version__, "executorch", version("executorch"))


class Columns(torch.nn.Module):
    def forward(self, x):
        idx = (x > 0).nonzero()
        copied = idx.clone(memory_format=torch.contiguous_format)
        return idx[:, 0] * 10 + idx[:, 1], copied[:, 1] * 10 + copied[:, 0]


x = torch.randn(5, 7, generator=torch.Generator().manual_seed(4))
print("nonzero strides in eager:", (x > 0).nonzero().stride())
for name, model in [("columns", Columns())]:
    program = to_edge_transform_and_lower(torch.export.export(model, (x,))).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    try:
        got = method.execute([x])
        print("ran; equal to eager:", [torch.equal(g, w) for g, w in zip(got, model(x))])
    except RuntimeError as error:
        print("RuntimeError:", error)


class CopyOnly(torch.nn.Module):
    def forward(self, x):
        idx = (x > 0).nonzero().clone(memory_format=torch.contiguous_format)
        return idx[:, 1] * 10 + idx[:, 0]


program = to_edge_transform_and_lower(torch.export.export(CopyOnly(), (x,))).to_executorch()
(got,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x])
want = CopyOnly()(x)
print("contiguous copy first:", int((got != want).sum()), "of", want.numel(), "elements off")
