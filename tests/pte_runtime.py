"""Running a written ``.pte`` as a user does: the file read back into a fresh ExecuTorch runtime program."""

from __future__ import annotations

from pathlib import Path

import torch


def run_pte(path: Path, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The outputs of ``forward`` of the program at ``path`` on ``inputs``, loaded from the file's bytes."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path.read_bytes())
    return list(program.load_method("forward").execute(inputs))
