import onnx_ir as ir
from onnx_ir.passes.common import OutputFixPass

mask = ir.Value(name="attention_mask", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2, 5]))
doubled = ir.node("Add", inputs=[mask, mask])
doubled.outputs[0].name = "doubled"
graph = ir.Graph(inputs=[mask], outputs=[doubled.outputs[0], mask], nodes=[doubled], opset_imports={"": 20})
model = ir.Model(graph, ir_version=10)
before = [v.name for v in model.graph.inputs]
print("before:", before, [v.name for v in model.graph.outputs])
OutputFixPass()(model)
after = [v.name for v in model.graph.inputs]
print("after: ", after, [v.name for v in model.graph.outputs])
renamed = [name for name in after if name not in before]
assert not renamed, f"ONNX graph input {renamed[0]!r} is none of the original inputs {before} (OutputFixPass renamed it)"
