import collections, io, time
import sympy
import torch
from torch.export import Dim, export, load, save


class Model(torch.nn.Module):
    def forward(self, x):
        for _ in range(200):
            x = x.sin() + 1
        return x


buffer = io.BytesIO()
save(export(Model(), (torch.ones(2, 8),), dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}}), buffer)

texts, seconds, original = collections.Counter(), [0.0], sympy.sympify


def counting(value, *args, **kwargs):
    start = time.perf_counter()
    try:
        return original(value, *args, **kwargs)
    finally:
        if isinstance(value, str):
            texts[value] += 1
            seconds[0] += time.perf_counter() - start


sympy.sympify = counting  # serialize.py calls it as sympy.sympify(...)
buffer.seek(0)
start = time.perf_counter()
load(buffer)
total = time.perf_counter() - start
print(f"torch.export.load: {total:.3f} s; sympy.sympify on text: {sum(texts.values())} calls, "
      f"{len(texts)} distinct texts, {seconds[0]:.3f} s ({seconds[0] / total:.0%} of the load)")
print("most repeated:", texts.most_common(3))
assert sum(texts.values()) == len(texts), (
    f"torch.export.load parsed {len(texts)} distinct expression texts {sum(texts.values())} times "
    f"(expected each text parsed once)")
