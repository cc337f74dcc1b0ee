"""Run a bundle's ONNX or .pte file with its runtime alone: no exportbot, no transformers, no model code.

What a deployment that ships only the files does: read export.json, take the input names, dtypes and
shapes of a component from it, feed ONNX Runtime by name or the ExecuTorch method in manifest order.

    python scripts/run_bundle_without_exportbot.py out/bert                 # random inputs from the manifest
    python scripts/run_bundle_without_exportbot.py out/bert --inputs a.npz b.npz --outputs a-out.npz b-out.npz

Random inputs use each dynamic dim at its smallest allowed size (at least 2), integers in 0..9 (every
vocabulary holds ids 0..9) and ones for masks. Prints one JSON line: the output names and shapes, and the
modules it imported, so a test can check that no exportbot module was among them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
                "int32": np.int32, "bool": np.bool_}


def random_inputs(component: dict, dims: dict) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(0)
    feed = {}
    for spec in component["inputs"]:
        shape = [d if isinstance(d, int) else max(2, dims.get(d, {}).get("min") or 2) for d in spec["shape"]]
        dtype = NUMPY_DTYPES[spec["dtype"]]
        if "mask" in spec["name"]:
            feed[spec["name"]] = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.integer):
            feed[spec["name"]] = generator.integers(0, 10, size=shape).astype(dtype)
        else:
            feed[spec["name"]] = generator.standard_normal(shape).astype(dtype)
    return feed


def onnx_runner(path: Path, component: dict):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, {spec["name"]: feed[spec["name"]] for spec in component["inputs"]})


def pte_runner(path: Path, component: dict):
    import torch  # the ExecuTorch runtime's Python binding takes and returns torch tensors
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path)
    method = program.load_method(component.get("method", "forward"))

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs = method.execute([torch.from_numpy(feed[spec["name"]]) for spec in component["inputs"]])
        return [output.numpy() for output in outputs]

    run.program = program  # the method needs its program alive
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--component", default="model")
    parser.add_argument("--inputs", type=Path, nargs="*", help=".npz files of inputs by manifest name (default: "
                        "one random set)")
    parser.add_argument("--outputs", type=Path, nargs="*", help="write each run's outputs here as .npz, by name")
    args = parser.parse_args()
    manifest = json.loads((args.bundle / "export.json").read_text())
    component = manifest["components"][args.component]
    path = args.bundle / component["file"]
    runners = {".onnx": onnx_runner, ".pte": pte_runner}
    if path.suffix not in runners:
        print(f"{path.name}: only .onnx and .pte files run without exportbot", file=sys.stderr)
        return 2
    run = runners[path.suffix](path, component)
    feeds = [dict(np.load(f)) for f in args.inputs] if args.inputs else [random_inputs(component, component["dims"])]
    names = [spec["name"] for spec in component["outputs"]]
    shapes = []
    for index, feed in enumerate(feeds):
        outputs = run(feed)
        shapes.append({n: list(o.shape) for n, o in zip(names, outputs)})
        if args.outputs:
            np.savez(args.outputs[index], **dict(zip(names, outputs)))
    imported = sorted({name.split(".")[0] for name in sys.modules})
    print(json.dumps({"outputs": shapes, "imported": imported}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
