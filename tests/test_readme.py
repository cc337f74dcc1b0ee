"""The README runs as written: every Python block and every line of every shell block, in document order.

The blocks run as a user runs them, one after another in one working directory: a copy of the repository's
tracked files (what a fresh clone holds), with the virtual environment's ``bin`` first on ``PATH`` (as
``source .venv/bin/activate`` puts it), so a later block finds what an earlier one wrote (``out/bert``,
``my-checkpoint``). Each shell line must exit 0, or the code its comment announces ("exits 1"). A block that
exports for minutes (ExecuTorch lowerings, the environment setup) is marked slow; the default run keeps the
others, in the same order. One line is not run, on purpose: the one that runs this test suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NOT_RUN = {"HF_HUB_OFFLINE=1 .venv/bin/python -m pytest": "runs the test suite this test is part of"}
# Blocks that take a minute or more (the environment's setup, ExecuTorch lowerings, the three generation
# exports), and the block that asks the live package index for new releases (`exportbot watch`: what it finds,
# and so how long it audits, depends on the day): run by hand with `pytest -m slow`.
SLOW_WHEN = ("scripts/setup.sh", "--backend executorch", "text2text-generation", "exportbot watch")


@dataclass
class Block:
    index: int
    language: str
    text: str

    @property
    def lines(self) -> list[str]:
        """The shell lines to run (comment lines and the lines in ``NOT_RUN`` left out)."""
        lines = [line.strip() for line in self.text.splitlines()]
        return [line for line in lines if line and not line.startswith("#") and line not in NOT_RUN]

    @property
    def slow(self) -> bool:
        return any(marker in self.text for marker in SLOW_WHEN)


BLOCKS = [Block(i, language, text) for i, (language, text) in
          enumerate(re.findall(r"^```(python|bash)\n(.*?)^```", README, flags=re.M | re.S))]


def expected_exit(line: str) -> int:
    """0, or the code the line's comment announces (``# ... exits 1``)."""
    comment = line.split("  #", 1)[1] if "  #" in line else ""
    announced = re.search(r"\bexits (\d+)", comment)
    return int(announced.group(1)) if announced else 0


def test_readme_has_python_and_shell_blocks():
    assert sum(b.language == "python" for b in BLOCKS) >= 2 and sum(b.language == "bash" for b in BLOCKS) >= 4


def test_every_shell_line_is_run_but_the_test_suite_itself():
    shell = [line.strip() for b in BLOCKS if b.language == "bash" for line in b.text.splitlines() if line.strip()]
    left_out = [line for line in shell if line not in {x for b in BLOCKS for x in b.lines}]
    assert left_out == list(NOT_RUN), left_out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A copy of the tracked files, where the blocks run in order (module scope: later blocks see earlier ones'
    files)."""
    copy = tmp_path_factory.mktemp("readme") / "exportbot"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def _environment(workspace: Path) -> dict[str, str]:
    """PATH as after ``source .venv/bin/activate``: the copy's own environment once the setup block built
    it, else this checkout's (the code is the same: it is a copy of it)."""
    own = workspace / ".venv" / "bin"
    path = os.pathsep.join(str(p) for p in (own, ROOT / ".venv" / "bin", Path(sys.executable).parent) if p.is_dir())
    return {**os.environ, "PATH": f"{path}{os.pathsep}{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT)}


def _run_block(block: Block, workspace: Path) -> None:
    env = _environment(workspace)
    if block.language == "python":
        completed = subprocess.run([sys.executable, "-c", block.text], cwd=workspace, env=env, capture_output=True,
                                   text=True, timeout=900)
        assert completed.returncode == 0, completed.stderr[-3000:]
        return
    for line in block.lines:
        completed = subprocess.run(["bash", "-c", line], cwd=workspace, env=env, capture_output=True, text=True,
                                   timeout=1200)
        assert completed.returncode == expected_exit(line), f"{line}\nexit {completed.returncode}\n" \
                                                            f"{completed.stdout[-1500:]}\n{completed.stderr[-3000:]}"


@pytest.mark.parametrize("block", [pytest.param(b, marks=[pytest.mark.slow] if b.slow else [], id=f"block{b.index}")
                                   for b in BLOCKS])
def test_readme_block_runs(block: Block, workspace: Path):
    _run_block(block, workspace)
