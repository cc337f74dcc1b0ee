"""Graph rewrites shared by the workarounds of several backends.

A workaround stays registered per backend (each can be removed on its own when its backend's bug is
fixed); the rewrite it performs lives here once.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode


def make_reshape_input_contiguous(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Insert ``contiguous`` before an ``aten.reshape`` whose input is strided (permuted) at trace time.

    Decompositions that assume size-oblivious shapes lower such a reshape to ``view`` and fail with
    ``Cannot view a tensor with shape ... and strides ...`` (pytorch/pytorch#141107). Eager's reshape of a
    strided tensor copies anyway, so the rewrite changes no numerics. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.reshape.default:
        return False
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.is_contiguous() or source.target is torch.ops.aten.contiguous.default:
        return False
    feed_contiguous(graph_module, node, source)
    return True


def make_view_of_permutation_contiguous(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Insert ``contiguous`` before an ``aten.view`` of a ``transpose`` or ``permute``.

    Such a view is valid at trace time only because the permuted tensor's producer laid it out so that the
    permutation is contiguous again (SDPA's output, transposed back). Once a backend changes that layout, by
    re-decomposing the producer or by a ``contiguous`` inserted upstream, the view fails with ``Cannot view a
    tensor with shape ... and strides``. ``contiguous`` first makes the view valid for any layout, at the cost
    of a copy where the layout already was contiguous. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.view.default:
        return False
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.target not in (torch.ops.aten.transpose.int, torch.ops.aten.permute.default):
        return False
    feed_contiguous(graph_module, node, source)
    return True


def feed_contiguous(graph_module: torch.fx.GraphModule, node: torch.fx.Node, source: torch.fx.Node) -> None:
    """Route ``node``'s input ``source`` through a new ``aten.contiguous`` node (same values, dense layout)."""
    with graph_module.graph.inserting_before(node):
        contiguous = graph_module.graph.call_function(torch.ops.aten.contiguous.default, (source,))
    contiguous.meta["val"] = source.meta["val"].contiguous()
    node.replace_input_with(source, contiguous)


def spell_out_tanh_gelu(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.gelu(x, approximate="tanh")`` by its formula, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    For a backend that runs tanh GELU as exact (erf) GELU, a difference of up to ~5e-4 per activation. The
    formula uses only mul/add/tanh, which every backend runs exactly. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.gelu.default:
        return False
    if node.kwargs.get("approximate", "none") != "tanh":
        return False
    aten, graph, x = torch.ops.aten, graph_module.graph, node.args[0]

    def op(target: object, *args: object) -> torch.fx.Node:
        created = graph.call_function(target, args)  # type: ignore[arg-type]
        created.meta["val"] = node.meta.get("val")  # elementwise: same shape and dtype as the output
        return created

    with graph.inserting_before(node):
        cube = op(aten.mul.Tensor, x, op(aten.mul.Tensor, x, x))
        inner = op(aten.mul.Tensor, op(aten.add.Tensor, x, op(aten.mul.Tensor, cube, 0.044715)), math.sqrt(2 / math.pi))
        result = op(aten.mul.Tensor, op(aten.mul.Tensor, x, 0.5), op(aten.add.Tensor, op(aten.tanh.default, inner), 1.0))
    return replace_node(graph_module, node, result)


def replace_node(graph_module: torch.fx.GraphModule, node: torch.fx.Node, replacement: torch.fx.Node) -> bool:
    """Point every user of ``node`` at ``replacement`` and erase ``node``; True, what a node fix returns then."""
    node.replace_all_uses_with(replacement)
    graph_module.graph.erase_node(node)
    return True


def emitter(graph_module: torch.fx.GraphModule, anchor: torch.fx.Node) -> Callable[..., torch.fx.Node]:
    """``emit(target, *args, **kwargs)``: a new ``call_function`` node inserted before ``anchor``, its
    ``meta["val"]`` computed by running ``target`` on the fake values of its inputs (so later passes and the
    re-trace see true shapes and dtypes, also symbolic ones)."""
    fake_mode = detect_fake_mode([n.meta.get("val") for n in anchor.all_input_nodes])

    def emit(target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        with graph_module.graph.inserting_before(anchor):
            created = graph_module.graph.call_function(target, args, kwargs)
        fake_args, fake_kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta["val"], (args, kwargs))
        with fake_mode if fake_mode is not None else contextlib.nullcontext():
            created.meta["val"] = target(*fake_args, **fake_kwargs)
        return created

    return emit


def size_of(emit: Callable[..., torch.fx.Node], source: torch.fx.Node, dim: int) -> int | torch.fx.Node:
    """``source``'s size along ``dim`` for a new node's arguments: the int when static, else an ``aten.sym_size``
    node emitted by ``emit`` (so a symbolic size stays a graph value the lowering can carry)."""
    size = source.meta["val"].shape[dim]
    return size if isinstance(size, int) else emit(torch.ops.aten.sym_size.int, source, dim)


def length_as_tensor(emit: Callable[..., torch.fx.Node], positions: torch.fx.Node) -> torch.fx.Node:
    """The length of the 1-d ``positions`` (an ``arange``) as a 0-d tensor of its dtype, the sum of its ones: a
    symbolic length then enters tensor arithmetic without any operator taking a symbolic scalar."""
    return emit(torch.ops.aten.sum.default, emit(torch.ops.aten.ones_like.default, positions))


def node_argument(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    """Argument ``index`` of ``node``, or its keyword ``name``, or ``default``: an ATen schema argument either way."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def count_histc_by_comparison(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.histc(x, bins, min, max)`` with fixed bounds by compare-and-sum over the bins.

    The bin of an element is ``floor((x - min) * bins / (max - min))`` (``x == max`` in the last bin, elements
    outside ``[min, max]`` dropped), which is how ATen's CPU kernel bins; counting is ``(bin == arange(bins))``
    summed over the elements, all Core ATen ops that every backend runs. ``min == max`` means bounds taken from
    the data, which is left alone. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.histc.default:
        return False
    bins, low, high = node_argument(node, 1, "bins", 100), node_argument(node, 2, "min", 0), node_argument(node, 3, "max", 0)
    if not all(isinstance(v, (int, float)) for v in (bins, low, high)) or not high > low:
        return False
    aten, emit, value = torch.ops.aten, emitter(graph_module, node), node.meta["val"]
    flat = emit(aten.reshape.default, node.args[0], [-1])
    scaled = emit(aten.div.Tensor, emit(aten.mul.Tensor, emit(aten.sub.Tensor, flat, low), bins), high - low)
    index = emit(aten.clamp.default, emit(aten.floor.default, scaled), 0, bins - 1)
    inside = emit(aten.logical_and.default, emit(aten.ge.Scalar, flat, low), emit(aten.le.Scalar, flat, high))
    edges = emit(aten.arange.start_step, 0, bins, dtype=value.dtype, device=value.device)
    hits = emit(aten.eq.Tensor, emit(aten.unsqueeze.default, index, -1), edges)
    hits = emit(aten.logical_and.default, hits, emit(aten.unsqueeze.default, inside, -1))
    counts = emit(aten.sum.dim_IntList, emit(aten._to_copy.default, hits, dtype=value.dtype), [0])
    return replace_node(graph_module, node, counts)


def count_bincount_by_comparison(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.bincount(x)`` whose output length the program has fixed by a compare-and-sum over the bins.

    ``bincount``'s length, ``max(x) + 1``, is data-dependent (an unbacked size), but a model that checks it
    (Splinter: ``torch_compilable_check(num_questions.size(0) == batch)``) lets the shape environment simplify it
    to a number ``n``; the counts are then ``(x == arange(n))`` summed over the elements, exact for every input
    that passes the check. Without weights only; ``minlength`` is covered by ``n``. Returns True when it
    rewrote ``node``; an unsimplified length or weights leave it alone.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.bincount.default:
        return False
    if node_argument(node, 1, "weights", None) is not None:
        return False
    value = node.meta["val"]
    size = value.shape[0]
    if not isinstance(size, int):
        expr = size.node.shape_env.simplify(size.node.expr)
        if not expr.is_number:
            return False
        size = int(expr)
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    bins = emit(aten.arange.start_step, 0, size, 1, dtype=node.args[0].meta["val"].dtype, device=value.device)
    hits = emit(aten.eq.Tensor, emit(aten.unsqueeze.default, emit(aten.reshape.default, node.args[0], [-1]), -1), bins)
    return replace_node(graph_module, node, emit(aten.sum.dim_IntList, hits, [0], dtype=value.dtype))


def count_bucketize_by_comparison(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.bucketize(x, boundaries, right=...)`` over 1-D boundaries by a count of comparisons.

    The bucket of ``x`` is the number of boundaries below it: ``boundaries < x`` with ``right=False`` (buckets
    closed on the right), ``boundaries <= x`` with ``right=True``; summing the broadcast comparison over the
    boundary axis gives exactly ATen's index for sorted boundaries, as ``int32`` when ``out_int32``. A NaN ``x``
    compares false everywhere (bucket 0, where ATen's binary search puts it last); the position tables this is
    for hold no NaN. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.bucketize.Tensor:
        return False
    source, boundaries = node.args[0], node.args[1]
    if not isinstance(boundaries, torch.fx.Node) or boundaries.meta["val"].dim() != 1:
        return False
    right, out_int32 = node_argument(node, 3, "right", False), node_argument(node, 2, "out_int32", False)
    return replace_node(graph_module, node, _count_below(emitter(graph_module, node), boundaries, source, right, out_int32))


def count_searchsorted_by_comparison(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.searchsorted(sorted_sequence, values)`` over a 1-D sequence by a count of comparisons.

    The insertion point of ``v`` is the number of sequence elements below it: ``< v`` for ``side="left"``,
    ``<= v`` for ``side="right"`` (or ``right=True``), the bucketize count with the sequence as boundaries
    (:func:`count_bucketize_by_comparison`). A ``sorter`` is left alone. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.searchsorted.Tensor:
        return False
    sequence, source = node.args[0], node.args[1]
    if not isinstance(sequence, torch.fx.Node) or sequence.meta["val"].dim() != 1:
        return False
    if node_argument(node, 5, "sorter", None) is not None:
        return False
    right = node_argument(node, 3, "right", False) or node_argument(node, 4, "side", None) == "right"
    out_int32 = node_argument(node, 2, "out_int32", False)
    return replace_node(graph_module, node, _count_below(emitter(graph_module, node), sequence, source, right, out_int32))


def _count_below(emit: Callable[..., torch.fx.Node], boundaries: Any, source: Any, right: bool, out_int32: bool) -> torch.fx.Node:
    """How many of the 1-D ``boundaries`` are below each element of ``source`` (``<=`` when ``right``)."""
    aten = torch.ops.aten
    below = emit(aten.le.Tensor if right else aten.lt.Tensor, boundaries, emit(aten.unsqueeze.default, source, -1))
    return emit(aten.sum.dim_IntList, below, [-1], dtype=torch.int32 if out_int32 else torch.int64)


_RUNNING_EXTREMES = {
    torch.ops.aten.cummax.default: (torch.ops.aten.amax.default, torch.ops.aten.amin.default),
    torch.ops.aten.cummin.default: (torch.ops.aten.amin.default, torch.ops.aten.amax.default),
}


def running_extreme_by_triangle(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Replace ``aten.cummax``/``aten.cummin(x, dim)`` by a masked reduction over the ``j <= i`` triangle.

    Along ``dim``, ``values[i]`` is the max (min) of ``x[j]`` for ``j <= i``, and ``indices[i]`` is the last such
    ``j`` where ``x[j] == values[i]`` (torch returns the latest of tied extremes: ``cummax([1, 1])`` gives
    indices ``[0, 1]``). Entries with ``j > i`` take the opposite extreme of the whole tensor, which never wins,
    so every dtype works without a dtype-specific infinity. Cost: a (length x length) broadcast, fine for the
    token masks this is for; the length may be symbolic. A NaN does not propagate as in torch. Returns True
    when it rewrote ``node`` (each ``getitem`` user is pointed at the new values or indices).
    """
    if node.op != "call_function" or node.target not in _RUNNING_EXTREMES:
        return False
    source, value = node.args[0], node.args[0].meta["val"]
    if value.dim() == 0:
        return False
    reduce, opposite = _RUNNING_EXTREMES[node.target]
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    dim = node_argument(node, 1, "dim", 0) % value.dim()
    length = size_of(emit, source, dim)
    trailing = [1] * (value.dim() - dim - 1)  # one broadcast axis per dim after ``dim``
    positions = emit(aten.arange.start_step, 0, length, 1, dtype=torch.int64, device=value.device)
    column = emit(aten.unsqueeze.default, positions, 1)  # j, shape (L, 1)
    earlier = emit(aten.le.Tensor, column, emit(aten.unsqueeze.default, positions, 0))  # j <= i, (L, L)
    if trailing:
        earlier = emit(aten.view.default, earlier, [length, length, *trailing])
        column = emit(aten.view.default, column, [length, 1, *trailing])
    by_j = emit(aten.unsqueeze.default, source, dim + 1)  # x[..., j, 1, ...]
    never = emit(opposite, source, list(range(value.dim())))
    values = emit(reduce, emit(aten.where.self, earlier, by_j, never), [dim])
    reached = emit(aten.logical_and.default, earlier, emit(aten.eq.Tensor, by_j, emit(aten.unsqueeze.default, values, dim)))
    none = emit(aten.full.default, [], -1, dtype=torch.int64, device=value.device)
    indices = emit(aten.amax.default, emit(aten.where.self, reached, column, none), [dim])
    for user in list(node.users):
        user.replace_all_uses_with((values, indices)[user.args[1]])
        graph_module.graph.erase_node(user)
    graph_module.graph.erase_node(node)
    return True


def reduce_max_dim_as_pooling(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.max.dim(x, d, keepdim)`` on a 4-D ``x`` as ``max.dim(x', 3 or 2, keepdim=True)`` and reshapes.

    The only ``max.dim`` a pooling kernel takes reduces dim 2 or 3 (spelled non-negative) and keeps it. Any other
    dim is first swapped with dim 3 (``transpose``), then the kept dim is swapped back and, when ``keepdim`` was
    False, squeezed. Values and indices are the original ones, each rewritten getitem of ``node`` included.
    Returns True when it rewrote ``node``; the canonical form and other ranks are left alone.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.max.dim:
        return False
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() != 4:
        return False
    dim, keepdim = node.args[1], node_argument(node, 2, "keepdim", False)
    if keepdim and dim in (2, 3):
        return False
    dim %= 4
    reduced = dim if dim in (2, 3) else 3
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    swapped = source if reduced == dim else emit(aten.transpose.int, source, dim, 3)
    pooled = emit(aten.max.dim, swapped, reduced, True)
    for user in list(node.users):
        output = emit(operator.getitem, pooled, user.args[1])
        if reduced != dim:
            output = emit(aten.transpose.int, output, dim, 3)
        if not keepdim:
            output = emit(aten.squeeze.dims, output, [dim])
        user.replace_all_uses_with(output)
        graph_module.graph.erase_node(user)
    graph_module.graph.erase_node(node)
    return True


_ASSERTS = (torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_async.msg, torch.ops.aten._assert_async.default)


def drop_tensor_check(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Remove a traced ``torch._check_tensor_all(cond)``: ``_is_all_true(cond)`` and the runtime assertion it
    feeds (``item`` → ``sym_ite`` → comparisons → ``_assert_scalar``), when that assertion is all it feeds.

    The check guards the model's inputs (it raises, it computes nothing); ``cond`` itself is left to dead-code
    elimination. Returns True when it removed the chain, False when any of it feeds a real value.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten._is_all_true.default:
        return False
    return drop_assertion_only_chain(graph_module, node)


def drop_assertion_only_chain(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Remove ``node`` and everything computed from it when all of that ends in runtime assertions.

    ``node``'s transitive users must be call_functions (getitems, ``sym_size``, comparisons) that end in
    ``_assert_scalar``/``_assert_async`` nodes with no users: then the chain only checks the model's inputs and
    computes no value. Returns True when it removed the chain, False when any of it feeds a real value.
    """
    chain, frontier = [node], [node]
    while frontier:
        current = frontier.pop()
        for user in current.users:
            if user not in chain:
                chain.append(user)
                frontier.append(user)
    if any(n.op != "call_function" for n in chain) or not any(n.target in _ASSERTS for n in chain):
        return False
    if any(n.target in _ASSERTS and n.users for n in chain):
        return False
    order = {n: i for i, n in enumerate(graph_module.graph.nodes)}
    for dead in sorted(chain, key=order.__getitem__, reverse=True):
        graph_module.graph.erase_node(dead)
    return True


# ── Complex arithmetic as pairs of reals ──
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}


def _is_complex(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_complex


def _touches_complex(node: torch.fx.Node) -> bool:
    return _is_complex(node.meta.get("val")) or any(_is_complex(n.meta.get("val")) for n in node.all_input_nodes)


def _dim_of_pair(dim: int) -> int:
    """A complex tensor's dim as a dim of its (..., 2) real view: negative dims move one to the left."""
    return dim - 1 if dim < 0 else dim


def _real_tensor_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    dtype = kwargs.get("dtype")
    return {**kwargs, "dtype": _REAL_OF[dtype]} if dtype in _REAL_OF else dict(kwargs)


def _complex_rules() -> dict[Any, Callable[..., Any]]:
    """aten op → ``rule(emit, pair, node)`` giving the node's (..., 2) real value (or, for ``view_as_real``, its
    real result). ``pair(arg)`` is the real pair of a complex argument, or the argument itself."""
    aten = torch.ops.aten

    def polar(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        magnitude, angle = node.args[:2]
        real = emit(aten.mul.Tensor, magnitude, emit(aten.cos.default, angle))
        imaginary = emit(aten.mul.Tensor, magnitude, emit(aten.sin.default, angle))
        return emit(aten.stack.default, [real, imaginary], -1)

    def mul(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        left, right = node.args[:2]
        if not _is_complex(getattr(left, "meta", {}).get("val")):
            left, right = right, left
        if not _is_complex(getattr(right, "meta", {}).get("val")):  # complex times real: scale both parts
            factor = emit(aten.unsqueeze.default, right, -1) if isinstance(right, torch.fx.Node) else right
            return emit(aten.mul.Tensor, pair(left), factor)
        a, b = pair(left), pair(right)
        ar, ai = emit(aten.select.int, a, -1, 0), emit(aten.select.int, a, -1, 1)
        br, bi = emit(aten.select.int, b, -1, 0), emit(aten.select.int, b, -1, 1)
        real = emit(aten.sub.Tensor, emit(aten.mul.Tensor, ar, br), emit(aten.mul.Tensor, ai, bi))
        imaginary = emit(aten.add.Tensor, emit(aten.mul.Tensor, ar, bi), emit(aten.mul.Tensor, ai, br))
        return emit(aten.stack.default, [real, imaginary], -1)

    def add_like(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        return emit(node.target, pair(node.args[0]), pair(node.args[1]), **node.kwargs)

    def same_op(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        return emit(node.target, pair(node.args[0]), *node.args[1:], **_real_tensor_kwargs(node.kwargs))

    def with_dim(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        return emit(node.target, pair(node.args[0]), _dim_of_pair(node.args[1]), *node.args[2:], **node.kwargs)

    def with_shape(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        return emit(node.target, pair(node.args[0]), [*node.args[1], 2], *node.args[2:])

    def transpose(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        return emit(node.target, pair(node.args[0]), _dim_of_pair(node.args[1]), _dim_of_pair(node.args[2]))

    def permute(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        rank = node.meta["val"].dim()
        return emit(node.target, pair(node.args[0]), [d % rank for d in node.args[1]] + [rank])

    def cat(emit: Callable, pair: Callable, node: torch.fx.Node) -> Any:
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        return emit(node.target, [pair(t) for t in node.args[0]], _dim_of_pair(dim))

    return {
        aten.polar.default: polar,
        aten.view_as_complex.default: lambda emit, pair, node: node.args[0],
        aten.view_as_real.default: lambda emit, pair, node: pair(node.args[0]),
        aten.real.default: lambda emit, pair, node: emit(aten.select.int, pair(node.args[0]), -1, 0),
        aten.imag.default: lambda emit, pair, node: emit(aten.select.int, pair(node.args[0]), -1, 1),
        aten.mul.Tensor: mul,
        aten.add.Tensor: add_like,
        aten.sub.Tensor: add_like,
        aten.unsqueeze.default: with_dim,
        aten.select.int: with_dim,
        aten.slice.Tensor: with_dim,
        aten.squeeze.dim: with_dim,
        aten.transpose.int: transpose,
        aten.permute.default: permute,
        aten.expand.default: with_shape,
        aten.reshape.default: with_shape,
        aten.view.default: with_shape,
        aten.cat.default: cat,
        aten.clone.default: same_op,
        aten.alias.default: same_op,
        aten.contiguous.default: same_op,
        aten.to.dtype_layout: same_op,
        aten.to.device: same_op,
        aten._to_copy.default: same_op,
    }


_FOURIER_TRANSFORMS = {  # aten fft op → (forward?, takes a list of dims?)
    torch.ops.aten.fft_fft.default: (True, False),
    torch.ops.aten.fft_ifft.default: (False, False),
    torch.ops.aten.fft_fftn.default: (True, True),
    torch.ops.aten.fft_ifftn.default: (False, True),
}
_FOURIER_SCALE = {  # (norm, forward?) → exponent e of the factor size**-e
    ("backward", True): 0.0, ("backward", False): 1.0, ("ortho", True): 0.5, ("ortho", False): 0.5,
    ("forward", True): 1.0, ("forward", False): 0.0,
}


def fourier_transform_as_matmuls(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``torch.fft.fft``/``fftn`` (and their inverses) as real DFT matmuls.

    Along a dim of size N the DFT is a product with the N×N matrix exp(∓2πi·jk/N): with C = cos(2π·jk/N) and
    S = sin(2π·jk/N) (symmetric), the forward transform of a + ib is (C·a + S·b) + i(C·b − S·a), the inverse
    flips the sign of S; ``norm`` scales each dim by 1, 1/√N or 1/N. The tables are built in the graph from
    ``arange`` (jk reduced mod N first, so large products keep their precision), so a symbolic N (a dynamic
    sequence) stays symbolic. The result is ``view_as_complex`` of the (..., 2) pair, which
    ``split_complex_arithmetic`` then carries on as reals. Only ``s``/``n`` left at None (no padding or
    cropping) and float inputs; returns True when it rewrote.
    """
    if node.op != "call_function" or node.target not in _FOURIER_TRANSFORMS:
        return False
    forward, takes_dims = _FOURIER_TRANSFORMS[node.target]
    source, value = node.args[0], node.args[0].meta["val"]
    dims = node_argument(node, 2, "dim", None if takes_dims else -1)
    dims = list(range(value.dim())) if dims is None else (list(dims) if takes_dims else [dims])
    norm = node_argument(node, 3, "norm", None) or "backward"
    real_dtype = _REAL_OF.get(value.dtype, value.dtype)
    if node_argument(node, 1, "s" if takes_dims else "n", None) is not None or real_dtype not in (torch.float32, torch.float64):
        return False
    if not dims:
        return False
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    real, imaginary = source, None
    if value.dtype.is_complex:
        pair = emit(aten.view_as_real.default, source)
        real, imaginary = emit(aten.select.int, pair, -1, 0), emit(aten.select.int, pair, -1, 1)
    for dim in dims:
        length = size_of(emit, source, dim)
        # exp(∓2πi·jk/N) = C ∓ iS: the inverse's +iS is the forward's with S negated.
        cosine, sine = _dft_tables(emit, length, _FOURIER_SCALE[norm, forward], 1 if forward else -1, real_dtype, value.device)

        def along(x: torch.fx.Node, table: torch.fx.Node, dim: int = dim) -> torch.fx.Node:
            product = emit(aten.matmul.default, emit(aten.transpose.int, x, dim, -1), table)
            return emit(aten.transpose.int, product, dim, -1)

        new_real, new_imaginary = along(real, cosine), emit(aten.neg.default, along(real, sine))
        if imaginary is not None:
            new_real = emit(aten.add.Tensor, new_real, along(imaginary, sine))
            new_imaginary = emit(aten.add.Tensor, new_imaginary, along(imaginary, cosine))
        real, imaginary = new_real, new_imaginary
    result = emit(aten.view_as_complex.default, emit(aten.stack.default, [real, imaginary], -1))
    return replace_node(graph_module, node, result)


def _dft_tables(emit: Callable, length: Any, scale_exponent: float, sine_sign: int, dtype: torch.dtype, device: torch.device) -> tuple[Any, Any]:
    """N**-``scale_exponent``·cos and ``sine_sign``·N**-``scale_exponent``·sin of 2π·jk/N for j, k < N, as graph
    nodes. ``length`` is N, an int or a ``sym_size`` node; N enters the arithmetic as a 0-d tensor
    (:func:`length_as_tensor`)."""
    aten = torch.ops.aten
    index = emit(aten.arange.default, length, dtype=torch.int64, device=device)
    count = length_as_tensor(emit, index)
    products = emit(aten.mul.Tensor, emit(aten.unsqueeze.default, index, 1), emit(aten.unsqueeze.default, index, 0))
    turns = emit(aten._to_copy.default, emit(aten.remainder.Tensor, products, count), dtype=dtype)
    real_count = emit(aten._to_copy.default, count, dtype=dtype)
    angle = emit(aten.div.Tensor, emit(aten.mul.Tensor, turns, 2 * math.pi), real_count)
    cosine, sine = emit(aten.cos.default, angle), emit(aten.sin.default, angle)
    if sine_sign < 0:
        sine = emit(aten.neg.default, sine)
    if scale_exponent:
        scale = emit(aten.pow.Tensor_Scalar, real_count, -scale_exponent)
        cosine, sine = emit(aten.mul.Tensor, cosine, scale), emit(aten.mul.Tensor, sine, scale)
    return cosine, sine


def _complex_constants(program: Any) -> dict[str, tuple[dict[str, Any], str]]:
    """Placeholder name → (the program's table holding it, its key) for every complex buffer or lifted
    constant of ``program`` (persistent buffers live in ``state_dict``, the others in ``constants``)."""
    if program is None:
        return {}
    found: dict[str, tuple[dict[str, Any], str]] = {}
    for spec in program.graph_signature.input_specs:
        target = getattr(spec, "target", None)
        for table in (program.state_dict, program.constants):
            if target in table and _is_complex(table[target]):
                found[spec.arg.name] = (table, target)
    return found


def _rewritable(node: torch.fx.Node, rules: dict[Any, Callable], constants: Mapping[str, Any]) -> bool:
    if node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default:
        return True
    if node.op == "placeholder":
        return node.name in constants  # a complex model input stays complex: the caller passes complex values
    if node.op != "call_function" or node.target not in rules:
        return False  # a complex placeholder (constant), output or op without a rule: leave the graph alone
    if node.target is torch.ops.aten.mul.Tensor and not _is_complex(node.meta.get("val")):
        return False
    if node.target in (torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor):
        return all(_is_complex(getattr(a, "meta", {}).get("val")) for a in node.args[:2])
    return True


def split_complex_arithmetic(graph_module: torch.fx.GraphModule, program: Any = None) -> int:
    """Rewrite complex-valued arithmetic as arithmetic on (..., 2) real pairs; returns how many nodes it rewrote.

    Complex rotary embeddings (``view_as_complex`` of (x0, x1) pairs times ``polar(1, angle)``, then
    ``view_as_real``) are ordinary rotations: the real form is ``torch.view_as_real``'s own layout, so
    ``view_as_complex`` becomes the identity, ``polar`` a stack of cos and sin, a complex product the four real
    products, and shape ops keep the trailing pair dim. A complex buffer or constant of ``program`` (Llama 4's
    vision rotary table ``freqs_ci``, precomputed with ``view_as_complex``) is stored as its ``view_as_real``
    pair, so its placeholder is already the pair. All or nothing: if one complex value is made or used by
    anything without a rule (a complex model input, a graph output, an op such as ``fft``, a complex constant
    when no ``program`` is given), nothing changes and the backend reports its own error.
    """
    graph, rules, constants = graph_module.graph, _complex_rules(), _complex_constants(program)
    touched = [node for node in graph.nodes if _touches_complex(node)]
    if not touched or not all(_rewritable(node, rules, constants) for node in touched):
        return 0
    pairs: dict[torch.fx.Node, Any] = {}
    for node in touched:
        if node.target is torch.ops.aten._assert_tensor_metadata.default:
            continue  # it checks the complex value that goes away; erased below
        if node.op == "placeholder":
            table, key = constants[node.name]
            table[key] = torch.view_as_real(table[key]).contiguous()
            fake_mode = detect_fake_mode([node.meta["val"]])
            with fake_mode if fake_mode is not None else contextlib.nullcontext():
                node.meta["val"] = torch.view_as_real(node.meta["val"]).contiguous()
            pairs[node] = node
            continue
        emit = emitter(graph_module, node)
        result = rules[node.target](emit, lambda arg: pairs.get(arg, arg), node)
        if _is_complex(node.meta.get("val")):
            pairs[node] = result
        else:
            node.replace_all_uses_with(result)
    for node in reversed(touched):
        if node.op == "placeholder":
            continue
        if node.target is torch.ops.aten._assert_tensor_metadata.default or not node.users:
            graph.erase_node(node)
    graph.eliminate_dead_code()
    graph_module.recompile()
    return len(touched)
