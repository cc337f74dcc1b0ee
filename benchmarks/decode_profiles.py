"""Per-step profiles for ``bench_decode.py --profile``: where one decode step's time goes, from each runtime's own
profiler (ONNX Runtime's session profile, ExecuTorch's ETDump) or by timing the method call against the loop around
it. Kept apart from the measuring script so that the bench reads as the run it is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np


def ort_kernel_profile(events_file: Path, steps: int, step_us: float) -> dict[str, Any]:
    """ONNX Runtime's profile of a session's last ``steps`` runs: kernel time per operator type per step, the
    session's ``run`` per step, and the wall time of a step (``step_us``) outside ``run``. Only kernels inside
    those runs count (an in-place bundle's one session also ran the prompt)."""
    events = json.loads(events_file.read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][-steps:]
    since = runs[0]["ts"]
    kernels: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= since:
            op = event["args"].get("op_name", "?")
            kernels[op] = kernels.get(op, 0.0) + event["dur"]
    run_us = sum(run["dur"] for run in runs) / steps
    kernel_us = {op: round(total / steps, 1) for op, total in sorted(kernels.items(), key=lambda kv: -kv[1])}
    return {"step_us": round(step_us, 1), "session_run_us": round(run_us, 1),
            "outside_run_us": round(step_us - run_us, 1), "kernels_us": round(sum(kernels.values()) / steps, 1),
            "kernel_us_by_op": dict(list(kernel_us.items())[:10]),
            "note": "profiling adds its own cost to every kernel; shares, not absolute times, are what count"}


def profile_ort_in_place(bundle: Any, directory: Path, ids: np.ndarray, steps: int = 16) -> dict[str, Any]:
    """ONNX Runtime's profile of ``steps`` decode steps of an in-place ONNX bundle, run by ``generate()``'s own
    session (``OrtInPlaceSession``: one binding, past and present one buffer) over a profiling session of the
    same ``step.onnx``; the prompt's run is left out of the kernel times."""
    import onnxruntime as ort
    import torch

    from exporters.bundle.stepping import OrtInPlaceSession

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(Path("/tmp") / f"decode-profile-{os.getpid()}")
    runner = bundle.components["step"].runner
    runner.session = ort.InferenceSession(str(directory / "step.onnx"), options, providers=["CPUExecutionProvider"])
    session = OrtInPlaceSession(bundle)
    logits = session.prefill({"input_ids": torch.from_numpy(ids), "attention_mask": torch.ones(ids.shape)}, {},
                             steps + 1)
    started = time.perf_counter()
    for _ in range(steps):
        logits = session.decode(logits.argmax(-1))
    step_us = (time.perf_counter() - started) / steps * 1e6
    return ort_kernel_profile(Path(runner.session.end_profiling()), steps, step_us)


def profile_in_place(bundle: Any, ids: np.ndarray, steps: int = 24) -> dict[str, Any]:
    """Where a decode step of an in-place ``.pte`` goes: the median time of the method's ``execute`` (the
    program: XNNPACK's delegated linears, the portable ops between them, the cache writes and the attention over
    all ``max_cache_len`` slots) against the median of the whole step of ``generate()``'s session (the token and
    position written, execute, the logits copied out, argmax)."""
    import torch

    from exporters.bundle.stepping import InPlaceSession

    session = InPlaceSession(bundle)
    logits = session.prefill({"input_ids": torch.from_numpy(ids), "attention_mask": torch.ones(ids.shape)}, {}, steps)
    method, execute, whole = session.method, [], []
    original = method.execute

    def timed(arguments: list[Any]) -> Any:
        started = time.perf_counter()
        try:
            return original(arguments)
        finally:
            execute.append(time.perf_counter() - started)

    session.method = type("Timed", (), {"execute": staticmethod(timed)})()
    for _ in range(steps):
        started = time.perf_counter()
        logits = session.decode(logits.argmax(-1))
        whole.append(time.perf_counter() - started)
    execute_ms, step_ms = 1000 * float(np.median(execute)), 1000 * float(np.median(whole))
    return {"steps": steps, "execute_ms": round(execute_ms, 3), "step_ms": round(step_ms, 3),
            "outside_execute_ms": round(step_ms - execute_ms, 3), "execute_share": round(execute_ms / step_ms, 3),
            "max_cache_len": bundle.metadata.generation["max_cache_len"]}


def etdump_profile(pte: Path, ids: np.ndarray, whole_prompt_positions: bool, steps: int = 16) -> dict[str, Any]:
    """ExecuTorch's own per-operator profile (ETDump, in the pip build) of ``steps`` greedy decode steps of a
    ``.pte`` that keeps its cache inside (ours in-place: positions of every prompt token; ET's LLM export: the
    prompt's start position): milliseconds per decode step of ``Method::execute``, of the delegate calls and of
    every operator or XNNPACK kernel above 0.005 ms, averaged over the steps (run 0, the prompt, left out)."""
    import tempfile

    import torch
    from executorch.devtools import Inspector
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (their runtime kernels)
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(pte), enable_etdump=True)
    prompt = torch.from_numpy(ids)
    positions = torch.arange(ids.shape[1]) if whole_prompt_positions else torch.tensor([0])
    logits = module.forward([prompt, positions])[0]
    for step in range(steps):
        token = logits.reshape(-1, logits.shape[-1])[-1].argmax().reshape(1, 1)
        logits = module.forward([token, torch.tensor([ids.shape[1] + step])])[0]
    with tempfile.TemporaryDirectory() as scratch:
        dump = Path(scratch) / "etdump.etdp"
        module.write_etdump_result_to_file(str(dump), str(Path(scratch) / "debug.bin"))
        inspector = Inspector(etdump_path=str(dump))
    per_step: dict[str, float] = {}
    for block in inspector.event_blocks:
        for event in block.events:
            raw = list(event.perf_data.raw) if event.perf_data is not None else []
            if len(raw) == steps + 1:  # one value per run
                name = event.name + (" [xnnpack]" if event.is_delegated_op else "")
                per_step[name] = per_step.get(name, 0.0) + sum(raw[1:]) / steps
    top = {name: round(ms, 3) for name, ms in sorted(per_step.items(), key=lambda item: -item[1]) if ms >= 0.005}
    return {"steps": steps, "ms_per_step": top}
