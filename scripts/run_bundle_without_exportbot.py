"""Run a bundle's ONNX or .pte files with their runtime alone: no exportbot, no transformers, no model code.

What a deployment that ships only the files does: read export.json and take everything from it. A
single-graph bundle (one component) runs once on inputs made from the manifest; a generation bundle
(``prefill`` + ``decode``) runs a greedy loop, feeding each step's ``present_*`` outputs back as ``past_*``.

    python scripts/run_bundle_without_exportbot.py out/bert                 # inputs made from the manifest
    python scripts/run_bundle_without_exportbot.py out/bert --inputs a.npz --outputs a-out.npz
    python scripts/run_bundle_without_exportbot.py out/llama-gen --new-tokens 8     # greedy generation

Inputs take the manifest's sample shape (``validation.shapes[0]``) and valid values: an argument listed in
``optional`` gets its fill (token type 0, mask 1), another mask ones, integer ids values in the range the
sample had (``values``: within the vocabulary), floats a standard normal. Prints one JSON line: the output
shapes (or the generated tokens) and the modules it imported, so a test can check that no exportbot module
was among them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
                "int32": np.int32, "bool": np.bool_}
Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def sample_shape(component: dict, spec: dict) -> list[int]:
    """The input's shape at the validated sample, else each dynamic dim at its smallest validated size."""
    shapes = ((component.get("validation") or {}).get("shapes") or [{}])[0].get("input_shapes", {})
    if spec["name"] in shapes:
        return shapes[spec["name"]]
    return [d if isinstance(d, int) else component["dims"].get(d, {}).get("min") or 1 for d in spec["shape"]]


def make_input(component: dict, spec: dict, shape: list[int], generator: np.random.Generator) -> np.ndarray:
    """A valid value for one input, from the manifest alone (see the module docstring)."""
    dtype = NUMPY_DTYPES[spec["dtype"]]
    optional = component.get("optional", {}).get(spec["name"])
    if optional is not None:
        return np.full(shape, optional["fill"], dtype=dtype)
    if "mask" in spec["name"]:
        return np.ones(shape, dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        low, high = spec.get("values") or [0, 9]
        return generator.integers(low, high + 1, size=shape).astype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype=dtype)
    return generator.standard_normal(shape).astype(dtype)


def manifest_inputs(component: dict, seed: int = 0) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(seed)
    return {spec["name"]: make_input(component, spec, sample_shape(component, spec), generator)
            for spec in component["inputs"]}


def onnx_runner(path: Path, component: dict) -> Runner:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [spec["name"] for spec in component["outputs"]]
    return lambda feed: dict(zip(names, session.run(None, {s["name"]: feed[s["name"]] for s in component["inputs"]})))


def pte_runner(path: Path, component: dict) -> Runner:
    import torch  # the ExecuTorch runtime's Python binding takes and returns torch tensors
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path)
    method = program.load_method(component.get("method", "forward"))
    names = [spec["name"] for spec in component["outputs"]]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = method.execute([torch.from_numpy(np.ascontiguousarray(feed[s["name"]])) for s in component["inputs"]])
        # copies: the runtime may reuse an output's memory on the next call (a generation loop feeds them back)
        return dict(zip(names, [o.numpy().copy() for o in outputs if isinstance(o, torch.Tensor)]))

    run.program = program  # the method needs its program alive
    return run


RUNNERS = {".onnx": onnx_runner, ".pte": pte_runner}


def open_component(bundle: Path, component: dict) -> Runner:
    path = bundle / component["file"]
    if path.suffix not in RUNNERS:
        raise SystemExit(f"{path.name}: only .onnx and .pte files run without exportbot")
    return RUNNERS[path.suffix](path, component)


def prompt(manifest: dict, generator: np.random.Generator) -> dict[str, np.ndarray]:
    """Prefill's inputs: its sample's batch and prompt length, ids in the range its sample had; a vision-language
    prompt holds its image's placeholder tokens, an encoder-decoder one the decoder's start token."""
    layout, prefill = manifest["generation"], manifest["components"]["prefill"]
    feed = manifest_inputs(prefill)
    ids = feed.get("input_ids")
    if ids is not None:
        feed["attention_mask"] = np.ones_like(ids)
        image = layout.get("image_input")
        if image is not None:  # lead tokens, one image's placeholders, text: as the sample was laid out
            low, high = next(s for s in prefill["inputs"] if s["name"] == "input_ids").get("values") or [0, 9]
            text = generator.integers(low, high + 1, size=(ids.shape[0], ids.shape[1] - image["tokens_per_image"]))
            text[text == image["image_token_id"]] = low if low != image["image_token_id"] else high
            placeholders = np.full((ids.shape[0], image["tokens_per_image"]), image["image_token_id"])
            feed["input_ids"] = np.concatenate([text[:, :2], placeholders, text[:, 2:]], axis=1).astype(ids.dtype)
    if "decoder_input_ids" in feed:
        feed["decoder_input_ids"] = np.full_like(feed["decoder_input_ids"], layout["decoder_start_token_id"])
    return feed


def generate(bundle: Path, manifest: dict, new_tokens: int) -> dict[str, list]:
    """The prompt's ids and the greedy tokens ``[batch][new]``: prefill once, then decode, each ``past_*`` input
    fed from the latest ``present_*`` output, other decode inputs that prefill returned (encoder states) as
    prefill gave them."""
    components = manifest["components"]
    prefill, decode = open_component(bundle, components["prefill"]), open_component(bundle, components["decode"])
    decoder_only = manifest["generation"]["kind"] == "decoder-only"
    feed = prompt(manifest, np.random.default_rng(0))
    state = prefill(feed)
    fixed = {name: value for name, value in feed.items() if name == "attention_mask" and not decoder_only}
    mask = feed.get("attention_mask")
    tokens = []
    for step in range(new_tokens):
        token = state["logits"].argmax(-1).astype(np.int64)
        tokens.append(token)
        if step == new_tokens - 1:
            break
        step_feed = dict(fixed)
        for spec in components["decode"]["inputs"]:
            name = spec["name"]
            if name.startswith("past_"):
                step_feed[name] = state["present_" + name.removeprefix("past_")]
            elif name in state:
                step_feed[name] = state[name]
        if decoder_only:
            mask = np.concatenate([mask, np.ones_like(token)[:, None]], axis=1)
            step_feed["input_ids"], step_feed["attention_mask"] = token[:, None], mask
        else:
            step_feed["decoder_input_ids"] = token[:, None]
        state = {**state, **decode(step_feed)}
    ids = feed.get("input_ids")
    return {"prompt_ids": ids.tolist() if ids is not None else None, "tokens": np.stack(tokens, axis=1).tolist()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--component", default="model", help="single-graph bundles: the component to run")
    parser.add_argument("--inputs", type=Path, nargs="*", help=".npz files of inputs by manifest name (default: "
                        "one set made from the manifest)")
    parser.add_argument("--outputs", type=Path, nargs="*", help="write each run's outputs here as .npz, by name")
    parser.add_argument("--new-tokens", type=int, default=8, help="generation bundles: tokens to generate")
    args = parser.parse_args()
    manifest = json.loads((args.bundle / "export.json").read_text())
    if manifest.get("generation"):
        result: dict = generate(args.bundle, manifest, args.new_tokens)
    else:
        component = manifest["components"][args.component]
        run = open_component(args.bundle, component)
        feeds = [dict(np.load(f)) for f in args.inputs] if args.inputs else [manifest_inputs(component)]
        shapes = []
        for index, feed in enumerate(feeds):
            outputs = run(feed)
            shapes.append({name: list(value.shape) for name, value in outputs.items()})
            if args.outputs:
                np.savez(args.outputs[index], **outputs)
        result = {"outputs": shapes}
    result["imported"] = sorted({name.split(".")[0] for name in sys.modules})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
