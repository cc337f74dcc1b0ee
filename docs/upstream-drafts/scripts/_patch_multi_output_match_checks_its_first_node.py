import time
import onnx
import onnx_ir as ir
from onnxscript import rewriter
from onnxscript.rewriter.rules.common._basic_rules import slice_split_rule

for n in (250, 500, 1000):
    body = ["y0 = Identity(x)"]
    for i in range(n):  # n Relu nodes, each followed by a (no-op) Slice of its output
        body.append(f"r{i} = Relu(y{i})")
        body.append(f"y{i + 1} = Slice(r{i}, start, end, axes)")
    model = ir.from_proto(onnx.parser.parse_model(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    agraph (float[2, 8] x) => (float[2, 8] y{n})
        <int64[1] start = {{0}}, int64[1] end = {{8}}, int64[1] axes = {{-1}}> {{
        {chr(10).join(body)}
    }}
    """))
    t = time.perf_counter()
    rewriter.rewrite(model, pattern_rewrite_rules=[slice_split_rule])
    print(f"{2 * n + 1} nodes: {time.perf_counter() - t:.2f} s")
