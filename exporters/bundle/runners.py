"""One runner per runtime: opens a bundle component's file and runs it on its flat input leaves.

A runner knows nothing about the model: it takes ``{leaf name: tensor}`` for the component's inputs (the
loader has already checked them against the manifest) and returns the artifact's outputs as a flat list
of tensors in manifest order. Each runtime is imported when its runner is first made, so loading an ONNX
bundle never imports ExecuTorch. Every runner object is fresh: nothing is shared with the exporter that
wrote the file (validation relies on that).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from exporters.bundle.format import BundleError, ComponentSpec

__all__ = ["RUNNERS", "Runner", "UnloadableArtifact", "open_runner"]

Runner = Callable[[Mapping[str, torch.Tensor]], list[torch.Tensor]]


class OnnxRuntimeRunner:
    """``onnxruntime.InferenceSession`` on the file (external weights beside it are found by ONNX Runtime)."""

    def __init__(self, path: Path, spec: ComponentSpec, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]

    def __call__(self, feed: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        arrays = {name: feed[name].detach().cpu().contiguous().numpy() for name in self.names}
        return [torch.from_numpy(out) for out in self.session.run(None, arrays)]


class ExecutorchRunner:
    """The ExecuTorch runtime's ``Program`` loaded from the file, and its method (the program must outlive it)."""

    def __init__(self, path: Path, spec: ComponentSpec):
        from executorch.runtime import Runtime

        with contextlib.suppress(ImportError):  # the kernels of ExecuTorch's LLM custom ops (an in-place cache's)
            from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
        self.program = Runtime.get().load_program(path)
        self.method = self.program.load_method(spec.method)
        self.names = [t.name for t in spec.inputs]

    def __call__(self, feed: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        outputs = self.method.execute([feed[name].contiguous() for name in self.names])
        return [out for out in outputs if isinstance(out, torch.Tensor)]  # constants come from the manifest


class TorchExportRunner:
    """``torch.export.load`` of the ``.pt2``; its module is called with the arguments rebuilt from the leaves
    (the loader registered the pytree types the program's specs name before this runs). The file is read
    with ``exporters.bundle.pt2_loading.load_program``: torch's own load, without its repeated work."""

    def __init__(self, path: Path, spec: ComponentSpec):
        from exporters.bundle.pt2_loading import load_program

        self.module = load_program(path).module()
        self.in_spec = pytree.treespec_loads(spec.in_spec)
        self.names = [t.name for t in spec.inputs]

    def __call__(self, feed: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        arguments = pytree.tree_unflatten([feed[name] for name in self.names], self.in_spec)
        with torch.no_grad():
            outputs = self.module(**arguments)
        return [leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)]


RUNNERS: dict[str, Callable[[Path, ComponentSpec], Runner]] = {
    "onnxruntime": OnnxRuntimeRunner,
    "executorch": ExecutorchRunner,
    "torch.export": TorchExportRunner,
}


def open_runner(directory: Path, spec: ComponentSpec, threads: int | None = None) -> Runner:
    """A fresh runner for ``spec``'s file in ``directory``; ``threads`` sets ONNX Runtime's intra-op threads (the
    other runtimes keep their own)."""
    if spec.runtime not in RUNNERS:
        raise ValueError(f"unknown runtime {spec.runtime!r} in the manifest; known: {', '.join(RUNNERS)}")
    path = Path(directory) / spec.file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the manifest names this file, but it is not in the bundle")
    try:
        if threads is not None and spec.runtime == "onnxruntime":
            return OnnxRuntimeRunner(path, spec, threads)
        return RUNNERS[spec.runtime](path, spec)
    except Exception as error:  # truncated, corrupted, or an operator the runtime lacks: each says it its own way
        first = (str(error).strip().splitlines() or [""])[0]
        raise UnloadableArtifact(f"{path}: {spec.runtime} cannot load it ({type(error).__name__}: {first})") from error


class UnloadableArtifact(BundleError, RuntimeError):
    """A component's file that its runtime cannot load (truncated, corrupted, or needing an operator the
    runtime lacks): a bad bundle (``BundleError``, exit 2 in the CLI) and a runtime failure alike."""
