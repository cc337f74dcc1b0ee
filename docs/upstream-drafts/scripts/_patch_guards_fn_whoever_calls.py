import torch
from torch.export import Dim


class Rows(torch.nn.Module):
    def forward(self, input_ids):  # batch x 4 codebook rows, as MusicgenMelody's decoder
        return input_ids.reshape(-1, 4, input_ids.shape[-1]).sum(1)


program = torch.export.export(Rows(), (torch.zeros(8, 5, dtype=torch.long),),
                              dynamic_shapes={"input_ids": {0: Dim.AUTO, 1: Dim.AUTO}})
module = program.module()
print(torch.__version__, "guards:", hasattr(module, "_guards_fn"))
try:
    module(torch.zeros(7, 5, dtype=torch.long))
    print("7 rows: accepted by the module, then:")
except Exception as error:
    print("7 rows:", type(error).__name__, str(error).splitlines()[0][:120])
