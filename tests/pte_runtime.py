"""Running a written ``.pte`` as a user does: the file read back into a fresh ExecuTorch runtime program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch


def run_pte(path: Path, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The outputs of ``forward`` of the program at ``path`` on ``inputs``, loaded from the file's bytes."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path.read_bytes())
    return list(program.load_method("forward").execute(inputs))


def run_pte_in_child(path: Path, inputs: list[torch.Tensor]) -> subprocess.CompletedProcess:
    """Run the program at ``path`` on ``inputs`` in a new interpreter, for a program that may kill its process
    (a runtime fault, SIGFPE or SIGSEGV, that no exception can catch); a negative returncode names the signal."""
    saved = path.with_suffix(".inputs.pt")
    torch.save(inputs, saved)
    code = (
        "import sys, torch; from executorch.runtime import Runtime; "
        "program = Runtime.get().load_program(open(sys.argv[1], 'rb').read()); "  # must outlive its method
        "program.load_method('forward').execute(torch.load(sys.argv[2]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), str(saved)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
