"""Issue 47's acceptance matrix, every scheme, exported and then loaded and run in a fresh process.

Each (class, backend, scheme) of ``sweeps/quantize/acceptance.txt`` x {ExecuTorch ``8da4w``, ``8da8w``,
``int8``; ONNX ``int8``, ``int4``} is exported here as ``exportbot export`` does (``bot.run.runner.export_one``:
validated from the written files, fidelity and quality), one at a time, to a scratch folder. Then one fresh
interpreter, which has imported nothing of the export, loads every bundle that was written with
``exporters.load`` and runs it on the class's sample inputs (``build_model``, seed 0), against the float model
built there: each row records the export's verdict and fidelity, and from the fresh process whether the bundle
loaded and ran, its output names, and the first output's cosine and max abs diff against float eager.

    nice -n 5 python scripts/quantize_reload.py --out sweeps/quantize/reload-acceptance.json

Costs: ONNX 5-15 s per export, ExecuTorch (XNNPACK) 15-75 s, on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMES = (("executorch", "8da4w"), ("executorch", "8da8w"), ("executorch", "int8"), ("onnx", "int8"), ("onnx", "int4"))

RUN_LOADED = r"""
import json, sys
import torch
import exporters
from exporters.export_options import ExportOptions, build_model
from exporters.validation import named_tensors

rows = []
for name, directory in json.loads(sys.argv[1]):
    row = {"model": name, "directory": directory}
    try:
        bundle = exporters.load(directory)
        built = build_model(name, ExportOptions(), 0, torch.float32)
        inputs = {k: v for k, v in built.inputs.items() if k in bundle.input_names}
        with torch.no_grad():
            expected = named_tensors(built.model(**inputs))
        actual = named_tensors(bundle(**inputs))
        first, other = expected[0][1].double().flatten(), torch.as_tensor(actual[0][1]).double().flatten()
        row |= {"ran": True, "outputs": [n for n, _ in actual],
                "cosine_vs_float": round(float(torch.nn.functional.cosine_similarity(first, other, dim=0)), 6),
                "max_abs_diff_vs_float": float((first - other).abs().max())}
    except Exception as error:
        row |= {"ran": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    rows.append(row)
print(json.dumps(rows))
"""


def classes() -> list[str]:
    lines = (ROOT / "sweeps" / "quantize" / "acceptance.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def export(name: str, backend: str, scheme: str, out: Path) -> dict[str, Any]:
    from bot.outcome import ExportRequest
    from bot.run.runner import export_one
    from exporters.export_options import ExportOptions
    from exporters.quantize import QuantizeConfig

    started = time.perf_counter()
    outcome = export_one(ExportRequest(name, backend, options=ExportOptions(quantize=QuantizeConfig(scheme)),
                                       out_dir=out))
    fidelity = (outcome.quantization or {}).get("fidelity") or {}
    worst = max(fidelity.values(), key=lambda row: row["steps"], default={})
    return {"model": name, "backend": backend, "scheme": scheme, "status": outcome.status,
            "error": (outcome.error or "")[:300] or None, "export_seconds": round(time.perf_counter() - started, 1),
            "fidelity_steps": worst.get("steps"), "fidelity_envelope_steps": worst.get("envelope_steps")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "sweeps" / "quantize" / "reload-acceptance.json")
    arguments = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="exportbot-quantize-reload-") as scratch:
        written = []
        for backend, scheme in SCHEMES:
            for name in classes():
                out = Path(scratch) / f"{name}-{backend}-{scheme}"
                rows.append(export(name, backend, scheme, out))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                if (out / "export.json").is_file():
                    written.append((name, str(out)))
        fresh = subprocess.run([sys.executable, "-c", RUN_LOADED, json.dumps(written)], capture_output=True,
                               text=True, check=True, cwd=scratch)
        loaded = {row["directory"]: row for row in json.loads(fresh.stdout.strip().splitlines()[-1])}
    for row in rows:
        directory = str(Path(scratch) / f"{row['model']}-{row['backend']}-{row['scheme']}")
        row["fresh_process"] = {k: v for k, v in loaded.get(directory, {"ran": False, "error": "not written"}).items()
                                if k not in ("model", "directory")}
    summary = {"exports": len(rows), "passed": sum(row["status"] == "pass" for row in rows),
               "ran_in_fresh_process": sum(row["fresh_process"].get("ran", False) for row in rows)}
    result = {"script": "scripts/quantize_reload.py", "date": time.strftime("%Y-%m-%d"), "summary": summary, "rows": rows}
    arguments.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
