import torch
import onnxscript.optimizer


class NgramStreams(torch.nn.Module):
    def forward(self, x):
        # a (batch, 3 * seq, hidden) tensor chunked back into 3 streams of a dynamic length seq
        main, first, second = torch.cat([x, x + 1, x * 2], dim=1).chunk(3, dim=1)
        return main + first * second


program = torch.onnx.export(
    NgramStreams().eval(), (torch.randn(2, 5, 4),), dynamic_shapes=({1: torch.export.Dim.AUTO},),
    dynamo=True, optimize=False, verbose=False,
)
for node in program.model.graph:
    if node.op_type == "SplitToSequence":
        split = node.inputs[1]
        print("SplitToSequence input", node.inputs[0].shape, "split shape", split.shape, "split value", split.const_value)
try:
    onnxscript.optimizer.optimize(program.model)
    print("OK")
except Exception as error:
    while error.__cause__ is not None:
        error = error.__cause__
    print("FAILED:", type(error).__name__, error)
