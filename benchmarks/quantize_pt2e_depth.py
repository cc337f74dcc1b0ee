"""Why ExecuTorch PT2E static ``int8`` leaves its reference on a deep BERT: the ``.pte`` against the converted program, by depth.

``bench_quantize.py``'s BERT 512 x 8 (random weights) exported ``--quantize int8`` on ExecuTorch was 7.26 output
steps from PT2E's converted program in 45 % of elements under a one-step rule. This script tells a rounding flip
from a real difference in the computation, cheapest first: the same BERT at 1, 2 and 8 layers (one 1 x 128
batch, seed 0 weights), each exported, written, loaded back in the ExecuTorch runtime and run, against:

* the converted program itself (the fidelity reference): the largest difference in steps of the output's 8-bit
  grid, and the share of elements more than one step off;
* the converted program nudged against itself: each activation quantize op's input moved by at most one
  float32 ulp (``exporters.quantize.fidelity.nudged_run`` on the reference's ``ActivationQuantize`` modules,
  exporters/executorch/quantize.py), for seeds 0, 1 and 2.

A difference that is there from the first layer and that the nudged runs do not show would be an op computed
otherwise (a q/dq pair folded differently, another requantization scale); one that grows with depth as the
nudged runs do is rounding flips compounding, which the flip envelope measures.

    nice -n 5 python benchmarks/quantize_pt2e_depth.py --out benchmarks/results/quantize-pt2e-depth.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_quantize import ENCODER_SEQUENCE, ROOT

DEPTHS = (1, 2, 8)


def last_hidden_state(outputs: Any) -> torch.Tensor:
    from exporters.validation import named_tensors

    return torch.as_tensor(named_tensors(outputs)[0][1])


def apart(actual: torch.Tensor, expected: torch.Tensor) -> dict[str, float]:
    """The largest difference in steps of ``expected``'s 8-bit grid, and the share of elements past one step."""
    from exporters.quantize.fidelity import output_step

    step = output_step(expected)
    diff = (actual.double() - expected.double()).abs()
    return {"steps": round(float(diff.max()) / step, 3), "past_one_step": round(float((diff > step).double().mean()), 4)}


def depth_row(layers: int, scratch: Path) -> dict[str, Any]:
    from transformers import BertConfig, BertModel

    import exporters
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
    from exporters.quantize import QuantizeConfig
    from exporters.quantize.fidelity import FLIP_SEEDS, nudged_run

    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=512, num_hidden_layers=layers, num_attention_heads=8,
                                 intermediate_size=2048)).eval()
    generator = torch.Generator().manual_seed(1)
    inputs = {"input_ids": torch.randint(0, model.config.vocab_size, (1, ENCODER_SEQUENCE), generator=generator),
              "attention_mask": torch.ones(1, ENCODER_SEQUENCE, dtype=torch.long),
              "token_type_ids": torch.zeros(1, ENCODER_SEQUENCE, dtype=torch.long)}
    started = time.perf_counter()
    result = ExecutorchExporter(ExecutorchConfig(quantize=QuantizeConfig("int8"))).export(model, inputs)
    result.save(scratch / f"bert-{layers}", validate=False)
    artifact = last_hidden_state(exporters.load(scratch / f"bert-{layers}")(**inputs))
    reference, quantize_ops = result.quantization.reference, result.quantization.requantized
    with torch.no_grad():
        expected = last_hidden_state(reference(**inputs))
    return {"layers": layers, "activation_quantize_ops": len(quantize_ops), "artifact": apart(artifact, expected),
            "nudged_reference": [apart(last_hidden_state(nudged_run(reference, quantize_ops, inputs, seed)), expected)
                                 for seed in FLIP_SEEDS],
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantize-pt2e-depth.json")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="exportbot-pt2e-depth-") as scratch:
        rows = []
        for layers in DEPTHS:
            rows.append(depth_row(layers, Path(scratch)))
            print(json.dumps(rows[-1]), flush=True)
    result = {"benchmark": "quantize_pt2e_depth.py", "date": time.strftime("%Y-%m-%d"),
              "model": "BERT 512 hidden, 8 heads, intermediate 2048 (random weights, seed 0)", "backend": "executorch",
              "scheme": "int8 (PT2E static)", "inputs": f"1 x {ENCODER_SEQUENCE}", "output": "last_hidden_state",
              "rows": rows}
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
