import copy
import importlib.metadata

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
from torchao.quantization.granularity import PerGroup

print("torch", torch.__version__, "executorch", importlib.metadata.version("executorch"),
      "torchao", importlib.metadata.version("torchao"))
torch.manual_seed(0)
linear = torch.nn.Sequential(torch.nn.Linear(64, 128)).eval()
x = torch.randn(2, 8, 64)
diffs = {}
for scale_dtype in (None, torch.bfloat16):
    model = copy.deepcopy(linear)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(32), weight_scale_dtype=scale_dtype))
    program = to_edge_transform_and_lower(torch.export.export(model, (x,)),
                                          partitioner=[XnnpackPartitioner()]).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with torch.no_grad():
        eager = model(x)
    diffs[scale_dtype] = (method.execute([x])[0] - eager).abs().max().item()
    print(f"weight_scale_dtype={scale_dtype}: max |pte - eager| = {diffs[scale_dtype]:.3g} "
          f"(eager max |y| {eager.abs().max():.3g})")
assert diffs[None] < 1e-5, (f"the XNNPACK .pte differs from the eager quantized model by {diffs[None]:.3g} with float32 "
                            f"group scales ({diffs[torch.bfloat16]:.3g} once the scales are bf16)")
