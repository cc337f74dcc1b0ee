"""What the ExecuTorch exporter hands to ExecuTorch and takes back, beside its stages (exporters.executorch.exporter).

The program given to the lowering (dicts of its own, since delegation edits them), the config ``to_executorch``
serializes with (mutated buffers that keep their values), and the serialized ``.pte``: written into a bundle, or
run from memory (benchmarks compare that path with the bundle's; validation always loads the written file).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

__all__ = ["PteRunner", "backend_config", "owning_its_dicts", "save_pte"]


def owning_its_dicts(program: ExportedProgram) -> ExportedProgram:
    """``program`` for ExecuTorch to lower: the same graph and tensors, in state_dict and constants dicts of its own.

    Delegation removes each constant it moved into a delegate from the program it lowers (ExecuTorch 1.5.1,
    ``_unsafe_adjust_original_program`` in exir/lowered_backend_module.py), and the edge program shares the
    constants dict torch.export made, so afterwards ``program.module()`` (which the second validation shape's
    guards come from, and which a user may call) fails with ``KeyError`` on every non-persistent buffer or
    lifted constant an XNNPACK partition consumed (Nemotron3_5TranscribeAudioModel's speaker embedding).
    """
    lowered = copy.copy(program)
    lowered._state_dict = dict(program.state_dict)
    lowered._constants = dict(program.constants)
    return lowered


class PteRunner:
    """Runs the serialized program in the ExecuTorch runtime; loaded on first use, then reused."""

    def __init__(self, buffer: bytes):
        self.buffer = buffer
        self.program: Any = None  # held with the method: the runtime program must outlive it
        self.method: Any = None

    def __call__(self, inputs: Mapping[str, Any]) -> list[torch.Tensor]:
        if self.method is None:
            from executorch.runtime import Runtime

            self.program = Runtime.get().load_program(self.buffer)
            self.method = self.program.load_method("forward")
        flat = [leaf for leaf in pytree.tree_leaves(list(inputs.values())) if isinstance(leaf, torch.Tensor)]
        return list(self.method.execute(flat))


def save_pte(buffer: bytes, path: Path) -> Path:
    path.write_bytes(buffer)
    return path


def backend_config(program: ExportedProgram) -> Any:
    """``to_executorch``'s config: every buffer the graph mutates keeps its initial value in the ``.pte``.

    ExecuTorch serializes only the shape and dtype of a buffer the graph mutates, its initial state being
    "meaningless" (executorch/exir/emit/_emitter.py) unless a pass sets ``meta["et_init_buffer"]``; the runtime
    then starts from whatever its planned memory holds. That broke a table the model re-assigns in forward and
    reads (CTRL's ``self.pos_encoding = self.pos_encoding.to(...)``, modeling_ctrl.py:317: every output of
    CTRLModel wrong), and it holds no better for zeros: an in-place KV cache (exporters.generation.inplace) reads
    its slots past the current position with attention weight 0, and ``0 x NaN`` is NaN, so its zeros must be
    what the method starts from. ``InitializedMutableBufferPass`` keeps the values; the runtime copies them in
    when the method is loaded (once, not per call: tests/test_generation_inplace.py).
    """
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    signature, mutated = program.graph_signature, set(program.graph_signature.buffers_to_mutate.values())
    stateful = [name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated]
    return ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(stateful)] if stateful else [])
