"""ExecuTorch fixes for Core ATen operators that the portable runtime has no kernel for.

The edge verifier accepts every Core ATen operator, so a program using one without a portable kernel lowers
and is written to a ``.pte`` that no user can load: ``load_method("forward")`` fails with error 0x14
(``Error::OperatorMissing``). Each fix here rewrites such an operator, before lowering, into operators that
``executorch.extension.pybindings.portable_lib._get_operator_names()`` lists. Registered on the
``"executorch"`` backend (stage 5 of ``exporters.exporter_executorch``), so ``grep -n "@register_"`` finds them.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from exporters.fx_rewrites import emitter
from exporters.utils import register_fx_node_fix

__all__ = ["scatter_reduce_by_mask"]

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _neutral(reduce: str, dtype: torch.dtype) -> float | int:
    """The value that leaves ``reduce`` unchanged: what a position of the mask that does not match contributes."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    lowest, highest = (-float("inf"), float("inf")) if dtype.is_floating_point else (info.min, info.max)
    return lowest if reduce == "amax" else highest


def _same_size(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    return statically_known_true(a == b)


def scatter_reduce_by_mask(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.scatter_reduce.two(self, dim, index, src, reduce, include_self)`` as a mask and a reduction.

    ``mask[..., j, n, ...] = index[..., j, ...] == n`` for ``n`` in ``arange(self.size(dim))`` (the new axis
    right after ``dim``); ``src`` where the mask holds, the reduction's neutral value elsewhere, reduced over
    ``dim`` with ``sum``/``prod``/``amax``/``amin`` gives every output position's reduction of the ``src`` values
    scattered to it. ``include_self`` combines it with ``self`` (add, mul, maximum, minimum; ``mean`` divides
    ``self + sum`` by ``count + 1``), without it ``mean`` divides by the count; positions no index points to
    keep ``self`` in both cases, bit for bit, as in ATen. ``amax``/``amin`` are exact, ``sum``/``mean``/``prod``
    differ from ATen only by summation order.

    Memory: the mask and the masked ``src`` hold ``index.numel() * self.size(dim)`` elements each (Tapas'
    segment reductions: tokens x segments), where ATen's kernel needs none; fine for segment counts in the
    hundreds, not for scattering into a large table.

    Handled: rank >= 1, ``self.size(dim)`` static, ``src`` and ``index`` of ``self``'s size on every other dim
    and of one size on ``dim``, non-bool dtypes, ``mean`` on floating dtypes only (ATen floors integer means).
    Anything else is left alone and still fails loudly at load. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.scatter_reduce.two:
        return False
    self_node, dim, index, src, reduce = node.args[:5]
    include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
    out, index_value, src_value = node.meta.get("val"), index.meta.get("val"), src.meta.get("val")
    if reduce not in _REDUCTIONS or not all(isinstance(v, torch.Tensor) for v in (out, index_value, src_value)):
        return False
    rank = out.dim()
    if rank == 0 or out.dtype == torch.bool or (reduce == "mean" and not out.dtype.is_floating_point):
        return False
    dim %= rank
    segments = out.shape[dim]
    if not isinstance(segments, int) or index_value.dim() != rank or src_value.dim() != rank:
        return False
    if not all(_same_size(i, s) for i, s in zip(index_value.shape, src_value.shape, strict=True)):
        return False
    if not all(_same_size(index_value.shape[d], out.shape[d]) for d in range(rank) if d != dim):
        return False

    aten, emit = torch.ops.aten, emitter(graph_module, node)
    positions = emit(aten.arange.start_step, 0, segments, dtype=index_value.dtype, device=out.device)
    positions = emit(aten.view.default, positions, [1] * (dim + 1) + [segments] + [1] * (rank - dim - 1))
    mask = emit(aten.eq.Tensor, emit(aten.unsqueeze.default, index, dim + 1), positions)
    neutral = emit(aten.full.default, [], _neutral(reduce, out.dtype), dtype=out.dtype, device=out.device)
    chosen = emit(aten.where.self, mask, emit(aten.unsqueeze.default, src, dim + 1), neutral)
    if reduce in ("sum", "mean"):
        reduced = emit(aten.sum.dim_IntList, chosen, [dim])
    elif reduce == "prod":
        reduced = emit(aten.prod.dim_int, chosen, dim)
    else:
        reduced = emit(aten.amax.default if reduce == "amax" else aten.amin.default, chosen, [dim])
    touched = emit(aten.any.dim, mask, dim)
    if reduce == "mean":
        count = emit(aten.sum.dim_IntList, emit(aten._to_copy.default, mask, dtype=out.dtype), [dim])
        if include_self:
            reduced = emit(aten.div.Tensor, emit(aten.add.Tensor, reduced, self_node), emit(aten.add.Tensor, count, 1))
        else:
            reduced = emit(aten.div.Tensor, reduced, emit(aten.clamp.default, count, 1))
    elif include_self:
        combine = {"sum": aten.add.Tensor, "prod": aten.mul.Tensor, "amax": aten.maximum.default,
                   "amin": aten.minimum.default}[reduce]  # fmt: skip
        reduced = emit(combine, self_node, reduced)
    result = emit(aten.where.self, touched, reduced, self_node)
    node.replace_all_uses_with(result)
    graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/executorch/issues/11330", dependency="executorch")
def _fix_scatter_reduce_without_portable_kernel(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``scatter_reduce.two`` as a one-hot mask and a reduction: the portable runtime has no kernel for it.

    Tapas' segmented reductions (``reduce_sum/mean/max/min`` over cell and column segments,
    ``scatter_reduce(..., include_self=False)``) lower and are written, but ``executorch.runtime`` fails to
    load the ``.pte``: ``Failed to load method forward, error: 0x14`` (OperatorMissing,
    ``aten::scatter_reduce.two_out``; pytorch/executorch#11330, portable kernel not implemented). See
    :func:`scatter_reduce_by_mask` for the rewrite, its exactness and its memory cost.
    """
    return scatter_reduce_by_mask(graph_module, node)
