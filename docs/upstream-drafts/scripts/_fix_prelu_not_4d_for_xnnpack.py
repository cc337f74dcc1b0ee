from importlib.metadata import version

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", version("executorch"))
x = torch.randn(2, 5, 6)
try:
    to_edge_transform_and_lower(torch.export.export(torch.nn.PReLU().eval(), (x,)), partitioner=[XnnpackPartitioner()])
    print("lowered")
except Exception as error:
    print(type(error).__name__ + ":", error)
    print("caused by", type(error.__cause__).__name__ + ":", error.__cause__)
