import importlib.util
import tempfile
from pathlib import Path

import torch
from torch.export import Dim

# ExecuTorch's own passes call ExportedProgram.module(); torch decides whether to keep the input guards by the
# caller's file path. The same call is made here from this script and from a module written under a folder
# whose name contains "executorch" (as any application's folder may).
CALLER = '''
def unlifted(program):
    return program.module()
'''


class Rows(torch.nn.Module):
    def forward(self, input_ids):  # batch x 4 codebook rows, as MusicgenMelody's decoder
        return input_ids.reshape(-1, 4, input_ids.shape[-1]).sum(1)


def called_with_7_rows(module):
    try:
        module(torch.zeros(7, 5, dtype=torch.long))
        return "accepted"
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"


folder = Path(tempfile.mkdtemp()) / "executorch_app"
folder.mkdir()
(folder / "caller.py").write_text(CALLER)
spec = importlib.util.spec_from_file_location("caller", folder / "caller.py")
caller = importlib.util.module_from_spec(spec)
spec.loader.exec_module(caller)

program = torch.export.export(Rows(), (torch.zeros(8, 5, dtype=torch.long),),
                              dynamic_shapes={"input_ids": {0: Dim.AUTO, 1: Dim.AUTO}})
here = called_with_7_rows(program.module())
there = called_with_7_rows(caller.unlifted(program))
print(torch.__version__)
print("module() called here:                   7 rows ->", here)
print("module() called from executorch_app/...: 7 rows ->", there)
assert there == here, (f"ExportedProgram.module() called from a path containing 'executorch' checks no input guards: "
                       f"expected {here!r}, got {there!r}")
