import time

import torch
import torch.export.exported_program as exported_program
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim


class Chain(torch.nn.Module):
    """n Linear+ReLU blocks, each followed by a cumsum that XNNPACK does not take (n partitions), and g shape checks
    that the value ranges cannot decide, so each one stays a guard of the shape environment."""

    def __init__(self, n, g):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
        self.g = g

    def forward(self, x):
        for k in range(self.g):
            torch._check(x.shape[0] * x.shape[1] != 1001 + 2 * k)
        for block in self.blocks:
            x = torch.cumsum(block(x).relu(), -1)
        return x


spent = {"seconds": 0.0, "calls": 0}
original = exported_program._convert_guards_to_code


def timed(gm):
    spent["calls"] += 1
    start = time.process_time()
    try:
        return original(gm)
    finally:
        spent["seconds"] += time.process_time() - start


exported_program._convert_guards_to_code = timed
shapes = {"x": {0: Dim("a", min=2, max=64), 1: Dim("b", min=2, max=64)}}
for n, g in ((50, 400),):
    x = torch.randn(4, 6, 8)
    program = torch.export.export(Chain(n, g).eval(), (x,), dynamic_shapes=shapes)
    guards = len(exported_program._get_shape_env(program.graph_module).guards)
    spent.update(seconds=0.0, calls=0)
    start = time.process_time()
    to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    total = time.process_time() - start
    print(f"{n:3d} partitions, {guards:4d} guards: to_edge_transform_and_lower {total:6.1f} s CPU, "
          f"{spent['calls']} programs built, printing their guards {spent['seconds']:5.1f} s ({100 * spent['seconds'] / total:.0f} %)")
assert spent["calls"] <= 1, (
    f"the guards of one ShapeEnv ({guards} guards) were printed {spent['calls']} times, once per program built "
    f"(expected once): {spent['seconds']:.1f} s of {total:.1f} s")
