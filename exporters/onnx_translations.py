"""Stage 4 of the ONNX exporter, continued: aten translations for ops torchlib lowers wrongly or not at all.

Registered with ``exporter_onnx._register_translation`` like the ones in ``exporter_onnx`` (which imports
this module at its end, so importing the exporter fills the table); ``grep -n "^def _aten_"`` over
``exporters/*.py`` lists them all. Each function is traced by torch.onnx with onnx_ir values: a value's
``shape`` holds the sizes the torch.export program proved (ints) or symbols, and its rank is always known.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from exporters.exporter_onnx import _register_translation
from exporters.utils import record_hit


def _static_size(value: Any, dim: int) -> int | None:
    """The size of ``value`` along ``dim`` when the program fixed it, else None (a symbol or no shape)."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    size = shape[dim]
    return size if isinstance(size, int) else None


def _squeeze_size_one_dims(self: Any, dims: list[int]) -> Any:
    """``Squeeze`` over the dims whose size is 1, ``Identity`` when there is none (torch's no-op case)."""
    from onnxscript import opset18 as op

    shape = getattr(self, "shape", None)
    if shape is None:  # no shape to decide with: what torchlib does
        return op.Squeeze(self, op.Constant(value_ints=list(dims)))
    rank = len(shape)
    if rank == 0:
        return op.Identity(self)
    axes = sorted({dim % rank for dim in dims})
    ones = [dim for dim in axes if _static_size(self, dim) == 1]
    if len(ones) != len(axes):
        record_hit("_aten_squeeze_dims_of_size_one")
    return op.Squeeze(self, op.Constant(value_ints=ones)) if ones else op.Identity(self)


@_register_translation(torch.ops.aten.squeeze.dim, dependency="onnxscript")
def _aten_squeeze_dims_of_size_one(self: Any, dim: int) -> Any:
    """``aten.squeeze.dim``: squeeze only a dim of size 1; torch's ``squeeze(dim)`` of any other size is a no-op.

    torchlib's ``aten_squeeze_dim`` emits ``Squeeze(axes=[dim])`` whatever the dim's size, and ONNX's Squeeze
    must fail on a dim that is not 1: the RNNT joint of Parakeet and Nemotron ASR (``logits.squeeze(2)`` on
    (batch, frames, tokens, vocab) logits with 8 tokens) loads in ONNX Runtime with ``[ShapeInferenceError]
    Dimension of input 2 must be 1 instead of 8``. The program proved every static size, so the choice is
    made at export: ``Squeeze`` on the size-1 dims, ``Identity`` otherwise. A symbolic dim is never 1 in a
    torch.export program (0/1 are specialised), so it is not squeezed either. No upstream issue found;
    draft with reproducer: docs/upstream-drafts/onnxscript-squeeze-dim-not-size-one.md.
    """
    return _squeeze_size_one_dims(self, [dim])


@_register_translation(torch.ops.aten.squeeze.dims, dependency="onnxscript")
def _aten_squeeze_dims_list_of_size_one(self: Any, dim: list[int]) -> Any:
    """``aten.squeeze.dims`` (``squeeze((1, 2))``): as ``_aten_squeeze_dims_of_size_one``, per listed dim.

    torchlib's ``aten_squeeze_dim`` handles the list overload the same way (every listed axis squeezed), so
    a listed dim of size 8 fails ONNX Runtime's shape inference just as ``squeeze(dim)`` does.
    """
    return _squeeze_size_one_dims(self, list(dim))


@_register_translation(torch.ops.aten.cummax.default, dependency="onnxscript")
def _aten_cummax(self: Any, dim: int) -> tuple[Any, Any]:
    """``aten.cummax``: running maximum and the index it came from, as a masked max over a (j ≤ i) triangle.

    torch.onnx has no translation for ``cummax`` (``DispatchError`` for aten.cummax.default) and ONNX has no
    running-max op: MM Grounding DINO's text mask builder takes ``torch.cummax`` over special-token positions
    (modeling_mm_grounding_dino.py:1751-1753). With ``x`` along ``dim`` as ``x[j]``: ``values[i] = max(x[j] for
    j ≤ i)``, and ``indices[i]`` is the last ``j ≤ i`` where ``x[j] == values[i]`` (torch returns the latest
    of tied maxima: ``cummax([1, 1])`` gives indices ``[0, 1]``). Masked-out entries take the tensor's own
    minimum, so any dtype works. Cost: a (length × length) broadcast per row, fine for token-mask lengths; the
    length may stay dynamic. A NaN does not propagate as in torch. No upstream issue found; draft with
    reproducer: docs/upstream-drafts/onnxscript-cummax.md.
    """
    from onnxscript import opset18 as op

    record_hit("_aten_cummax")
    rank = len(self.shape)
    if rank == 0:
        return op.Identity(self), op.Constant(value=ir.tensor(0, dtype=ir.DataType.INT64))
    dim = dim % rank
    trailing = list(range(2, rank - dim + 1))  # (j, i) then one axis per dim after ``dim``
    length = op.Shape(self, start=dim, end=dim + 1)
    positions = op.Range(op.Constant(value_int=0), op.Squeeze(length), op.Constant(value_int=1))
    column = op.Unsqueeze(positions, op.Constant(value_ints=[1]))  # j, shape (L, 1)
    earlier = op.LessOrEqual(column, op.Unsqueeze(positions, op.Constant(value_ints=[0])))  # j <= i, (L, L)
    if trailing:
        earlier = op.Unsqueeze(earlier, op.Constant(value_ints=trailing))
        column = op.Unsqueeze(column, op.Constant(value_ints=trailing))
    by_j = op.Unsqueeze(self, op.Constant(value_ints=[dim + 1]))  # x[..., j, 1, ...]
    lowest = op.ReduceMin(self, keepdims=0)
    values = op.ReduceMax(op.Where(earlier, by_j, lowest), op.Constant(value_ints=[dim]), keepdims=0)
    reached = op.And(earlier, op.Equal(by_j, op.Unsqueeze(values, op.Constant(value_ints=[dim]))))
    none = op.Constant(value=ir.tensor(-1, dtype=ir.DataType.INT64))
    indices = op.ReduceMax(op.Where(reached, column, none), op.Constant(value_ints=[dim]), keepdims=0)
    return values, indices
