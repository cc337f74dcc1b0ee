import torch


class Model(torch.nn.Module):
    def forward(self, x):
        torch._check_tensor_all(x > -100, lambda: "x out of range")  # what transformers' torch_compilable_check does
        return x * 2


program = torch.export.export(Model(), (torch.randn(2, 3),))
print([str(node.target) for node in program.graph.nodes if node.op == "call_function"])
try:
    torch.onnx.export(program, (), dynamo=True, verbose=False)
    print("OK")
except Exception as error:
    print("FAILED:", type(error).__name__, [line for line in str(error).splitlines() if "_is_all_true" in line][:2])
