import importlib.metadata

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

print("torch", torch.__version__, "executorch", importlib.metadata.version("executorch"))


class SinkSoftmax(torch.nn.Module):  # GPT-OSS's attention-sink softmax, reduced
    def logits(self, x):
        return x - x.max(dim=3, keepdim=True).values

    def forward(self, x):
        return torch.softmax(self.logits(x), dim=-1)


class ConvSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def logits(self, x):
        return self.conv(x)

    def forward(self, x):
        return torch.softmax(self.logits(x), dim=-1)


torch.manual_seed(0)
x = torch.randn(2, 4, 8, 8)
wrong = []
for model in (SinkSoftmax().eval(), ConvSoftmax().eval()):
    lowered = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    buffer = lowered.to_executorch().buffer  # the program and its buffer must outlive the method
    program = Runtime.get().load_program(buffer)
    (out,) = program.load_method("forward").execute([x])
    with torch.no_grad():
        off = (out - model(x)).abs().max().item()
        print(type(model).__name__, "| vs eager:", f"{off:.3g}",
              "| vs softmax over dim 1:", f"{(out - torch.softmax(model.logits(x), dim=1)).abs().max().item():.3g}")
    if off > 1e-5:
        wrong.append(f"{type(model).__name__} off by {off:.3g}")
assert not wrong, f"XNNPACK softmax(dim=-1) differs from eager (expected within 1e-05): {', '.join(wrong)}"
