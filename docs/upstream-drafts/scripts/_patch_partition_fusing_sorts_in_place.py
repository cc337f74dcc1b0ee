import time

import torch
import executorch.exir.lowered_backend_module as lowered_backend_module
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower


class Chain(torch.nn.Module):
    """n Linear+ReLU blocks, each followed by a cumsum that XNNPACK does not take: n delegated partitions."""

    def __init__(self, n):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))

    def forward(self, x):
        for block in self.blocks:
            x = torch.cumsum(block(x).relu(), -1)
        return x


spent = {"seconds": 0.0, "calls": 0, "nodes": 0}
original = lowered_backend_module.legalize_graph


def timed_legalize_graph(gm):
    spent["calls"] += 1
    spent["nodes"] += len(gm.graph.nodes)
    start = time.process_time()
    try:
        return original(gm)
    finally:
        spent["seconds"] += time.process_time() - start


lowered_backend_module.legalize_graph = timed_legalize_graph
to_edge_transform_and_lower(torch.export.export(Chain(1).eval(), (torch.randn(2, 8),)),
                            partitioner=[XnnpackPartitioner()])  # warm-up: pattern graphs, imports
for n in (50, 100, 200):
    spent.update(seconds=0.0, calls=0, nodes=0)
    program = torch.export.export(Chain(n).eval(), (torch.randn(2, 8),))
    start = time.process_time()
    to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    total = time.process_time() - start
    print(f"{n:4d} blocks: to_edge_transform_and_lower {total:6.1f} s CPU, legalize_graph {spent['seconds']:5.1f} s "
          f"({100 * spent['seconds'] / total:.0f} %) in {spent['calls']} calls copying {spent['nodes']} nodes")
