"""Stage 4 of the ONNX exporter: aten translations for ops torchlib lowers wrongly or not at all.

``_ONNX_TRANSLATION_TABLE`` maps an aten op to the onnxscript function that replaces torchlib's lowering;
each ``_aten_*`` function below registers itself with ``_register_translation(op, upstream=...,
dependency=...)``, and the exporter (which imports this module) hands ``translation_table(without)`` to
``torch.onnx.export``. ``grep -n "^def _aten_" exporters/onnx/translations.py`` lists them all. Each function is traced by torch.onnx with onnx_ir values: a value's
``shape`` holds the sizes the torch.export program proved (ints) or symbols, and its rank is always known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import from_torch_dtype, to_torch_dtype

from exporters.fx_rewrites import emitter, replace_node
from exporters.utils import Workaround, announce_workaround, record_hit, register_fx_node_fix

# aten op → onnxscript function, for ops whose default lowering is missing or wrong. Register with
# `_register_translation(op, upstream=..., dependency=...)` above an `_aten_*` onnxscript function.
_ONNX_TRANSLATION_TABLE: dict[Any, Callable] = {}
_TRANSLATION_NAMES: dict[Any, str] = {}


def _register_translation(op: Any, *, upstream: str | None = None, dependency: str | None = None) -> Callable:
    """``op`` is an OpOverload, or the ``namespace::name`` of a custom op the installed release does not
    register (then the workaround is listed but has nothing to translate)."""

    def decorate(function: Callable) -> Callable:
        name = getattr(function, "name", None) or function.__name__
        announce_workaround(Workaround(name, "onnx_translation", "onnx", function, (str(op),), upstream, dependency))
        if not isinstance(op, str):
            _ONNX_TRANSLATION_TABLE[op] = function
            _TRANSLATION_NAMES[op] = name
        return function

    return decorate


def translation_table(without: frozenset[str]) -> dict[Any, Callable]:
    return {op: f for op, f in _ONNX_TRANSLATION_TABLE.items() if _TRANSLATION_NAMES[op] not in without}


def _transformers_op(name: str) -> Any:
    """``torch.ops.transformers.<name>.default``; importing the MoE integration registers the custom op.

    Releases before the op existed (transformers 5.0.0 has no ``grouped_mm_fallback``) give its
    ``transformers::<name>`` string instead: importing this module must not fail on them.
    """
    try:
        import transformers.integrations.moe  # noqa: F401
    except ImportError:
        return f"transformers::{name}"
    packet = getattr(torch.ops.transformers, name, None)
    return f"transformers::{name}" if packet is None else packet.default


@_register_translation(
    _transformers_op("grouped_mm_fallback"),
    upstream="https://github.com/microsoft/onnxscript/pull/3017",
    dependency="onnxscript",
)
def _aten_grouped_mm_fallback(input: Any, weight: Any, offs: Any) -> Any:
    """Lower transformers' opaque ``grouped_mm_fallback`` (``_grouped_mm`` with ``offs``) to one MatMul per expert.

    MoE experts on CPU/fp32 dispatch through the custom op ``transformers::grouped_mm_fallback(input (S, K),
    weight (G, K, N), offs (G,))``: rows ``offs[g-1]:offs[g]`` of ``input`` (sorted by expert) times
    ``weight[g]``, rows past ``offs[-1]`` left zero. torch.onnx has no translation for it, and torchlib's
    ``aten::_grouped_mm`` raises on ``offs``. ``G`` is static (a weight dim); token counts stay dynamic.
    """
    from onnxscript import opset18 as op

    groups = weight.shape[0]
    if not isinstance(groups, int):
        raise ValueError("grouped_mm_fallback: the number of experts (weight.shape[0]) must be static")
    record_hit("_aten_grouped_mm_fallback")
    axis0 = op.Constant(value_ints=[0])
    offs = op.Cast(offs, to=ir.DataType.INT64)
    ends = op.Split(offs, axis=0, num_outputs=groups) if groups > 1 else [offs]
    weights = op.Split(weight, axis=0, num_outputs=groups) if groups > 1 else [weight]
    # One SplitToSequence cuts the rows by expert (a Slice per expert makes the optimizer's pairwise
    # SlicesSplit rule quadratic: minutes for 384 experts); the last chunk is the rows past offs[-1].
    starts = op.Concat(axis0, *ends[:-1], axis=0)
    tail = op.Sub(op.Shape(input, start=0, end=1), ends[-1])
    chunks = op.SplitToSequence(input, op.Concat(op.Sub(offs, starts), tail, axis=0), axis=0)
    outputs = [
        op.MatMul(op.SequenceAt(chunks, op.Constant(value_int=g)), op.Squeeze(expert, axis0))
        for g, expert in enumerate(weights)
    ]
    result = op.Concat(*outputs, axis=0) if groups > 1 else outputs[0]
    # rows past offs[-1] (none when every token is routed) stay zero, as in the eager fallback
    pads = op.Concat(op.Constant(value_ints=[0, 0]), tail, op.Constant(value_ints=[0]), axis=0)
    return op.Pad(result, pads)


@_register_translation(torch.ops.aten._is_all_true.default, dependency="onnxscript")
def _aten_is_all_true(self: Any) -> Any:
    """Translate ``aten._is_all_true`` (from ``torch._check_tensor_all``) as "no element is False".

    transformers' ``torch_compilable_check(tensor_cond, ...)`` calls ``torch._check_tensor_all`` while
    tracing, which leaves ``_is_all_true`` feeding an assertion; torchlib has no translation for it. The
    assertion itself is dropped by torch.onnx, this only has to produce the 0-d bool. Empty input → True.
    Not reported upstream yet: the ready-to-file onnxscript issue is docs/upstream-drafts/_aten_is_all_true.md.
    """
    from onnxscript import opset18 as op

    record_hit("_aten_is_all_true")
    falses = op.ReduceSum(op.Cast(op.Not(op.Cast(self, to=ir.DataType.BOOL)), to=ir.DataType.INT64), keepdims=0)
    return op.Equal(falses, op.Constant(value_int=0))


def _static_size(value: Any, dim: int) -> int | None:
    """The size of ``value`` along ``dim`` when the program fixed it, else None (a symbol or no shape)."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    size = shape[dim]
    return size if isinstance(size, int) else None


def _squeeze_size_one_dims(self: Any, dims: list[int], workaround: str) -> Any:
    """``Squeeze`` over the dims whose size is 1, ``Identity`` when there is none (torch's no-op case); a hit
    of ``workaround`` only when a listed dim is left in place, where torchlib's Squeeze would have failed."""
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
        record_hit(workaround)
    return op.Squeeze(self, op.Constant(value_ints=ones)) if ones else op.Identity(self)


@_register_translation(torch.ops.aten.squeeze.dim, dependency="onnxscript")
def _aten_squeeze_dims_of_size_one(self: Any, dim: int) -> Any:
    """``aten.squeeze.dim``: squeeze only a dim of size 1; torch's ``squeeze(dim)`` of any other size is a no-op.

    torchlib's ``aten_squeeze_dim`` emits ``Squeeze(axes=[dim])`` whatever the dim's size, and ONNX's Squeeze
    must fail on a dim that is not 1: the RNNT joint of Parakeet and Nemotron ASR (``logits.squeeze(2)`` on
    (batch, frames, tokens, vocab) logits with 8 tokens) loads in ONNX Runtime with ``[ShapeInferenceError]
    Dimension of input 2 must be 1 instead of 8``. The program proved every static size, so the choice is
    made at export: ``Squeeze`` on the size-1 dims, ``Identity`` otherwise. A symbol of an input dim is never
    1 (0/1 are specialised); a symbolic size that torch.export guarded to 1 (an expression of a symbol) is
    written as a ``select`` before translation (``_fix_squeeze_of_a_dim_guarded_to_one``). No upstream issue
    found; draft with reproducer: docs/upstream-drafts/_aten_squeeze_dims_of_size_one.md.
    """
    return _squeeze_size_one_dims(self, [dim], "_aten_squeeze_dims_of_size_one")


def select_squeezed_symbolic_dims(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.squeeze.dim(s)`` that removed a symbolic dim as ``aten.select.int(x, dim, 0)`` per removed dim.

    torch.export decides ``squeeze(d)`` of a symbolic size by its sample value and guards the decision: a
    size that is an expression of an input's symbol (``((h - 1) // 16 - 2) // 3 + 1``, 1 for a range of
    heights) is guarded equal to 1 and removed, the program's output having one dim less. The translation
    sees only a symbolic size it cannot prove 1, and keeps the dim. ``select(d, 0)`` of a dim of size 1 is the
    same tensor without it, so the ONNX graph follows the program's decision. Rewritten only when every
    listed dim that is 1 or symbolic was removed (the output rank says so); returns True when it rewrote.
    The guard stays the program's: an ONNX graph checks none, so an input outside it (a pooled height of 2)
    takes row 0 where the torch program would refuse it, as every guard torch.export adds is lost in ONNX.
    """
    aten = torch.ops.aten
    if node.op != "call_function" or node.target not in (aten.squeeze.dim, aten.squeeze.dims):
        return False
    source, listed = node.args[0], node.args[1]
    before, after = source.meta.get("val"), node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor) or before.dim() == 0:
        return False
    dims = sorted({d % before.dim() for d in ([listed] if isinstance(listed, int) else listed)})
    symbolic = [d for d in dims if not isinstance(before.shape[d], int)]
    candidates = [d for d in dims if d in symbolic or before.shape[d] == 1]
    if not symbolic or before.dim() - after.dim() != len(candidates):
        return False
    emit, result = emitter(graph_module, node), source
    for dim in reversed(candidates):  # from the last: earlier dims keep their index
        result = emit(aten.select.int, result, dim, 0)
    return replace_node(graph_module, node, result)


@register_fx_node_fix(
    "onnx",
    dependency="torch",
    internal="it completes exportbot's own squeeze translation (_aten_squeeze_dims_of_size_one keeps a symbolic dim "
    "it cannot prove 1): with torchlib's own squeeze the same PP-OCRv6 export loads in ONNX Runtime (a standalone "
    "script, 2026-12-05), so the upstream bug is the one _aten_squeeze_dims_of_size_one's draft files",
)
def _fix_squeeze_of_a_dim_guarded_to_one(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Squeeze a symbolic dim that torch.export guarded to size 1 as ``select(dim, 0)``: the translation keeps it.

    PP-OCRv6's text recogniser pools its 64-pixel image height to 1 and squeezes it (``((h - 1) // 16 - 2) // 3
    + 1``, symbolic under dynamic shapes): the ONNX graph kept the dim, the recognition head's 1-D convolution
    then got a 4-D input, and ONNX Runtime refused the model (``Node (node_Conv_N) Op (Conv)
    [ShapeInferenceError] Attribute dilations has incorrect size``). See :func:`select_squeezed_symbolic_dims`;
    the bug is in torchlib's squeeze, with ``_aten_squeeze_dims_of_size_one`` (its draft covers both).
    """
    return select_squeezed_symbolic_dims(graph_module, node)


@_register_translation(torch.ops.aten.squeeze.dims, dependency="onnxscript")
def _aten_squeeze_dims_list_of_size_one(self: Any, dim: list[int]) -> Any:
    """``aten.squeeze.dims`` (``squeeze((1, 2))``): as ``_aten_squeeze_dims_of_size_one``, per listed dim.

    Without it torch.onnx decomposes the list overload to ``prims.view_of`` when no listed dim is 1, for which
    it has no translation (``No ONNX function found for ... prims.view_of``). Here the listed dims of size 1
    are squeezed and the others kept, as torch does.
    """
    return _squeeze_size_one_dims(self, list(dim), "_aten_squeeze_dims_list_of_size_one")


@_register_translation(torch.ops.aten.cummax.default, dependency="onnxscript")
def _aten_cummax(self: Any, dim: int) -> tuple[Any, Any]:
    """``aten.cummax``: running maximum and the index it came from, as a masked max over a (j ≤ i) triangle.

    torch.onnx has no translation for ``cummax`` or ``cummin`` (``DispatchError ... No decompositions
    registered``) and ONNX has no running-max op: MM Grounding DINO's text mask builder takes ``torch.cummax``
    and ``torch.cummin`` over special-token positions (modeling_mm_grounding_dino.py:1751-1753). With ``x``
    along ``dim`` as ``x[j]``: ``values[i] = max(x[j] for j ≤ i)``, and ``indices[i]`` is the last ``j ≤ i``
    where ``x[j] == values[i]`` (torch returns the latest of tied maxima: ``cummax([1, 1])`` gives indices
    ``[0, 1]``). Cost: a (length × length) broadcast per row, fine for token-mask lengths; the length may stay
    dynamic. A NaN does not propagate as in torch. No upstream issue found; draft with reproducer:
    docs/upstream-drafts/_aten_cummax.md.
    """
    from onnxscript import opset18 as op

    record_hit("_aten_cummax")
    return _running_extreme(self, dim, op.ReduceMax, op.ReduceMin)


@_register_translation(torch.ops.aten.cummin.default, dependency="onnxscript")
def _aten_cummin(self: Any, dim: int) -> tuple[Any, Any]:
    """``aten.cummin``: running minimum and the last index it came from; see ``_aten_cummax``."""
    from onnxscript import opset18 as op

    record_hit("_aten_cummin")
    return _running_extreme(self, dim, op.ReduceMin, op.ReduceMax)


def _running_extreme(self: Any, dim: int, reduce: Any, opposite: Any) -> tuple[Any, Any]:
    """``reduce`` (ReduceMax or ReduceMin) of ``x[j]`` over ``j ≤ i`` for each ``i`` along ``dim``, and the last
    such ``j`` that holds it. Entries with ``j > i`` take ``opposite`` of the whole tensor, which never wins,
    so every dtype works without a dtype-specific infinity."""
    from onnxscript import opset18 as op

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
    never = opposite(self, keepdims=0)
    values = reduce(op.Where(earlier, by_j, never), op.Constant(value_ints=[dim]), keepdims=0)
    reached = op.And(earlier, op.Equal(by_j, op.Unsqueeze(values, op.Constant(value_ints=[dim]))))
    none = op.Constant(value=ir.tensor(-1, dtype=ir.DataType.INT64))
    indices = op.ReduceMax(op.Where(reached, column, none), op.Constant(value_ints=[dim]), keepdims=0)
    return values, indices


@_register_translation(torch.ops.aten.searchsorted.Tensor, dependency="onnxscript")
def _aten_searchsorted(
    sorted_sequence: Any, self: Any, *, out_int32: bool = False, right: bool = False, side: str | None = None,
    sorter: Any = None,
) -> Any:
    """``aten.searchsorted.Tensor``: each value's insertion index, as a count of the entries it goes after.

    torchlib's ``aten_searchsorted`` is a ``NotImplementedError`` stub and torch.onnx has no decomposition
    (``No ONNX function found for ... aten.searchsorted``); ONNX has no search op. SplinterForPreTraining finds
    each question's column with ``torch.searchsorted(rows, rows, side="left")`` (modeling_splinter.py:728).
    torch's binary search counts, along the last dim, the entries of a sorted row that fail
    ``entry >= value`` (side left) or ``entry > value`` (side right, or ``right=True``); the count of a
    (values x entries) broadcast comparison is that number exactly, with torch's answer for a NaN value
    (the row length) and without rounding. A 1-D ``sorted_sequence`` serves values of any shape; an N-D one
    pairs its leading dims with the values' own. ``sorter`` gathers the row first; the two tensors meet in
    torch's promoted dtype; the result is int64, or int32 for ``out_int32``. Cost: one bool per (value,
    entry) pair, fine for mask and position sizes. A NaN inside ``sorted_sequence`` is unsorted input, on
    which torch's result depends on its search path; not matched. Not reported upstream yet: the
    ready-to-file onnxscript issue is docs/upstream-drafts/_aten_searchsorted.md.
    """
    from onnxscript import opset18 as op

    record_hit("_aten_searchsorted")
    # read before any op: a value made here has no dtype or shape yet
    batched = len(sorted_sequence.shape) > 1
    row_dtype, value_dtype = sorted_sequence.dtype, self.dtype
    common = from_torch_dtype(torch.promote_types(to_torch_dtype(row_dtype), to_torch_dtype(value_dtype)))
    if sorter is not None:
        sorted_sequence = op.GatherElements(sorted_sequence, sorter, axis=-1)
    if row_dtype != common:
        sorted_sequence = op.Cast(sorted_sequence, to=common)
    if value_dtype != common:
        self = op.Cast(self, to=common)
    entries = sorted_sequence
    if batched:
        entries = op.Unsqueeze(sorted_sequence, op.Constant(value_ints=[-2]))  # (*batch, 1, entries)
    values = op.Unsqueeze(self, op.Constant(value_ints=[-1]))  # (..., values, 1)
    after = op.Greater(entries, values) if right or side == "right" else op.GreaterOrEqual(entries, values)
    index = ir.DataType.INT32 if out_int32 else ir.DataType.INT64
    return op.ReduceSum(op.Cast(op.Not(after), to=index), op.Constant(value_ints=[-1]), keepdims=0)


# ── Our own ops: not workarounds, the ONNX form of an op the exporters define ──
def _own_translation(op: Any) -> Callable:
    """Put ``op``'s translation in the table under its function's name, with no workaround announced: the op
    is ours (exporters.generation), its ONNX form is its definition, not a backend bug's repair."""

    def decorate(function: Callable) -> Callable:
        _ONNX_TRANSLATION_TABLE[op] = function
        _TRANSLATION_NAMES[op] = function.__name__
        return function

    return decorate


def _gqa_op() -> Any:
    from exporters.generation.gqa import group_query_attention  # noqa: F401  (defines the op)

    return torch.ops.exportbot.group_query_attention.default


def _gqa_node() -> Any:
    """ONNX Runtime's ``com.microsoft.GroupQueryAttention`` as an onnxscript op. onnx registers no schema for
    ONNX Runtime's own ops, so onnxscript cannot look it up: the schema is declared here with the inputs,
    outputs and attributes the shared-buffer form uses (onnxruntime docs/ContribOperators.md)."""
    from onnx.defs import OpSchema
    from onnxscript.values import Op, Opset

    tensor, attribute = OpSchema.FormalParameter, OpSchema.Attribute
    schema = OpSchema(
        "GroupQueryAttention", "com.microsoft", 1,
        inputs=[tensor(name, "T") for name in ("query", "key", "value", "past_key", "past_value")]
        + [tensor(name, "M") for name in ("seqlens_k", "total_sequence_length")],
        outputs=[tensor(name, "T") for name in ("output", "present_key", "present_value")],
        type_constraints=[("T", ["tensor(float)"], "activations and cache"), ("M", ["tensor(int32)"], "lengths")],
        attributes=[attribute("num_heads", OpSchema.AttrType.INT, ""), attribute("kv_num_heads", OpSchema.AttrType.INT, ""),
                    attribute("scale", OpSchema.AttrType.FLOAT, ""), attribute("do_rotary", OpSchema.AttrType.INT, "")])
    return Op(Opset("com.microsoft", 1), "GroupQueryAttention", op_schema=schema)


_GROUP_QUERY_ATTENTION = _gqa_node()


@_own_translation(_gqa_op())
def _group_query_attention(query: Any, key: Any, value: Any, past_key: Any, past_value: Any, seqlens_k: Any,
                           total_sequence_length: Any, num_heads: int, kv_num_heads: int, scale: float) -> Any:
    """``exportbot::group_query_attention`` is ONNX Runtime's ``com.microsoft.GroupQueryAttention`` in its
    shared-buffer form, rotary left to the model (``do_rotary=0``): the op's eager kernel computes what the node
    does (exporters.generation.gqa), so the translation is the node itself."""
    return _GROUP_QUERY_ATTENTION(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                                  num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale, do_rotary=0)
