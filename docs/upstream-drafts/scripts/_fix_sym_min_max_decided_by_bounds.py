import importlib.metadata

import torch
from executorch.exir import to_edge_transform_and_lower

print("torch", torch.__version__, "executorch", importlib.metadata.version("executorch"))


class BoundedTopk(torch.nn.Module):
    def forward(self, scores):  # [batch, keys]; keep at most 2048 keys
        return scores.topk(min(2048, scores.shape[-1]), dim=-1).values


dims = {"scores": {1: torch.export.Dim.AUTO(min=2, max=128)}}
program = torch.export.export(BoundedTopk(), (), {"scores": torch.randn(2, 8)}, dynamic_shapes=dims, strict=False)
print([str(n.target) for n in program.graph.nodes if n.op == "call_function"])
try:
    to_edge_transform_and_lower(program).to_executorch()
    print("OK")
except AssertionError as error:
    import traceback
    frame = traceback.extract_tb(error.__traceback__)[-1]
    print(f"FAILED: AssertionError({str(error)!r}) at {frame.filename.split('site-packages/')[-1]}:{frame.lineno}: {frame.line}")
