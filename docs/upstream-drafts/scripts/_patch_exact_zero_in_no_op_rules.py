import onnx
import onnx_ir as ir
from onnxscript import rewriter
from onnxscript.rewriter.rules.common import add_0_rule

for epsilon in ("1e-8", "1e-9", "1e-7"):
    model = ir.from_proto(onnx.parser.parse_model(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    agraph (float[2, 4] x) => (float[2, 4] y) {{
        epsilon = Constant <value = float {{{epsilon}}}> ()
        y = Add(x, epsilon)
    }}
    """))
    rewriter.rewrite(model, pattern_rewrite_rules=[add_0_rule])
    print(f"x + {epsilon} ->", [node.op_type for node in model.graph])
