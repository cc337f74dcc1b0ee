import onnx_ir as ir
from onnx_ir.passes.common import OutputFixPass

mask = ir.Value(name="attention_mask", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2, 5]))
doubled = ir.node("Add", inputs=[mask, mask])
doubled.outputs[0].name = "doubled"
graph = ir.Graph(inputs=[mask], outputs=[doubled.outputs[0], mask], nodes=[doubled], opset_imports={"": 20})
model = ir.Model(graph, ir_version=10)
print("before:", [v.name for v in model.graph.inputs], [v.name for v in model.graph.outputs])
OutputFixPass()(model)
print("after: ", [v.name for v in model.graph.inputs], [v.name for v in model.graph.outputs])
