import onnxruntime as ort
import torch


class Model(torch.nn.Module):
    def forward(self, logits):
        return logits.squeeze(2)  # torch: a no-op, dim 2 has size 8 (an RNNT joint's token axis)


logits = torch.randn(2, 4, 8, 16)
onnx_program = torch.onnx.export(Model(), (logits,), dynamo=True, verbose=False)
print([(node.op_type, node.inputs[1].const_value.numpy().tolist()) for node in onnx_program.model.graph])
try:
    ort.InferenceSession(onnx_program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    print("OK")
except Exception as error:
    print("FAILED:", str(error).splitlines()[0][-160:])
