"""Symbolic sizes through ExecuTorch's lowering: fixes for nodes it rejects or specialises, and the check that
it kept every dim torch.export left dynamic.

A dynamic export records Python's ``min``/``max`` of a size and a constant (a sparse-attention indexer's
``topk = min(self.index_topk, scores.shape[-1])``) as a ``torch.sym_min``/``torch.sym_max`` node. ExecuTorch's
edge verifier accepts only an allow-list of symbolic operators there (``exir/verification/verifier.py``,
``assert op.__name__ in ("alloc",)`` for the others), so the lowering stops with a bare ``AssertionError``.
:func:`decide_sym_min_max` removes such a node where the export's own bounds decide it.

Worse than a failure is a silent specialisation: an edge operator declared with ``int[]`` where ATen's has
``SymInt[]`` (ExecuTorch's ``_empty_dim_order(int[] size, ...)``, the dim-order form of ``aten.empty``) turns
each symbolic size it receives into the sample's value, and the ``.pte`` then accepts only the sample's shape
on every input tied to it, while validation, which moves every dim still symbolic, passes.
:func:`require_dims_kept` turns that into a failure naming the dims; :func:`empty_as_zeros` avoids it for
``empty``.

A tensor whose size holds a data-dependent (unbacked) symbol has strides such as ``(1, u0)`` or ``(384*u0,
384)``, and ExecuTorch's ``dim_order_from_stride`` cannot order them: :func:`dim_order_by_multiples` decides the
pairs where one stride is a multiple of the other; a size that may be 0 (a ``length mod 4`` tail, empty at the
sample) gets the strides torch gives it (``make_contiguous_strides_for``), not 0. Memory planning sizes each
tensor by the upper bound of its symbolic shape, and a floor division that divides exactly (``(s**2)//s``) is bounded as if it did not
(128**2 // 2): :func:`cancel_exact_floor_divisions` writes the quotient first. The fixes are registered on ``"executorch"`` (stage 5 of
``exporters.executorch.exporter``, the patch around the whole lowering), so ``grep -n "@register_"`` finds
them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._prims_common import make_contiguous_strides_for
from torch.fx.experimental.symbolic_shapes import (
    GuardOnDataDependentSymNode,
    guard_or_false,
    guard_or_true,
    statically_known_true,
)
from torch.utils._sympy.functions import FloorDiv
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from exporters.fx_rewrites import emitter, node_argument, replace_node, size_of
from exporters.utils import record_hit, register_fx_node_fix, register_patch

__all__ = [
    "LoweringSpecialisedError",
    "bounds_from_checks",
    "cancel_exact_floor_divisions",
    "decide_sym_min_max",
    "dim_order_by_multiples",
    "empty_as_zeros",
    "empty_cat_as_zeros",
    "python_mod_as_floor_division",
    "require_dims_kept",
]


def _value(argument: Any) -> Any:
    """An argument's value: a node's ``meta["val"]`` (a SymInt for a size), anything else (an int) as it is."""
    return argument.meta.get("val") if isinstance(argument, torch.fx.Node) else argument


def _known_at_most(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Whether ``a <= b`` holds for every size the export accepts.

    ``statically_known_true`` alone is not enough: under ``Dim.AUTO(max=...)`` torch.export applies the upper
    bound after tracing, and the shape environment's cache of static answers keeps what it found during tracing,
    when the range was still unbounded (MPT's ``max(0, 2048 - s)`` stays undecided with ``s`` in [2, 128]).
    The value ranges themselves are current, so the difference's upper bound over them decides it too.
    """
    if statically_known_true(a <= b):
        return True
    difference = a - b
    if not isinstance(difference, torch.SymInt):
        return difference <= 0
    upper = bound_sympy(difference.node.expr, difference.node.shape_env.var_to_range).upper
    return bool(upper <= 0)


def decide_sym_min_max(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``torch.sym_min(a, b)`` / ``torch.sym_max(a, b)`` by the argument that the bounds prove it is.

    ``min(a, b)`` is ``a`` when ``a <= b`` is statically known from the shape environment's value ranges (and
    ``b`` the other way round); ``max`` likewise. Exact: the node's value is that argument for every input the program accepts, since the
    program's guards keep every dynamic size inside its declared range. An undecided node (ranges overlap) is
    left as it is, and the verifier still names the failure. Returns True when it replaced ``node``.
    """
    if node.op != "call_function" or node.target not in (torch.sym_min, torch.sym_max) or len(node.args) != 2:
        return False
    first, second = node.args
    a, b = _value(first), _value(second)
    if not all(isinstance(v, (int, torch.SymInt)) for v in (a, b)):
        return False
    # Decided by the shape environment's value ranges, which hold the Dim bounds the export declared.
    smaller = first if _known_at_most(a, b) else second if _known_at_most(b, a) else None
    if smaller is None:
        return False
    larger = second if smaller is first else first
    kept = smaller if node.target is torch.sym_min else larger
    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, lambda arg: kept if arg is node else arg)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda arg: kept if arg is node else arg)
    graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix(
    "executorch", upstream="https://github.com/pytorch/executorch/issues/11988", dependency="executorch"
)
def _fix_sym_min_max_decided_by_bounds(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Drop ``torch.sym_min``/``sym_max`` of a bounded size and a constant: the edge verifier rejects them.

    DeepSeek-V3.2's and dots3-note's indexers take ``min(self.index_topk, index_scores.shape[-1])`` (2,048 and
    the sequence); exported with a sequence of at most ``max_sequence`` (128) tokens the node is the sequence
    size itself, and ExecuTorch 1.5.1's ``to_edge_transform_and_lower`` fails in its verifier with
    ``AssertionError`` (``op.__name__ in ("alloc",)``) on it. See :func:`decide_sym_min_max`. Upstream:
    pytorch/executorch#11988 (open: ExecuTorch has no ``sym_max`` for transformers' sliding-window cache);
    pytorch/executorch#12037 added the ``executorch_prim`` ops but the verifier still rejects the torch
    functions, the comment to add there is docs/upstream-drafts/_fix_sym_min_max_decided_by_bounds.md.
    """
    return decide_sym_min_max(graph_module, node)


def python_mod_as_floor_division(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write a size's ``a % b`` as ``a - (a // b) * b`` unless ``a >= 0 < b`` for every size the export accepts.

    torch.export records Python's ``%`` (the remainder takes the divisor's sign: ``-8 % 128 == 120``), and
    ExecuTorch runs the node as ``executorch_prim::mod.Scalar``, which is C++'s ``%`` (the dividend's sign:
    ``-120``; kernels/prim_ops/register_prim_ops.cpp in 1.5.1), while its ``floordiv.Scalar`` floors as Python
    does. The floor-division form is Python's remainder in both. Where both signs are known, the two agree and
    the node is left alone. Returns True when it replaced ``node``.
    """
    if node.op != "call_function" or node.target is not operator.mod or not isinstance(_value(node), torch.SymInt):
        return False
    dividend, divisor = node.args
    if _known_at_most(0, _value(dividend)) and _known_at_most(1, _value(divisor)):
        return False
    emit = emitter(graph_module, node)
    multiple = emit(operator.mul, emit(operator.floordiv, dividend, divisor), divisor)
    return replace_node(graph_module, node, emit(operator.sub, dividend, multiple))


@register_fx_node_fix("executorch", dependency="executorch")
def _fix_size_remainder_of_a_negative(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Give ExecuTorch's runtime Python's remainder of a size expression that may be negative.

    LongT5's local attention pads the sequence to a multiple of the block length with ``(-s) % block_len``
    (``_pad_to_multiple``, modeling_longt5.py:91); the runtime computed ``-s`` there, so the padded length and the
    block count were 0 and the next size, ``padded // blocks``, divided by zero: the dynamic ``.pte`` killed its
    process with SIGFPE (or SIGSEGV) at every input shape, while the static one, whose sizes are constants,
    passes. See :func:`python_mod_as_floor_division`; the report to file is
    docs/upstream-drafts/_fix_size_remainder_of_a_negative.md.
    """
    return python_mod_as_floor_division(graph_module, node)


def empty_cat_as_zeros(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write an ``aten.cat`` of only empty tensors with a symbolic shape as ``new_zeros`` of that shape.

    The sizes are graph nodes (``sym_size`` of the inputs, the cat dim their sum), so they stay symbolic through
    the lowering, where ExecuTorch's ``PruneEmptyTensorsPass`` would write the cat's shape into a ``full`` as
    SymInt objects. Returns True when it replaced ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
        return False
    inputs, value = node.args[0], _value(node)
    dim = node_argument(node, 1, "dim", 0) % value.dim()
    if not all(guard_or_false(_value(i).numel() == 0) for i in inputs):
        return False
    if not any(isinstance(size, torch.SymInt) for size in value.shape):
        return False
    emit = emitter(graph_module, node)
    # torch.cat skips a 1-D tensor of size 0 whatever the rank (DynamicLayer's initial torch.tensor([])).
    shaped = [tensor for tensor in inputs if _value(tensor).dim() == value.dim()]
    sizes = [size_of(emit, shaped[0], axis) for axis in range(value.dim())]
    for part in (size_of(emit, tensor, dim) for tensor in shaped[1:]):
        both_static = isinstance(sizes[dim], int) and isinstance(part, int)
        sizes[dim] = sizes[dim] + part if both_static else emit(operator.add, sizes[dim], part)
    zeros = emit(torch.ops.aten.new_zeros.default, shaped[0], sizes, dtype=value.dtype)
    return replace_node(graph_module, node, zeros)


@register_fx_node_fix("executorch", dependency="executorch")
def _fix_empty_cat_of_symbolic_shape(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Give ExecuTorch an empty tensor of symbolic shape as zeros of sizes it can emit, not as an empty ``cat``.

    ExecuTorch's ``PruneEmptyTensorsPass`` (exir/passes/prune_empty_tensors_pass.py) replaces a cat of only empty
    tensors by ``full(tuple(cat.meta["val"].shape), 0)``: with a symbolic shape the size list holds SymInt
    objects, not nodes, and ``to_executorch``'s emitter stops with ``Unsupported type encountered in int list``.
    Kept as a cat, the runtime's cat of empty inputs comes back with the cat dim 0. MistralLarge4's MLA cache
    appends a zero-width latent slice to an empty cache (``past_key_values.update(k_pass, k_rot, ...)``,
    modeling_mistral_large4.py:435): ``full((s72, 1, s70, 0), 0)``. See :func:`empty_cat_as_zeros`; the report
    to file is docs/upstream-drafts/_fix_empty_cat_of_symbolic_shape.md.
    """
    return empty_cat_as_zeros(graph_module, node)


def empty_as_zeros(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.new_empty`` / ``aten.empty.memory_format`` with a symbolic size as ``new_zeros`` / ``full(0)``.

    ``empty``'s contents are unspecified, so zeros are one valid value of it: the rewrite changes no output, and
    costs one fill of a buffer the program writes anyway. The zero-filled forms reach the edge dialect as
    ``aten.full.default``, whose ``SymInt[] size`` keeps the sizes symbolic, where ExecuTorch's memory-format
    pass rewrites ``empty`` into ``_empty_dim_order(int[] size)``. Only contiguous (or unspecified) memory
    formats, and only when a size is a node (symbolic): a static ``empty`` lowers as it is. Returns True when
    it replaced ``node``.
    """
    aten = torch.ops.aten
    if node.op != "call_function" or node.target not in (aten.new_empty.default, aten.empty.memory_format):
        return False
    size = node.args[1] if node.target is aten.new_empty.default else node.args[0]
    if not isinstance(size, (list, tuple)) or not any(isinstance(s, torch.fx.Node) for s in size):
        return False
    kwargs = dict(node.kwargs)
    if kwargs.pop("memory_format", None) not in (None, torch.contiguous_format):
        return False
    if node.target is aten.new_empty.default:
        target, args = aten.new_zeros.default, node.args
    else:
        target, args = aten.full.default, (size, 0)
    with graph_module.graph.inserting_before(node):
        zeros = graph_module.graph.call_function(target, args, kwargs)
    zeros.meta = dict(
        node.meta
    )  # the same shape, dtype and provenance: only the contents' definition changed
    return replace_node(graph_module, node, zeros)


@register_fx_node_fix("executorch", dependency="executorch")
def _fix_empty_specialised_by_dim_order(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``empty`` of a symbolic size as zeros: the lowering would specialise its size to the sample's.

    ExecuTorch 1.5.1's ``MemoryFormatOpsPass`` rewrites ``aten.empty.memory_format`` (what ``new_empty``
    decomposes to) into ``dim_order_ops._empty_dim_order``, whose schema takes ``int[] size``
    (exir/passes/dim_order_ops_registry.py), so calling it on symbolic sizes guards each to its sample value.
    DeepSeek-V3.2's multi-latent attention builds its keys in ``k_pass.new_empty([batch, heads, sequence,
    head_dim])`` (``expand_kv``), which made the batch and sequence of ``input_ids`` static: the ``.pte``
    accepted ``[2, 8]`` only. See :func:`empty_as_zeros`; the draft issue is
    docs/upstream-drafts/_fix_empty_specialised_by_dim_order.md.
    """
    return empty_as_zeros(graph_module, node)


class _UndecidedOrder(Exception):
    """Two strides whose order no known fact decides."""


class _StrideKey:
    """A stride compared as a stride: positive (ExecuTorch rejects a zero stride) and usually a product of the
    sizes after it, so a multiple of another stride is never the smaller one."""

    def __init__(self, stride: int | torch.SymInt):
        self.stride = stride

    def __lt__(self, other: _StrideKey) -> bool:
        a, b = self.stride, other.stride
        if guard_or_false(a < b) or (guard_or_false(b % a == 0) and guard_or_true(a != b)):
            return True  # known, or b a multiple of a that may differ from it: ExecuTorch's own two rules
        if guard_or_false(a >= b) or guard_or_false(a % b == 0):
            return False  # a a multiple of b: a >= b, as torch's own stride-order helper reasons
        raise _UndecidedOrder


def dim_order_by_multiples(stride: Sequence[int | torch.SymInt]) -> tuple[int, ...] | None:
    """The dim order of ``stride`` (dims by decreasing stride, ties in dim order), or None if a pair is undecided.

    ExecuTorch's ``dim_order_from_stride`` (exir/tensor.py) decides ``a < b`` when it is statically known or
    when ``b`` is a multiple of ``a``, and otherwise evaluates ``a < b``, which raises for an unbacked size:
    ``u48 < 1`` for the strides ``(1, u48)`` of a ``nonzero`` result (Splinter), ``384*u22 < 384`` (V-JEPA 2),
    ``u140 + u300 + 16 < 1`` (Mimi's decoder). Each of these asks whether a multiple of a stride is smaller than
    it, which no positive stride is; torch reasons the same way when it orders strides
    (``compute_elementwise_output_logical_to_physical_perm``'s ``ge``: ``a >= b or a % b == 0``). A pair neither
    rule decides stays undecided: the caller keeps ExecuTorch's error.
    """
    try:
        ordered = sorted(range(len(stride)), key=lambda dim: _StrideKey(stride[dim]), reverse=True)
    except _UndecidedOrder:
        return None
    return tuple(ordered)


@register_patch(
    "executorch",
    "executorch.exir.tensor.dim_order_from_stride",
    "executorch.exir.tensor_layout.dim_order_from_stride",
    "executorch.exir.passes.replace_view_copy_with_view_pass.dim_order_from_stride",
    dependency="executorch",
    counts_itself=True,
)  # fmt: skip
def _patch_dim_order_of_unbacked_strides(original: Callable) -> Callable:
    """Order the strides ExecuTorch cannot order when a size is data-dependent, instead of failing the lowering.

    Every tensor spec of the program gets its dim order from ``dim_order_from_stride``; for a tensor sized by a
    data-dependent count (a ``nonzero`` result, a codec's padding computed from buffers) its comparison guards
    on the unbacked symbol (``GuardOnDataDependentSymNode: Could not guard on data-dependent expression u48 <
    1``), in ``to_edge_transform_and_lower`` or ``to_executorch``. ExecuTorch's answer is kept wherever it has
    one; only when it raises does :func:`dim_order_by_multiples` order the strides, and when that cannot either
    the original error stands. Hits count the orders it gave. Not reported upstream yet: the ready-to-file issue
    is docs/upstream-drafts/_patch_dim_order_of_unbacked_strides.md.
    """

    def dim_order_from_stride(stride: Sequence[int | torch.SymInt]) -> tuple[int, ...]:
        try:
            return original(stride)
        except GuardOnDataDependentSymNode:
            order = dim_order_by_multiples(stride)
            if order is None:
                raise
            record_hit("_patch_dim_order_of_unbacked_strides")
            return order

    return dim_order_from_stride


def _zero_at_the_sample(stride: int | torch.SymInt) -> bool:
    """Whether a stride is 0 at the sample's sizes: what ``dim_order_from_stride``'s ``torch._check(s != 0)``
    decides for a backed symbolic stride (an unbacked one, which has no sample value, is left to ExecuTorch)."""
    if not isinstance(stride, torch.SymInt):
        return stride == 0
    return stride.node.hint == 0  # None for an unbacked stride


@register_patch(
    "executorch",
    "executorch.exir.tensor.contiguous_stride_from_shape",
    "executorch.exir.passes.replace_view_copy_with_view_pass.contiguous_stride_from_shape",
    dependency="executorch",
    counts_itself=True,
)  # fmt: skip
def _patch_contiguous_stride_of_a_size_that_may_be_0(original: Callable) -> Callable:
    """Give a tensor spec torch's contiguous strides when ExecuTorch's are 0 at the sample, instead of failing.

    ExecuTorch plans every tensor as contiguous, with strides from ``contiguous_stride_from_shape``
    (executorch/exir/tensor.py:36), which counts an int size of 0 as 1, as torch does, but multiplies a symbolic
    size as it is. A size that may be 0, such as the ``length mod 4`` tail DeepseekV4's compressor slices off
    (``s70 - 4*(s70//4)``: 0 for the sample length 8), then makes the strides before it 0 at the sample, and
    ``dim_order_from_stride``'s ``torch._check(s != 0)`` stops ``to_executorch`` with "0 in strides is not
    supported for ExecuTorch" (DeepseekV4Model and DeepseekV4ForCausalLM, dynamic; static passes). Where that
    would happen, torch's own contiguous strides are used instead (``make_contiguous_strides_for`` in
    torch/_prims_common, which counts every size as ``sym_max(size, 1)``); everywhere else ExecuTorch's strides stay
    as they are. A hit is each spec given torch's strides. Not reported upstream yet: the ready-to-file issue is
    docs/upstream-drafts/_patch_contiguous_stride_of_a_size_that_may_be_0.md.
    """

    def contiguous_stride_from_shape(shape: Sequence[int | torch.SymInt]) -> tuple[int | torch.SymInt, ...]:
        strides = original(shape)
        if not any(_zero_at_the_sample(stride) for stride in strides):
            return strides
        record_hit("_patch_contiguous_stride_of_a_size_that_may_be_0")
        return make_contiguous_strides_for(shape)

    return contiguous_stride_from_shape


# Memory planning's size bound, where it is defined and where the symbolic-shape pass imported it.
_EVAL_UPPER_BOUND = (
    "executorch.exir.sym_util.eval_upper_bound",
    "executorch.exir.passes.sym_shape_eval_pass.eval_upper_bound",
)


def _exact_quotient(numerator: sympy.Expr, denominator: sympy.Expr) -> sympy.Expr | None:
    """``numerator / denominator`` when it is a polynomial with integer coefficients (then the floor division
    is exact and equals it), else None."""
    quotient = sympy.cancel(numerator / denominator)
    symbols = sorted(quotient.free_symbols, key=str)
    if not symbols:
        return quotient if quotient.is_Integer else None
    if not quotient.is_polynomial(*symbols):
        return None
    coefficients = sympy.Poly(quotient, *symbols).coeffs()
    return quotient if all(c.is_Integer for c in coefficients) else None


def cancel_exact_floor_divisions(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every ``FloorDiv(n, d)`` whose quotient is an integer polynomial replaced by that quotient.

    Exact for every value of the symbols (``n == d * q`` as polynomials, so ``n // d == q`` wherever ``d != 0``,
    and a size's divisor is a size). Inner divisions are rewritten first, so ``((2*s - 1)*((s**2)//s))//s``
    becomes ``2*s - 1``.
    """
    return expr.replace(
        lambda e: isinstance(e, FloorDiv), lambda e: _exact_quotient(*e.args) or e
    )  # fmt: skip


@register_patch("executorch", *_EVAL_UPPER_BOUND, dependency="executorch", counts_itself=True)
def _patch_upper_bound_of_exact_divisions(original: Callable) -> Callable:
    """Bound a symbolic size after cancelling its exact floor divisions: the planned tensor must fit its buffer.

    ``eval_upper_bound`` (exir/sym_util.py) bounds ``expr`` with ``bound_sympy`` over the symbols' ranges, which
    bounds ``n // d`` by ``max(n) // min(d)``. torch leaves ``(s41**2)//s41`` unsimplified in XLNet's relative
    shift (``rel_shift_bnij``'s reshapes), so with the sequence in [2, 128] that size is bounded by 8,192
    instead of 128, and a size built on it, ``((2*s41 - 1)*((s41**2)//s41))//s41``, by 1,044,480 instead of 255.
    The serialized tensor ``[8, 4, 128, 1044480]`` (17 GB) then does not fit the 547 MB arena planned for it,
    and loading the ``.pte`` fails (``Failed parsing tensor at index 419: 0x21``, MemoryAllocationFailed). With
    the exact quotients written first the bound is the true maximum; a size with no exact division keeps
    ExecuTorch's answer. Hits count the sizes whose bound it tightened. Not reported upstream yet: the
    ready-to-file issue is docs/upstream-drafts/_patch_upper_bound_of_exact_divisions.md.
    """

    def eval_upper_bound(maybe_symint: int | torch.SymInt) -> int:
        bound = original(maybe_symint)
        if not isinstance(maybe_symint, torch.SymInt):
            return bound
        node = maybe_symint.node
        exact = cancel_exact_floor_divisions(node.expr)
        if exact == node.expr:
            return bound
        tight = bound_sympy(exact, node.shape_env.var_to_range).upper
        if not isinstance(tight, sympy.Integer) or int(tight) >= bound:
            return bound
        record_hit("_patch_upper_bound_of_exact_divisions")
        return int(tight)

    return eval_upper_bound


def _checked_limits(shape_env: Any, ranges: dict) -> list[tuple[sympy.Expr, sympy.Integer]]:
    """``(expression, limit)`` for each runtime assert ``expression <= limit`` or ``expression == limit`` whose
    limit is finite over ``ranges`` (either side of an equality may be the bounded one)."""
    limits = []
    for check in (c for checks in shape_env.deferred_runtime_asserts.values() for c in checks):
        expr = check.expr
        if isinstance(expr, (sympy.GreaterThan, sympy.StrictGreaterThan)):
            expr = expr.reversed
        if isinstance(expr, (sympy.LessThan, sympy.StrictLessThan)):
            sides = [(expr.lhs, expr.rhs, 1 if isinstance(expr, sympy.StrictLessThan) else 0)]
        elif isinstance(expr, sympy.Equality):
            sides = [(expr.lhs, expr.rhs, 0), (expr.rhs, expr.lhs, 0)]
        else:
            continue
        for bounded, limit_expr, strict in sides:
            limit = bound_sympy(limit_expr, ranges).upper - strict
            if isinstance(limit, sympy.Integer):
                limits.append((bounded, limit))
    return limits


def _bound_factors(product: sympy.Expr, limit: sympy.Integer, ranges: dict) -> None:
    """Bound each symbol of ``product <= limit`` where every factor is a symbol or a positive integer and at
    least 1: a factor is at most the limit divided by the others' lower bounds."""
    factors = product.as_ordered_factors()
    if not all(isinstance(f, sympy.Symbol) or (f.is_Integer and f > 0) for f in factors):
        return
    lowers = [f if f.is_Integer else ranges[f].lower for f in factors]
    if not all(isinstance(low, sympy.Integer) and low >= 1 for low in lowers):
        return
    for index, factor in enumerate(factors):
        if isinstance(factor, sympy.Symbol):
            others = sympy.Mul(*(low for i, low in enumerate(lowers) if i != index))
            ranges[factor] = ValueRanges(ranges[factor].lower, min(ranges[factor].upper, limit // others))


def _bound_addends(total: sympy.Expr, limit: sympy.Integer, ranges: dict) -> None:
    """Bound each symbol of ``total <= limit`` where every addend is a non-negative integer or a positive
    multiple of a non-negative symbol: an addend is at most the limit less the others' lower bounds."""
    addends = [term.as_coeff_Mul() for term in sympy.Add.make_args(total)]
    if not all(
        (rest == 1 and coefficient >= 0) or (isinstance(rest, sympy.Symbol) and coefficient > 0)
        for coefficient, rest in addends
    ):
        return
    lowers = [coefficient * (1 if rest == 1 else ranges[rest].lower) for coefficient, rest in addends]
    if not all(isinstance(low, sympy.Integer) and low >= 0 for low in lowers):
        return
    for index, (coefficient, rest) in enumerate(addends):
        if isinstance(rest, sympy.Symbol):
            room = (limit - (sum(lowers) - lowers[index])) // coefficient
            ranges[rest] = ValueRanges(ranges[rest].lower, min(ranges[rest].upper, room))


def bounds_from_checks(shape_env: Any) -> dict[sympy.Symbol, ValueRanges]:
    """The shape environment's value ranges, each symbol of a checked product or sum bounded by the check.

    A model that reads sizes from a tensor often checks them where torch keeps the check as a runtime assert
    and leaves each size unbounded: Siglip2 checks a product, ``torch._check(h * w <= max_length)`` with
    ``h, w > 0`` (its resized position grid), and ``x.split(counts)`` asserts that data-dependent counts sum
    to the split dim (``Eq(u0 + u1 + u2, s0)``, JetMoE's per-expert token counts). A factor at least 1 is at
    most the limit divided by the others' lower bounds; a non-negative addend at most the limit less theirs.
    Only products of symbols and positive integers, and sums of positive multiples of symbols and integers,
    under a finite limit are read.
    """
    ranges = dict(shape_env.var_to_range)
    for bounded, limit in _checked_limits(shape_env, ranges):
        if isinstance(bounded, sympy.Mul) and not bounded.as_coeff_Mul()[1].is_Symbol:
            _bound_factors(bounded, limit, ranges)
        else:
            _bound_addends(bounded, limit, ranges)
    return ranges


@register_patch("executorch", *_EVAL_UPPER_BOUND, dependency="executorch", counts_itself=True)
def _patch_upper_bound_from_product_checks(original: Callable) -> Callable:
    """Bound a data-dependent size that ExecuTorch finds unbounded by the model's own checks on products or sums.

    Memory planning needs a finite upper bound for every planned tensor (``eval_upper_bound``, exir/sym_util.py)
    and reads only the symbols' value ranges: Siglip2 sizes its position grid by ``spatial_shapes[i].tolist()``
    and checks ``height * width <= max_length`` (modeling_siglip2.py:167-170), so lowering failed with
    ``Cannot evaluate a finite upper bound for symbolic expression u88``; JetMoE splits the routed tokens by
    per-expert counts read with ``.tolist()`` (modeling_jetmoe.py:152, 192-195), which torch knows only to sum to
    the split dim, and its dynamic lowering failed the same way. Where ExecuTorch gives up, the size
    is bounded over :func:`bounds_from_checks` (after cancelling exact divisions, as
    ``_patch_upper_bound_of_exact_divisions`` does); a size those checks do not bound fails as before. Hits
    count the sizes it bounded. The report to file is docs/upstream-drafts/_patch_upper_bound_from_product_checks.md.
    """

    def eval_upper_bound(maybe_symint: int | torch.SymInt) -> int:
        try:
            return original(maybe_symint)
        except RuntimeError as error:
            if not isinstance(maybe_symint, torch.SymInt) or "Cannot evaluate a finite upper bound" not in str(error):
                raise
            node = maybe_symint.node
            upper = bound_sympy(cancel_exact_floor_divisions(node.expr), bounds_from_checks(node.shape_env))
            if not isinstance(upper.upper, sympy.Integer):
                raise
            record_hit("_patch_upper_bound_from_product_checks")
            return int(upper.upper)

    return eval_upper_bound


class LoweringSpecialisedError(RuntimeError):
    """ExecuTorch's lowering made static a dim that ``torch.export`` kept dynamic."""


def require_dims_kept(exported: dict[str, dict[str, Any]], lowered: dict[str, dict[str, Any]]) -> None:
    """Fail when a dynamic dim of the exported program (``dynamic_dim_ranges`` before lowering) is static after.

    The ``.pte`` would accept only the sample's size there, and a second-shape validation cannot see it: it moves
    the dims that are still symbolic. Naming the dims is what the user needs to choose ``--dynamic-dim`` or to
    report the lowering pass."""
    lost = [
        f"{name} dim {index}"
        for name, dims in exported.items()
        for index in dims
        if index not in lowered.get(name, {})
    ]
    if lost:
        raise LoweringSpecialisedError(
            f"to_edge_transform_and_lower specialised {', '.join(lost)}, which torch.export kept dynamic: the .pte "
            "would accept only the sample's size there (a lowering pass guarded the symbolic size to its value)"
        )
