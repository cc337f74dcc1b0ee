import tempfile
from pathlib import Path

import onnxruntime as ort
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x.squeeze((1, 2))  # torch: a no-op, neither dim 1 (4) nor dim 2 (8) has size 1


x = torch.randn(2, 4, 8, 16)
print("eager:", tuple(Model()(x).shape))
onnx_program = torch.onnx.export(Model().eval(), (x,), dynamo=True, verbose=False)
path = Path(tempfile.mkdtemp()) / "squeeze_dims.onnx"
onnx_program.save(path)
(out,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
print("onnxruntime:", out.shape)
