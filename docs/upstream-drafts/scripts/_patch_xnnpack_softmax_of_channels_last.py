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
for model in (SinkSoftmax().eval(), ConvSoftmax().eval()):
    lowered = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    (out,) = Runtime.get().load_program(lowered.to_executorch().buffer).load_method("forward").execute([x])
    with torch.no_grad():
        print(type(model).__name__,
              "| vs eager:", f"{(out - model(x)).abs().max().item():.3g}",
              "| vs softmax over dim 1:", f"{(out - torch.softmax(model.logits(x), dim=1)).abs().max().item():.3g}")
