import importlib.metadata

import torch
import torch.nn.functional as F

print("torch", torch.__version__, "sympy", importlib.metadata.version("sympy"))


class Codec(torch.nn.Module):
    """An audio codec in miniature (Xcodec's encoder strides 8, 5, 4, 2 , kernels 8, 9, 7, 1):
    encode to frames, decode each frame back to 320 samples and add the input, so the length must be 320
    times the number of frames the strides give."""

    def forward(self, audio):  # [batch, 1, samples]
        frames = audio
        for kernel, stride in ((8, 8), (9, 5), (7, 4), (1, 2)):
            frames = F.avg_pool1d(frames, kernel, stride)
        return frames.repeat_interleave(320, dim=-1) + audio


audio = torch.randn(2, 1, 1600)
dims = {"audio": {0: torch.export.Dim.AUTO, 2: torch.export.Dim.AUTO}}
try:
    program = torch.export.export(Codec(), (), {"audio": audio}, dynamic_shapes=dims)
    print("exported:", program.range_constraints)
except Exception as error:
    print(type(error).__name__ + ":", " ".join(str(error).split()))
