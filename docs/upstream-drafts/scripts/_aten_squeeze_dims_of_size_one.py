import tempfile
from pathlib import Path

import onnxruntime as ort
import torch


class Model(torch.nn.Module):
    def forward(self, logits):
        return logits.squeeze(2)  # torch: a no-op, dim 2 has size 8 (an RNNT joint's token axis)


logits = torch.randn(2, 4, 8, 16)
onnx_program = torch.onnx.export(Model().eval(), (logits,), dynamo=True, verbose=False)
print([(node.op_type, node.inputs[1].const_value.numpy().tolist()) for node in onnx_program.model.graph])
path = Path(tempfile.mkdtemp()) / "squeeze.onnx"
onnx_program.save(path)
ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # fails: Squeeze of a dim of size 8
print("onnxruntime load: OK")
