import torch


class Model(torch.nn.Module):
    def forward(self, pixel_values):
        height, width = pixel_values.shape[-2:]
        return pixel_values.mean((-2, -1)), (height, width)  # MaskFormerSwin returns spatial sizes like this


pixel_values = torch.randn(2, 3, 8, 6)
program = torch.export.export(Model(), (pixel_values,))
print([node.args for node in program.graph.nodes if node.op == "output"])
print([spec.arg for spec in program.graph_signature.output_specs])
try:
    torch.onnx.export(program, (), dynamo=True, verbose=False)
    print("OK")
except Exception as error:
    print("FAILED:", type(error).__name__, [line for line in str(error).splitlines() if "object has no attribute" in line][:1])
