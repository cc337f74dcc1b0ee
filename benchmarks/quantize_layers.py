"""Where a dynamically quantized ONNX export leaves its PyTorch reference: every ``DynamicQuantizeLinear``, layer by layer.

Fidelity (exporters/quantize/fidelity.py) misses on deep models for every scheme that quantizes activations at
run time (docs/quantization.md). This script tells a rounding flip from a real difference in the reference on
``bench_quantize.py``'s BERT 512 x 8 (random weights), ONNX ``int8``, one 1 x 128 batch:

* per quantized activation, in graph order: the artifact's scale and zero point against the reference's, how
  many uint8 codes differ and by how much, how far the float input to the quantizer has drifted (in activation
  steps), and how near a rounding boundary the reference's value was where a code flipped;
* the flip envelope: the reference against itself with each quantized layer's input nudged by at most one
  float32 ulp (a difference of the size two kernels' accumulation orders make), for the seeds fidelity uses
  (``exporters.quantize.fidelity.nudged_run``);
* a deliberately broken reference (every activation shifted by one step, as a zero point off by one would),
  to show the size a real bug reaches.

    nice -n 5 python benchmarks/quantize_layers.py --out benchmarks/results/quantize-layers-onnx-int8.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import torch
from bench_quantize import ENCODER_SEQUENCE, ROOT, encoder_checkpoint


def activation_grid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``DynamicQuantizeLinear``'s scale and zero point for ``x`` (exporters/onnx/quantize.py computes the same)."""
    low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
    scale = (high - low) / 255.0
    return scale, torch.clamp(torch.round(-low / scale), 0, 255)


def steps_apart(output: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """Largest difference in steps of the reference's 8-bit grid, and the fraction of elements beyond one."""
    step = float(reference.max() - reference.min()) / 255
    difference = (output - reference).abs() / step
    return {"max_steps": round(float(difference.max()), 4), "beyond_one_step": round(float((difference > 1).float().mean()), 5)}


def artifact_activations(artifact: ir.Model, inputs: dict[str, torch.Tensor]) -> tuple[list[dict[str, Any]], torch.Tensor]:
    """Each ``DynamicQuantizeLinear``'s input, codes, scale and zero point as ONNX Runtime computed them, and the
    first output: every one made a graph output of a copy of the model."""
    proto = ir.serde.serialize_model(artifact)
    nodes = [node for node in proto.graph.node if node.op_type == "DynamicQuantizeLinear"]
    first_output = proto.graph.output[0].name
    for node in nodes:
        for name in (node.input[0], *node.output):
            proto.graph.output.append(onnx.helper.make_value_info(name, onnx.TypeProto()))
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    feed = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    values = dict(zip(names, session.run(None, feed)))
    found = [{"node": node.name, "input": torch.from_numpy(values[node.input[0]]),
              "codes": torch.from_numpy(values[node.output[0]].astype(np.float32)),
              "scale": float(values[node.output[1]]), "zero_point": float(values[node.output[2]])} for node in nodes]
    return found, torch.from_numpy(values[first_output])


def reference_activations(reference: torch.nn.Module, layers: list[str], inputs: dict[str, torch.Tensor],
                          shift_one_step: bool = False) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each quantized layer's input as the reference quantizes it (one per shared input: q, k and v share
    one, as one ``DynamicQuantizeLinear`` serves them), and the first output. ``shift_one_step`` adds one
    activation step first (a broken reference: a zero point off by one)."""
    seen: list[torch.Tensor] = []

    def before_quantization(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        if shift_one_step:
            x = x + activation_grid(x)[0]
        if not seen or seen[-1] is not args[0]:
            seen.append(args[0])
        return (x, *args[1:])

    handles = [reference.get_submodule(layer).register_forward_pre_hook(before_quantization, prepend=True)
               for layer in layers]
    with torch.no_grad():
        output = reference(**inputs)[0]
    for handle in handles:
        handle.remove()
    return seen, output


def layer_rows(ours: list[dict[str, Any]], theirs: list[torch.Tensor]) -> list[dict[str, Any]]:
    """Codes, grid and drift of each quantized activation, artifact against reference, in graph order."""
    rows = []
    for found, x in zip(ours, theirs, strict=True):
        scale, zero_point = activation_grid(x)
        position = x / scale + zero_point
        codes = torch.clamp(torch.round(position), 0, 255)
        apart = (found["codes"].reshape(codes.shape) - codes).abs()
        flipped = apart > 0
        boundary = (position - torch.floor(position) - 0.5).abs()  # 0: exactly on a rounding boundary
        rows.append({
            "node": found["node"], "elements": codes.numel(),
            "scale_relative_difference": float(abs(found["scale"] - float(scale)) / float(scale)),
            "zero_point": [found["zero_point"], float(zero_point)],
            "codes_flipped": int(flipped.sum()), "largest_code_difference": int(apart.max()),
            "input_drift_steps": round(float((found["input"].reshape(x.shape) - x).abs().max() / scale), 6),
            "flipped_farthest_from_boundary": round(float(boundary[flipped].max()), 6) if flipped.any() else None,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantize-layers-onnx-int8.json")
    arguments = parser.parse_args()
    from transformers import AutoModel

    from exporters.onnx.exporter import OnnxConfig, OnnxExporter
    from exporters.quantize import QuantizeConfig
    from exporters.quantize.fidelity import FLIP_SEEDS, nudged_run

    model = AutoModel.from_pretrained(encoder_checkpoint()).eval()
    generator = torch.Generator().manual_seed(1)
    inputs = {"input_ids": torch.randint(0, model.config.vocab_size, (1, ENCODER_SEQUENCE), generator=generator),
              "attention_mask": torch.ones(1, ENCODER_SEQUENCE, dtype=torch.long),
              "token_type_ids": torch.zeros(1, ENCODER_SEQUENCE, dtype=torch.long)}
    result = OnnxExporter(OnnxConfig(quantize=QuantizeConfig("int8"))).export(model, inputs)
    reference, layers = result.quantization.reference, result.quantization.quantized
    ours, artifact_output = artifact_activations(result.artifact, inputs)
    theirs, reference_output = reference_activations(reference, layers, inputs)
    nudged = [nudged_run(reference, layers, inputs, seed)[0] for seed in FLIP_SEEDS]
    broken = reference_activations(reference, layers, inputs, shift_one_step=True)[1]
    result_json = {
        "benchmark": "quantize_layers.py", "date": time.strftime("%Y-%m-%d"), "model": "BERT 512x8 (random weights)",
        "backend": "onnx", "scheme": "int8", "inputs": f"1 x {ENCODER_SEQUENCE}", "output": "last_hidden_state",
        "artifact_vs_reference": steps_apart(artifact_output, reference_output),
        "nudged_reference_vs_reference": [steps_apart(output, reference_output) for output in nudged],
        "broken_reference_vs_reference": steps_apart(broken, reference_output),
        "layers": layer_rows(ours, theirs),
    }
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result_json, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result_json.items() if k != "layers"}, indent=1))
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
