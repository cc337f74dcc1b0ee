"""Decode speed side by side in one run: our bundles against the runtimes' own LLM paths (issue 48).

On the local Llama 512 x 8 checkpoint (``llama_checkpoint.py``; random weights, fp32, CPU), for each context
(the prompt's length: 128 and 1,024) and batch (1 and 2), each configuration runs in its own process (so its
peak RSS is its own), greedy, ``NEW_TOKENS`` new tokens per row, best of ``REPEATS`` timed runs after a
warm-up:

* ``eager``: transformers' ``generate`` with its own cache (``DynamicCache``), the decode rate being
  ``(new - 1) x batch`` tokens over the time of ``generate(new)`` less that of ``generate(1)`` (its prefill);
* ``ours-onnx``: our ONNX bundle, ``exporters.load(dir).generate()``, its own reported wall rate (first decode
  step to last); beside it, in the same process and alternating with it, ``minimal``: the plainest loop over
  the same two ONNX Runtime sessions (a persistent feed, argmax, nothing else): ``generate()`` / minimal is
  the loop's overhead (goal >= 0.95);
* ``ours-onnx-fused``: the same with ``--ort-fusions`` (ONNX Runtime's fused norms and attention where
  matched), with its own minimal loop;
* ``-1t`` variants (``ours-onnx-1t``, ``ours-onnx-fused-1t``, ``genai-1t``): one ONNX Runtime intra-op thread
  (``exporters.load(dir, threads=1)``; genai's ``session_options``); on 2 shared cores, threads that wait for
  each other cost more than the second core gives;
* ``ours-pte``: our ``.pte`` bundle (XNNPACK) in the ExecuTorch runtime (ExecuTorch keeps the batch static:
  one bundle per batch);
* ``ours-pte-inplace``: our ``.pte`` bundle with ``cache="in-place"`` (``--cache in-place``: the KV cache as
  mutable buffers of one method, written in place; exporters.generation.inplace), batch 1, ``max_cache_len`` the
  ET LLM path's own cache length (``ET_CONTEXT``); ``step_profile`` times, per decode step, the method's
  ``execute`` against the whole step of the loop;
* ``ours-onnx-inplace`` (and ``-1t``): our ONNX bundle with ``cache="in-place"`` (exporters.generation.gqa:
  ONNX Runtime's ``GroupQueryAttention`` with ``past_*`` and ``present_*`` bound to one buffer, so a step feeds
  only its token and position), batch 1, ``max_cache_len`` ``ET_CONTEXT`` as the in-place ``.pte``; with
  ``--profile``, ONNX Runtime's per-step profile of the bound step (``step_profile``); ``ours-onnx-inplace-fused``
  (and ``-1t``): the same with ``--ort-fusions``;
* ``genai``: onnxruntime-genai 0.18.0's model builder (fp32, CPU) on the same checkpoint and its runtime's own
  loop (``append_tokens``, then ``generate_next_token`` per token), installed by this script into
  ``.exportbot-cache/onnxruntime-genai-0.18.0`` (not a project dependency);
* ``et-llm``: ExecuTorch's own LLM export (``executorch.examples.models.llama.export_llama``: KV cache as mutable
  buffers updated in place by its ``update_cache`` / ``sdpa_with_kv_cache`` custom ops, XNNPACK, fp32) on the same
  weights (renamed to its Llama module's, HF rotary kept: ``use_hf_rope``), run by the ExecuTorch runtime with a
  greedy loop of ``forward(tokens, input_pos)``; its model is batch 1 only; with ``--profile`` it and
  ``ours-pte-inplace`` get ExecuTorch's per-operator ETDump profile of 16 decode steps (``etdump_profile``);
* ``hf-onnx``: transformers.exporters' ONNX generation artifacts (``prefill.onnx`` / ``decode.onnx``) driven by
  the same minimal loop.

Every configuration's tokens are compared with eager's (``tokens_equal_eager``), and its rate with the best
variant of each anchor in the same row (``vs_eager``, ``vs_genai``, ``vs_et_llm``). ``--profile`` adds ONNX
Runtime's per-step profile of our ONNX bundles (``step_profile``: kernel time per operator, at its default
threads). Artifacts are built once into
``.exportbot-cache/bench/decode`` (``--rebuild`` to build again); our bundles are built and validated token for
token against eager by ``save()`` (their ``export.json`` ``generation.validation`` is copied into the results).
The load average at the start and end is recorded: the ratios within one run are what count.

    nice -n 5 python benchmarks/bench_decode.py --profile --contexts 128 512 1024 --out benchmarks/results/decode.json
    python benchmarks/bench_decode.py --model tiny --contexts 16 --new-tokens 96 --runtime eager
        --runtime ours-onnx --runtime ours-onnx-1t --runtime hf-onnx --out benchmarks/results/decode-tiny.json
        (one command line)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from decode_profiles import etdump_profile, ort_kernel_profile, profile_in_place, profile_ort_in_place

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
CACHE = ROOT / ".exportbot-cache"
WORK = CACHE / "bench" / "decode"
GENAI = "0.18.0"
GENAI_DIR = CACHE / f"onnxruntime-genai-{GENAI}"
# --new-tokens reaches the children through the environment (they import this module afresh)
NEW_TOKENS, REPEATS = int(os.environ.get("BENCH_DECODE_NEW_TOKENS", 32)), 3
RUNTIMES = ["eager", "ours-onnx", "ours-onnx-1t", "ours-onnx-fused", "ours-onnx-fused-1t", "ours-onnx-inplace",
            "ours-onnx-inplace-1t", "ours-onnx-inplace-fused", "ours-onnx-inplace-fused-1t", "ours-pte", "ours-pte-inplace", "genai", "genai-1t", "et-llm", "hf-onnx"]
# configurations that serve batch 1 only
BATCH_ONE = {"ours-onnx-inplace", "ours-onnx-inplace-1t", "ours-onnx-inplace-fused", "ours-onnx-inplace-fused-1t",
             "ours-pte-inplace", "et-llm"}
# Anchors: a configuration's rate is compared with the best of each anchor's variants in the same row.
ANCHORS = {"eager": ["eager"], "genai": ["genai", "genai-1t"], "et_llm": ["et-llm"]}


# ── Artifacts (built once, each in its own process) ──
def checkpoint(model: str) -> Path:
    """The checkpoint directory of ``model``: the shared Llama 512 x 8, or the tiny Llama's with a tokenizer."""
    if model == "llama-512x8":
        from llama_checkpoint import llama_512x8_checkpoint

        return llama_512x8_checkpoint()
    from exporters.tiny.checkpoint import write_tiny_checkpoint

    directory = WORK / "tiny" / "checkpoint"
    return directory if (directory / "config.json").is_file() else write_tiny_checkpoint(directory)


def load_eager(directory: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype="float32").eval()


def build_ours(directory: Path, out: Path, backend: str, batch: int, ort_fusions: bool = False,
               cache: str = "dynamic") -> None:
    """Our generation bundle of the checkpoint, validated by ``save``: default ``max_cache_len`` (its context),
    or, for the in-place cache, the ET LLM path's (``ET_CONTEXT``: the attention runs over the whole cache)."""
    from bot.run.generation import make_generation_exporter
    from exporters.generation.components import GenerationExportConfig, sample_prompts

    model = load_eager(directory)
    prompts = sample_prompts(model, batch=batch, prompt_length=8)
    config = GenerationExportConfig(cache=cache, max_cache_len=ET_CONTEXT if cache == "in-place" else None)
    make_generation_exporter(backend, ort_fusions=ort_fusions).export_for_generation(model, prompts, config).save(out)


def build_hf_onnx(directory: Path, out: Path) -> None:
    """transformers.exporters' ONNX generation artifacts of the checkpoint (dynamic shapes)."""
    from transformers.exporters import AutoHfExporter, OnnxConfig

    from exporters.generation.components import sample_prompts

    model = load_eager(directory)
    config = OnnxConfig(dynamic=True)
    exported = AutoHfExporter.from_config(config).export_for_generation(model, dict(sample_prompts(model, 2, 8)),
                                                                         config)
    exported.save_pretrained(out)


def install_genai() -> None:
    """onnxruntime-genai into its own directory (its one dependency, onnxruntime, is the project's pin)."""
    if not (GENAI_DIR / "onnxruntime_genai").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(GENAI_DIR),
                        f"onnxruntime-genai=={GENAI}"], check=True)


def build_genai(directory: Path, out: Path) -> None:
    install_genai()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(GENAI_DIR), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(directory), "-o", str(out),
                    "-p", "fp32", "-e", "cpu", "-c", str(out / "cache")], check=True, env=env)


# ExecuTorch's Llama module names for the checkpoint's weights (layer-wise ones with ``{}``).
ET_LLAMA_NAMES = {
    "model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attention.wq.weight",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attention.wk.weight",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attention.wv.weight",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attention.wo.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.feed_forward.w1.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.feed_forward.w2.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.feed_forward.w3.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attention_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.ffn_norm.weight",
}
ET_CONTEXT = 1024 + 64  # its cache (static: max_context_length): the longest prompt and 32 new tokens, with room


def build_et_llm(directory: Path, out: Path) -> None:
    """ExecuTorch's LLM export of the checkpoint: weights renamed, its params.json, then ``export_llama``."""
    import re

    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory)
    patterns = {re.compile("^" + re.escape(hf).replace(r"\{\}", r"(\d+)") + "$"): et
                for hf, et in ET_LLAMA_NAMES.items()}
    weights = {}
    for name, value in load_file(directory / "model.safetensors").items():
        for pattern, target in patterns.items():
            if match := pattern.match(name):
                weights[target.format(*match.groups())] = value
    if "output.weight" not in weights:  # tied embeddings
        weights["output.weight"] = weights["tok_embeddings.weight"]
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / "checkpoint.pth")
    params = {"dim": config.hidden_size, "n_layers": config.num_hidden_layers, "n_heads": config.num_attention_heads,
              "n_kv_heads": config.num_key_value_heads, "vocab_size": config.vocab_size,
              "hidden_dim": config.intermediate_size, "norm_eps": config.rms_norm_eps,
              "rope_theta": config.rope_parameters["rope_theta"], "use_hf_rope": True}
    (out / "params.json").write_text(json.dumps(params))
    subprocess.run([sys.executable, "-m", "executorch.examples.models.llama.export_llama", "--model", "llama3",
                    "--checkpoint", str(out / "checkpoint.pth"), "--params", str(out / "params.json"), "-kv",
                    "--use_sdpa_with_kv_cache", "-X", "-d", "fp32", "--max_seq_length", str(ET_CONTEXT),
                    "--max_context_length", str(ET_CONTEXT), "--output_name", str(out / "model.pte")],
                   check=True, cwd=out)


def artifact(name: str, model: str, batch: int, rebuild: bool) -> Path:
    """The directory of runtime ``name``'s artifacts for ``model`` (built here, in a child process, if absent);
    a ``-1t`` variant (one intra-op thread) runs its base's."""
    name = name.removesuffix("-1t")
    per_batch = name == "ours-pte"  # ExecuTorch bundles keep the sample's batch
    out = WORK / model / (f"{name}-b{batch}" if per_batch else name)
    if name == "eager":
        return checkpoint(model)
    if (out / ".built").is_file() and not rebuild:
        return out
    started = time.perf_counter()
    code = (f"import bench_decode as b; from pathlib import Path; "
            f"b.build_{'ours' if name.startswith('ours') else name.replace('-', '_')}(b.checkpoint({model!r}), "
            f"Path({str(out)!r}){_build_args(name, batch)})")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=BENCH,
                   env={**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{ROOT}"})
    (out / ".built").write_text(json.dumps({"seconds": round(time.perf_counter() - started, 1)}))
    return out


def _build_args(name: str, batch: int) -> str:
    if name.startswith("ours-onnx-inplace"):
        return f", 'onnx', 1, ort_fusions={name.endswith('-fused')}, cache='in-place'"
    if name.startswith("ours-onnx"):
        return f", 'onnx', 2, ort_fusions={name.endswith('-fused')}"
    if name == "ours-pte":
        return f", 'executorch', {batch}"
    if name == "ours-pte-inplace":
        return ", 'executorch', 1, cache='in-place'"
    return ""


# ── Measuring one configuration (in its own process) ──
def prompt(model: str, context: int, batch: int) -> np.ndarray:
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(checkpoint(model)).vocab_size
    return np.random.default_rng(context * 10 + batch).integers(4, vocab, size=(batch, context), dtype=np.int64)


def best(run: Any) -> tuple[float, list[list[int]]]:
    """``run(new_tokens) -> (decode tokens/s, tokens)``: a short warm-up, then the best of ``REPEATS``."""
    run(4)
    results = [run(NEW_TOKENS) for _ in range(REPEATS)]
    return max(rate for rate, _ in results), results[0][1]


def measure_eager(directory: Path, ids: np.ndarray) -> dict[str, Any]:
    """transformers' ``generate``; a logits processor stamps the time each step's logits reach it, so the rate
    is from the first decode step to the last, as for every other configuration. Measured with torch's default
    threads and with one thread, the anchor being the faster: on 2 shared cores, torch's intra-op threads
    wait for each other whenever another process holds a core (4-10x slower at load 5), which would make the
    anchor, not our bundles, the thing measured."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    model = load_eager(directory)
    input_ids = torch.from_numpy(ids)
    mask = torch.ones_like(input_ids)

    def run(new: int) -> tuple[float, list[list[int]]]:
        stamps: list[float] = []

        def stamp(_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            stamps.append(time.perf_counter())
            return scores

        config = GenerationConfig(do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config,
                                 logits_processor=LogitsProcessorList([stamp]))
        # stamps[0]: the prefill's logits; stamps[-1]: the last decode step's
        return (new - 1) * len(ids) / (stamps[-1] - stamps[0]), out[:, ids.shape[1]:].tolist()

    threads = torch.get_num_threads()
    rate, tokens = best(run)
    torch.set_num_threads(1)
    single, _ = best(run)
    return {"tokens_per_second": max(rate, single), "tokens": tokens,
            f"tokens_per_second_{threads}_threads": round(rate, 1), "tokens_per_second_1_thread": round(single, 1)}


def minimal_loop(prefill: Any, decode: Any, feed: dict[str, np.ndarray], carried: list[tuple[str, int]],
                 logits_at: int, ids: np.ndarray, new: int, positions: bool = False) -> tuple[float, list[list[int]]]:
    """The plainest greedy loop over two ONNX Runtime sessions: a persistent feed, argmax, the cache outputs
    fed back as they are; the wall rate from the first decode step to the last."""
    batch, length = ids.shape
    mask = np.ones((batch, length + new), dtype=np.int64)
    first = {"input_ids": ids, "attention_mask": mask[:, :length]}
    if positions:
        first["position_ids"] = np.broadcast_to(np.arange(length), (batch, length)).copy()
    names = [o.name for o in prefill.get_outputs()]
    out = dict(zip(names, prefill.run(None, first)))
    token = np.zeros((batch, 1), dtype=np.int64)
    feed["input_ids"] = token
    for past, index in carried:
        feed[past] = out[names[index]]
    logits = out["logits"]
    logits = logits[:, -1] if logits.ndim == 3 else logits
    tokens = np.zeros((batch, new), dtype=np.int64)
    started = time.perf_counter()
    for step in range(new):
        tokens[:, step] = token[:, 0] = logits.argmax(-1)
        if step == new - 1:
            break
        feed["attention_mask"] = mask[:, : length + step + 1]
        if positions:
            feed["position_ids"] = np.full((batch, 1), length + step, dtype=np.int64)
        outputs = decode.run(None, feed)
        for past, index in carried:
            feed[past] = outputs[index]
        logits = outputs[logits_at]
        logits = logits[:, -1] if logits.ndim == 3 else logits
    return (new - 1) * batch / (time.perf_counter() - started), tokens.tolist()


def measure_ours(directory: Path, ids: np.ndarray, threads: int | None = None) -> dict[str, Any]:
    import torch

    from exporters.bundle.loading import load

    bundle = load(directory, threads=threads)
    input_ids = torch.from_numpy(ids)
    mask = torch.ones_like(input_ids)

    def ours(new: int) -> tuple[float, list[list[int]]]:
        out = bundle.generate(input_ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new)
        return out.decode_tokens_per_second, out.tokens.tolist()

    result: dict[str, Any] = {"validation": bundle.metadata.generation["validation"]["status"]}
    on_ort = next(iter(bundle.components.values())).spec.runtime == "onnxruntime"
    if bundle.metadata.generation.get("cache") == "in-place" and on_ort:
        rate, tokens = best(ours)
        profile = profile_ort_in_place(bundle, directory, ids) if os.environ.get("BENCH_DECODE_PROFILE") else None
        return result | {"tokens_per_second": rate, "tokens": tokens} | ({"step_profile": profile} if profile else {})
    if bundle.metadata.generation.get("cache") == "in-place":
        rate, tokens = best(ours)
        profiles = {"step_profile": profile_in_place(bundle, ids)}
        if os.environ.get("BENCH_DECODE_PROFILE"):
            profiles["etdump_profile"] = etdump_profile(directory / "step.pte", ids, whole_prompt_positions=True)
        return result | {"tokens_per_second": rate, "tokens": tokens} | profiles
    decode = bundle.components["decode"]
    if decode.spec.runtime != "onnxruntime":
        rate, tokens = best(ours)
        return result | {"tokens_per_second": rate, "tokens": tokens}
    prefill_session = bundle.components["prefill"].runner.session
    decode_session = decode.runner.session
    outputs = [o.name for o in decode_session.get_outputs()]
    carried = [(name.replace("present", "past", 1), i) for i, name in enumerate(outputs) if name.startswith("present")]

    def minimal(new: int) -> tuple[float, list[list[int]]]:
        return minimal_loop(prefill_session, decode_session, {}, carried, outputs.index("logits"), ids, new)

    profile = profile_step(directory, ids) if os.environ.get("BENCH_DECODE_PROFILE") else None
    ours(4), minimal(4)
    # alternating, twice as many rounds as elsewhere: the ratio of two near-equal rates needs the noise down
    rounds = [(ours(NEW_TOKENS), minimal(NEW_TOKENS)) for _ in range(2 * REPEATS)]
    rate, tokens = max(r[0][0] for r in rounds), rounds[0][0][1]
    floor = max(r[1][0] for r in rounds)
    return result | {"tokens_per_second": rate, "tokens": tokens, "minimal_loop_tokens_per_second": floor,
                     "minimal_tokens_equal": rounds[0][1][1] == tokens, "generate_vs_minimal": rate / floor} | (
        {"step_profile": profile} if profile else {})


def profile_step(directory: Path, ids: np.ndarray, steps: int = 16) -> dict[str, Any]:
    """Where one decode step of an ONNX bundle goes: ONNX Runtime's own profile of ``steps`` steps of the
    minimal loop (kernel time per operator type, as a share of the step's wall time), and the wall time per
    step outside ``run`` (the loop's own Python)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(Path("/tmp") / f"decode-profile-{os.getpid()}")
    prefill = ort.InferenceSession(str(directory / "prefill.onnx"), providers=["CPUExecutionProvider"])
    decode = ort.InferenceSession(str(directory / "decode.onnx"), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in decode.get_outputs()]
    carried = [(name.replace("present", "past", 1), i) for i, name in enumerate(outputs) if name.startswith("present")]
    rate, _ = minimal_loop(prefill, decode, {}, carried, outputs.index("logits"), ids, steps + 1)
    return ort_kernel_profile(Path(decode.end_profiling()), steps, len(ids) / rate * 1e6)


def measure_hf_onnx(directory: Path, ids: np.ndarray) -> dict[str, Any]:
    """transformers' artifacts: prefill returns ``past_key_values.layers.i.{keys,values}``, decode takes
    ``input.past_key_values…`` and returns ``output.past_key_values…``; both take ``position_ids``."""
    import onnxruntime as ort

    prefill = ort.InferenceSession(str(directory / "prefill.onnx"), providers=["CPUExecutionProvider"])
    decode = ort.InferenceSession(str(directory / "decode.onnx"), providers=["CPUExecutionProvider"])
    prefill_names = [o.name for o in prefill.get_outputs()]
    decode_names = [o.name for o in decode.get_outputs()]
    # the prefill's cache output i feeds input.<name>; later steps take decode's outputs by the same names
    carried_first = [("input." + name, i) for i, name in enumerate(prefill_names) if "past_key_values" in name]
    carried = [("input." + name.removeprefix("output."), i) for i, name in enumerate(decode_names)
               if "past_key_values" in name]
    assert [n for n, _ in carried_first] == [n for n, _ in carried], (prefill_names, decode_names)

    class Prefill:  # the minimal loop reads the prefill's cache by decode's output positions
        def get_outputs(self) -> Any:
            return [type("O", (), {"name": decode_names[i]})() for i in range(len(decode_names))]

        def run(self, _: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            out = dict(zip(prefill_names, prefill.run(None, feed)))
            return [out["logits"] if name == "logits" else out[name.removeprefix("output.")] for name in decode_names]

    def run(new: int) -> tuple[float, list[list[int]]]:
        return minimal_loop(Prefill(), decode, {}, carried, decode_names.index("logits"), ids, new, positions=True)

    rate, tokens = best(run)
    return {"tokens_per_second": rate, "tokens": tokens}


def measure_et_llm(directory: Path, ids: np.ndarray) -> dict[str, Any]:
    """ExecuTorch's LLM ``.pte``: ``forward(tokens [1, n], input_pos [1])`` -> the last position's logits, the
    cache kept and updated inside the program; batch 1 only."""
    import torch
    from executorch.extension.llm.custom_ops import (
        custom_ops,  # noqa: F401  (its update_cache / sdpa kernels)
    )
    from executorch.runtime import Runtime

    if len(ids) != 1:
        return {"error": "not run: ExecuTorch's Llama export is batch 1 only"}
    method = Runtime.get().load_program(directory / "model.pte").load_method("forward")

    def run(new: int) -> tuple[float, list[list[int]]]:
        logits = method.execute([torch.from_numpy(ids), torch.tensor([0], dtype=torch.long)])[0]
        tokens = []
        started = time.perf_counter()
        for step in range(new):
            token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
            tokens.append(token)
            if step == new - 1:
                break
            position = torch.tensor([ids.shape[1] + step], dtype=torch.long)
            logits = method.execute([torch.tensor([[token]], dtype=torch.long), position])[0]
        return (new - 1) / (time.perf_counter() - started), [tokens]

    rate, tokens = best(run)
    result = {"tokens_per_second": rate, "tokens": tokens}
    if os.environ.get("BENCH_DECODE_PROFILE"):
        result["etdump_profile"] = etdump_profile(directory / "model.pte", ids, whole_prompt_positions=False)
    return result


def measure_genai(directory: Path, ids: np.ndarray, threads: int | None = None) -> dict[str, Any]:
    sys.path.insert(0, str(GENAI_DIR))
    import onnxruntime_genai as og

    config = og.Config(str(directory))
    if threads is not None:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
    model = og.Model(config)

    def run(new: int) -> tuple[float, list[list[int]]]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=ids.shape[1] + new, batch_size=len(ids), do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)  # the prefill
        generator.generate_next_token()  # the first token, from the prefill's logits
        started = time.perf_counter()
        for _ in range(new - 1):  # each runs a decode step on the last token, then chooses the next
            generator.generate_next_token()
        elapsed = time.perf_counter() - started
        tokens = [[int(t) for t in generator.get_sequence(row)[ids.shape[1]:]] for row in range(len(ids))]
        return (new - 1) * len(ids) / elapsed, tokens

    rate, tokens = best(run)
    return {"tokens_per_second": rate, "tokens": tokens}


def measure(runtime: str, model: str, context: int, batch: int, built: dict[str, Any]) -> dict[str, Any]:
    """One configuration in a child process: its rate, tokens and peak RSS (``built``: the artifacts)."""
    directory = built.get((runtime, batch if runtime == "ours-pte" else 1))
    if runtime in BATCH_ONE and batch != 1:
        return {"error": f"not run: {runtime} serves batch 1 only"}
    if not isinstance(directory, Path):
        return {"error": f"not run: its artifacts failed to build ({directory})"}
    code = (f"import bench_decode as b, json; from pathlib import Path; "
            f"print('RESULT', json.dumps(b.child({runtime!r}, Path({str(directory)!r}), {model!r}, {context}, "
            f"{batch})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=BENCH,
                         env={**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{ROOT}"})
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    if run.returncode or not lines:
        return {"error": (run.stderr.strip().splitlines() or ["no output"])[-1][:400]}
    return json.loads(lines[-1].removeprefix("RESULT "))


def child(runtime: str, directory: Path, model: str, context: int, batch: int) -> dict[str, Any]:
    ids = prompt(model, context, batch)
    base, threads = runtime.removesuffix("-1t"), 1 if runtime.endswith("-1t") else None
    if base == "genai":
        result = measure_genai(directory, ids, threads)
    elif base.startswith("ours"):
        result = measure_ours(directory, ids, threads)
    else:
        result = {"eager": measure_eager, "hf-onnx": measure_hf_onnx, "et-llm": measure_et_llm}[base](directory, ids)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


# ── The run ──
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["llama-512x8", "tiny"], default="llama-512x8")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runtime", action="append", choices=RUNTIMES, help="only these (repeatable)")
    parser.add_argument("--rebuild", action="store_true", help="build the artifacts again")
    parser.add_argument("--profile", action="store_true",
                        help="add a per-step profile: ONNX Runtime's (kernel time per operator) to our ONNX rows, "
                        "ExecuTorch's ETDump (time per operator) to the in-place .pte and ET LLM rows")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decode.json")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="print the table of a results file and exit")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                        help="new tokens per row (more steps per timed run: the tiny model's steps take 50-90 us)")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    import importlib.metadata

    runtimes = args.runtime or RUNTIMES
    os.environ["BENCH_DECODE_NEW_TOKENS"] = str(args.new_tokens)
    if args.profile:
        os.environ["BENCH_DECODE_PROFILE"] = "1"  # read by the children
    results: dict[str, Any] = {
        "model": args.model,
        "versions": {p: importlib.metadata.version(p) for p in ("torch", "transformers", "onnxruntime", "executorch")}
        | {"onnxruntime-genai": GENAI},
        "load_average_at_start": os.getloadavg(), "cpus": os.cpu_count(),
        "settings": {"new_tokens": args.new_tokens, "repeats": REPEATS, "dtype": "float32", "greedy": True},
        "artifacts": {}, "rows": [],
    }
    built: dict[tuple[str, int], Any] = {}  # (runtime, batch) -> directory, or why it failed to build
    for runtime in runtimes:
        for batch in sorted({b if runtime == "ours-pte" else 1 for b in args.batches}):
            try:
                directory = built[runtime, batch] = artifact(runtime, args.model, batch, args.rebuild)
            except subprocess.CalledProcessError as error:
                built[runtime, batch] = f"{runtime}: build exited {error.returncode}"
                results["artifacts"][f"{runtime}-b{batch}"] = {"error": built[runtime, batch]}
                continue
            stamp = directory / ".built"
            results["artifacts"][directory.name] = json.loads(stamp.read_text()) if stamp.is_file() else {}
    for context in args.contexts:
        for batch in args.batches:
            row: dict[str, Any] = {"context": context, "batch": batch}
            for runtime in runtimes:
                print(f"{args.model} context {context} batch {batch}: {runtime}", file=sys.stderr, flush=True)
                row[runtime] = measure(runtime, args.model, context, batch, built)
            _compare(row, runtimes)
            results["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    results["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


def markdown(results: dict[str, Any]) -> str:
    """The results as docs/generation.md's "Decode speed" table."""
    lines = ["| context | batch | runtime / mode | tok/s | ms/token | vs eager | vs genai | vs ET LLM "
             "| generate() / minimal loop | tokens = eager | validated | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        for runtime, entry in row.items():
            if not isinstance(entry, dict):
                continue
            if "error" in entry:
                lines.append(f"| {row['context']} | {row['batch']} | {runtime} | error: {entry['error'][:90]} "
                             "| | | | | | | | |")
                continue
            cells = [entry.get("tokens_per_second"), entry.get("ms_per_token"), entry.get("vs_eager"), entry.get("vs_genai"), entry.get("vs_et_llm"),
                     entry.get("generate_vs_minimal"), entry.get("tokens_equal_eager"), entry.get("validation"),
                     entry.get("peak_rss_mb")]
            text = ["—" if c is None else ("yes" if c is True else "no" if c is False else str(c)) for c in cells]
            lines.append(f"| {row['context']} | {row['batch']} | {runtime} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def _compare(row: dict[str, Any], runtimes: list[str]) -> None:
    """Tokens against eager's, and every rate as a ratio to each anchor's (eager, genai), in place."""
    eager_tokens = row.get("eager", {}).get("tokens")
    for runtime in runtimes:
        entry = row[runtime]
        if "tokens" not in entry:
            continue
        if runtime != "eager" and eager_tokens is not None:
            entry["tokens_equal_eager"] = entry["tokens"] == eager_tokens
        for anchor, variants in ANCHORS.items():
            rates = [row[v]["tokens_per_second"] for v in variants if "tokens_per_second" in row.get(v, {})]
            if rates and runtime not in variants:
                entry[f"vs_{anchor}"] = round(entry["tokens_per_second"] / max(rates), 3)
    for runtime in runtimes:
        entry = row[runtime]
        for key in [k for k in entry if k.endswith("tokens_per_second") or k.endswith("_vs_minimal")]:
            entry[key] = round(entry[key], 3 if key.endswith("_vs_minimal") else 1)
        entry.pop("tokens", None)
        if "tokens_per_second" in entry:  # per-token decode time of one sequence
            entry["ms_per_token"] = round(1000 * row["batch"] / entry["tokens_per_second"], 2)


if __name__ == "__main__":
    main()
