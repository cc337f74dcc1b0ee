"""ExecuTorch fixes for Core ATen operators that the portable runtime cannot run.

The edge verifier accepts every Core ATen operator, so a program using one without a portable kernel lowers
and is written to a ``.pte`` that no user can load: ``load_method("forward")`` fails with error 0x14
(``Error::OperatorMissing``); one whose portable kernel rejects the traced arguments loads and fails in
``execute`` (0x12, ``Error::InvalidArgument``). Each fix here rewrites such an operator, before lowering, into operators that
``executorch.extension.pybindings.portable_lib._get_operator_names()`` lists. Registered on the
``"executorch"`` backend (stage 5 of ``exporters.executorch.exporter``), so ``grep -n "@register_"`` finds them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from exporters.fx_rewrites import emitter, length_as_tensor, node_argument, replace_node, size_of
from exporters.utils import record_hit, register_fx_node_fix, register_patch

__all__ = [
    "antialiased_resize_as_matmuls",
    "conv3d_as_conv2d_sum",
    "negative_pad_as_slices",
    "scatter_reduce_by_mask",
    "sort_as_topk",
]

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

    Handled: rank >= 1, ``self.size(dim)`` static or symbolic (Tapas flattens batch x segments into the scatter
    dim, so a dynamic batch makes it a multiple of the batch symbol), ``index`` of ``self``'s size on every other
    dim, ``src`` sliced to ``index``'s size where they are not known equal (Tapas' ids and values carry batch
    symbols torch did not unify; ATen reads only that part of ``src``), non-bool dtypes, ``mean`` on floating
    dtypes only (ATen floors integer means).
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
    if index_value.dim() != rank or src_value.dim() != rank:
        return False
    if not all(_same_size(index_value.shape[d], out.shape[d]) for d in range(rank) if d != dim):
        return False

    aten, emit = torch.ops.aten, emitter(graph_module, node)
    for d in range(rank):  # ATen reads src only where index has elements (index.size(d) <= src.size(d))
        if not _same_size(index_value.shape[d], src_value.shape[d]):
            src = emit(aten.slice.Tensor, src, d, 0, size_of(emit, index, d))
    segments = size_of(emit, self_node, dim)
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


def _triple(value: list[int] | tuple[int, ...]) -> list[int]:
    return list(value) * 3 if len(value) == 1 else list(value)


def conv3d_as_conv2d_sum(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.conv3d`` on a 5-D input as one 2-D convolution per temporal kernel offset, summed.

    ``out[:, :, t] = sum_k conv2d(x_padded[:, :, t * stride_t + k * dilation_t], weight[:, :, k])`` (bias added
    once): the frames each kernel offset sees are one strided ``slice`` of the time-padded input, folded into the
    batch (``[N * T_out, C, H, W]``), so a kernel of depth ``k_t`` costs ``k_t`` conv2d calls and no copy of the
    input per output frame. Equal to ATen's up to the order of the sum over the depth. Handled: ``conv3d.default``
    with list padding on a 5-D input whose non-batch sizes are static; returns True when it rewrote ``node``.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.conv3d.default:
        return False
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    names_defaults = (("stride", [1]), ("padding", [0]), ("dilation", [1]))
    stride, padding, dilation = (
        _triple(node.args[3 + i] if len(node.args) > 3 + i else node.kwargs.get(name, default))
        for i, (name, default) in enumerate(names_defaults)
    )
    groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
    x_value, weight_value, out = x.meta.get("val"), weight.meta.get("val"), node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in (x_value, weight_value, out)) or x_value.dim() != 5:
        return False
    if not all(isinstance(size, int) for size in (*x_value.shape[1:], *out.shape[1:], *weight_value.shape)):
        return False
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    channels, frames_out = x_value.shape[1], out.shape[2]
    if padding[0]:
        x = emit(aten.constant_pad_nd.default, x, [0, 0, 0, 0, padding[0], padding[0]], 0.0)
    total = None
    for offset in range(weight_value.shape[2]):
        start = offset * dilation[0]
        frames = emit(aten.slice.Tensor, x, 2, start, start + stride[0] * (frames_out - 1) + 1, stride[0])
        frames = emit(aten.reshape.default, emit(aten.permute.default, frames, [0, 2, 1, 3, 4]),
                      [-1, channels, *x_value.shape[3:]])  # fmt: skip
        partial = emit(aten.conv2d.default, frames, emit(aten.select.int, weight, 2, offset),
                       bias if total is None else None, stride[1:], padding[1:], dilation[1:], groups)  # fmt: skip
        total = partial if total is None else emit(aten.add.Tensor, total, partial)
    folded = emit(aten.reshape.default, total, [-1, frames_out, *out.shape[1:2], *out.shape[3:]])
    result = emit(aten.contiguous.default, emit(aten.permute.default, folded, [0, 2, 1, 3, 4]))
    node.replace_all_uses_with(result)
    graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/executorch/issues/11704", dependency="executorch")
def _fix_conv3d_without_portable_kernel(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``conv3d`` as summed ``conv2d`` calls: the portable convolution kernel takes only 3-D and 4-D input.

    Video patch embeddings (VJEPA2's ``nn.Conv3d`` tubelets, modeling_vjepa2.py) are not taken by XNNPACK and
    stay on the portable ``aten::convolution.out``, which rejects them at run time: ``Check failed (in.dim() ==
    3 || in.dim() == 4): Expect input tensor to be 3-D or 4-D, but got, 5.`` and ``method->execute() failed
    with error 0x12`` (pytorch/executorch#11704; 5-D support in the portable kernel is pytorch/executorch#19977,
    not in executorch 1.5.1). See :func:`conv3d_as_conv2d_sum`; the 2-D convolutions it writes go to XNNPACK.
    """
    return conv3d_as_conv2d_sum(graph_module, node)


def sort_as_topk(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``aten.sort(x, dim, descending)`` as ``aten.topk(x, x.size(dim), dim, largest=descending, sorted=True)``,
    and ``aten.argsort`` as that topk's indices.

    The k largest (or smallest) of all ``k = x.size(dim)`` elements, in order, are the sorted values, and
    ``topk`` returns the same (values, indices) pair, so a sort keeps its users and its ``meta["val"]``; an
    argsort (ViTMAE's random masking, ``torch.argsort(noise, dim=1)``, which torch.export keeps as
    ``aten.argsort`` until the decompositions turn it into a sort) is replaced by the indices. Values are
    exact. Indices of equal values may come in another order than ATen's, which an unstable sort leaves
    unspecified anyway; ``stable=True`` is left alone. A dim of symbolic size gives ``k`` as its ``sym_size``
    node. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function":
        return False
    aten = torch.ops.aten
    if node.target in (aten.sort.default, aten.argsort.default):
        dim, descending = node_argument(node, 1, "dim", -1), node_argument(node, 2, "descending", False)
    elif node.target in (aten.sort.stable, aten.argsort.stable) and not node.kwargs.get("stable"):
        dim, descending = node.kwargs.get("dim", -1), node.kwargs.get("descending", False)
    else:
        return False
    value = node.args[0].meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return False
    emit = emitter(graph_module, node)
    topk_args = (node.args[0], size_of(emit, node.args[0], dim), dim, bool(descending), True)
    if node.target in (aten.sort.default, aten.sort.stable):
        node.target, node.args, node.kwargs = aten.topk.default, topk_args, {}
        return True
    return replace_node(graph_module, node, emit(operator.getitem, emit(aten.topk.default, *topk_args), 1))


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/executorch/issues/11320", dependency="executorch")
def _fix_sort_without_portable_kernel(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Sort with ``topk`` over the whole dim: the portable runtime has ``aten::topk.values`` but no sort kernel.

    SamHQ's mask decoder orders its masks by predicted IoU, ``torch.sort(iou_pred, dim=2, descending=True)``
    (modeling_sam_hq.py); the ``.pte`` is written but ``load_method("forward")`` fails with ``Failed to load
    method forward, error: 0x:14`` (``Missing operator: aten::sort.values``; pytorch/executorch#11320, the
    portable library's Core ATen coverage, which tracks the missing sort kernel). ViTMAE's random masking
    (``torch.argsort`` of the noise and of the shuffle, modeling_vit_mae.py:316-317) failed the same way until
    ``argsort`` was rewritten too, and JetMoE's router, which sorts the routed tokens' experts
    (``top_k_experts.sort(0)``, modeling_jetmoe.py:199), failed so once exported with a dynamic sequence, until a
    dim of symbolic size was rewritten as well. See :func:`sort_as_topk`.
    """
    return sort_as_topk(graph_module, node)


def negative_pad_as_slices(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write a constant ``aten.pad``/``aten.constant_pad_nd(x, pad, value)`` whose ``pad`` has negative entries as slices that crop
    those sides, then the pad with the non-negative entries (none left: the slices replace the node).

    ATen reads a negative pad as cropping that many elements from that side; the result is the same tensor
    of the same shape, so the node keeps its users and ``meta["val"]``. A cropped dim of symbolic size ends at
    its ``sym_size`` node plus the negative pad. Returns True when it rewrote ``node``.
    """
    if node.op != "call_function":
        return False
    if node.target is torch.ops.aten.pad.default:  # torch.export keeps F.pad; to_edge decomposes it later
        if node_argument(node, 2, "mode", "constant") != "constant":
            return False
        fill = node_argument(node, 3, "value", None)
    elif node.target is torch.ops.aten.constant_pad_nd.default:
        fill = node_argument(node, 2, "value", 0)
    else:
        return False
    pad, value = list(node.args[1]), node.args[0].meta.get("val")
    if not isinstance(value, torch.Tensor) or not all(isinstance(p, int) for p in pad) or min(pad, default=0) >= 0:
        return False
    emit, cropped = emitter(graph_module, node), node.args[0]
    for pair in range(len(pad) // 2):  # pad pairs run from the last dim back
        before, after, dim = pad[2 * pair], pad[2 * pair + 1], value.dim() - 1 - pair
        if before < 0 or after < 0:
            size = size_of(emit, node.args[0], dim)
            end = size + min(after, 0) if isinstance(size, int) else emit(operator.add, size, min(after, 0))
            cropped = emit(torch.ops.aten.slice.Tensor, cropped, dim, max(-before, 0), end)
    rest = [max(p, 0) for p in pad]
    if not any(rest):
        return replace_node(graph_module, node, cropped)
    node.target = torch.ops.aten.constant_pad_nd.default
    node.args, node.kwargs = (cropped, rest, 0 if fill is None else fill), {}
    return True



@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/executorch/issues/12456", dependency="executorch")
def _fix_negative_pad_without_portable_kernel(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Crop with slices: the portable ``constant_pad_nd`` kernel rejects negative pads, which ATen allows.

    RWKV's time shift, ``nn.ZeroPad2d((0, 0, 1, -1))``, shifts the sequence by one step and drops the last;
    the ``.pte`` loads and ``execute`` fails with 0x12 (``Check failed (pad[i] >= 0): Padding values must be
    non-negative``, the check pytorch/executorch#18018 added), and XNNPACK does not claim such a pad either
    (pytorch/executorch#12935, for pytorch/executorch#12456). See :func:`negative_pad_as_slices`.
    """
    return negative_pad_as_slices(graph_module, node)


def _antialiased_weights(emit: Callable[..., torch.fx.Node], in_size: int, out_size: int | torch.fx.Node) -> torch.fx.Node:
    """The ``[out_size, in_size]`` matrix of ATen's antialiased bilinear weights along one axis (align_corners off).

    ATen (``_compute_index_ranges_weights`` in UpSampleKernel.cpp, antialias) gives output ``i`` the centre
    ``c = scale * (i + 0.5)`` with ``scale = in / out``, the support ``max(scale, 1)``, and to each input ``j``
    of its window the triangle ``max(0, 1 - |j + 0.5 - c| / support)``, normalised by the window's sum. The
    triangle is zero outside the window, so the dense row holds the same weights.
    """
    aten = torch.ops.aten
    outputs = emit(aten.arange.start_step, 0, out_size, dtype=torch.float32)
    scale = emit(aten.mul.Tensor, emit(aten.reciprocal.default, length_as_tensor(emit, outputs)), float(in_size))
    support = emit(aten.clamp_min.default, scale, 1.0)
    centres = emit(aten.mul.Tensor, emit(aten.add.Tensor, outputs, 0.5), scale)
    inputs = emit(aten.arange.start_step, 0, in_size, dtype=torch.float32)
    offsets = emit(aten.sub.Tensor, emit(aten.unsqueeze.default, emit(aten.add.Tensor, inputs, 0.5), 0),
                   emit(aten.unsqueeze.default, centres, 1))  # fmt: skip
    distance = emit(aten.div.Tensor, emit(aten.abs.default, offsets), support)
    triangle = emit(aten.clamp_min.default, emit(aten.rsub.Scalar, distance, 1.0), 0.0)
    return emit(aten.div.Tensor, triangle, emit(aten.sum.dim_IntList, triangle, [1], True))


def antialiased_resize_as_matmuls(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write a float32 ``_upsample_bilinear2d_aa`` to a symbolic size as ``W_h @ x @ W_w.T``.

    The resize is separable: each output row mixes input rows by one weight matrix (:func:`_antialiased_weights`)
    and each column likewise, so two matmuls give every output element, up to float32 summation order. Only
    ``align_corners=False`` with the size given (no scale factors), static input sizes and an output size with a
    symbolic part are rewritten: a static resize runs in the portable kernel as it is. Returns True when it
    rewrote ``node``.
    """
    aten = torch.ops.aten
    if node.op != "call_function" or node.target not in (aten._upsample_bilinear2d_aa.vec, aten._upsample_bilinear2d_aa.default):
        return False
    source, size = node.args[0], node_argument(node, 1, "output_size", None)
    align_corners = node_argument(node, 2, "align_corners", False)
    # .vec's scale_factors or .default's scales_h and scales_w, positional or by keyword
    scales = [*node.args[3:], *(v for k, v in node.kwargs.items() if k.startswith("scale"))]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() != 4 or value.dtype != torch.float32 or align_corners:
        return False
    if size is None or len(size) != 2 or any(s is not None for s in scales):
        return False
    in_height, in_width = value.shape[2:]
    if not isinstance(in_height, int) or not isinstance(in_width, int) or all(isinstance(s, int) for s in size):
        return False
    emit = emitter(graph_module, node)
    rows = emit(aten.matmul.default, _antialiased_weights(emit, in_height, size[0]), source)
    columns = emit(aten.permute.default, _antialiased_weights(emit, in_width, size[1]), [1, 0])
    return replace_node(graph_module, node, emit(aten.matmul.default, rows, columns))


@register_fx_node_fix("executorch", dependency="executorch")
def _fix_antialiased_resize_to_a_symbolic_size(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Resize with two weight matmuls: the portable ``_upsample_bilinear2d_aa.out`` does not resize its output.

    Siglip2 resizes its position grid to each image's patch grid, ``F.interpolate(..., size=(height, width),
    mode="bilinear", antialias=True)`` with ``height, width = spatial_shapes[i].tolist()``
    (modeling_siglip2.py:167-179), a size read from a tensor. Memory planning gives the output its upper-bound
    shape and the kernel checks that ``out`` already has the requested one, so the ``.pte`` loads and
    ``execute`` fails with 0x12 (``Check failed (out.size(3) == output_size[1])``), static and dynamic alike.
    See :func:`antialiased_resize_as_matmuls`; the report to file is
    docs/upstream-drafts/upsample-bilinear2d-aa-out-not-resized.md.
    """
    return antialiased_resize_as_matmuls(graph_module, node)


@register_patch(
    "executorch", "executorch.exir.passes.spec_prop_pass.SpecPropPass.__call__", dependency="executorch",
    counts_itself=True,
)
def _patch_nonzero_planned_row_major(original: Callable) -> Callable:
    """Plan ``nonzero``'s output with the row-major dim order the portable kernel writes it in.

    torch gives ``nonzero``'s [count, ndim] result column-major strides, ``(1, count)`` (eager and its fake
    implementation, fake_impls.py ``nonzero``), and ExecuTorch's ``SpecPropPass`` turns them into the planned
    tensor's dim order ``(1, 0)``; the portable ``nonzero.out`` kernel writes the indices row-major all the
    same. The first op to read them checks or uses the declared order: OneFormer's and Splinter's column slices
    (``idx[:, 0]``) stop the program (``Check failed (tensors_have_same_dim_order(in, out))``, ``method->
    execute() failed with error 0x12``), and a contiguous copy in between reads the indices transposed (14 of
    15 off). Each nonzero output's spec (and its ``out`` buffer's, after the out-variant pass) gets contiguous
    strides, so the program declares what the kernel writes. Related: pytorch/executorch#11086 (dim orders in
    the program that differ from what a kernel produces); a hit is each spec changed. Not reported upstream
    yet: the ready-to-file issue is docs/upstream-drafts/_patch_nonzero_planned_row_major.md.
    """
    from executorch.exir.tensor import contiguous_stride_from_shape, dim_order_from_stride

    def is_nonzero(target: Any) -> bool:
        return getattr(getattr(target, "_op", target), "overloadpacket", None) is torch.ops.aten.nonzero

    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        result = original(self, graph_module)
        for module in result.graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if node.op != "call_function" or not is_nonzero(node.target):
                    continue
                for planned in [node, *(v for v in node.kwargs.values() if isinstance(v, torch.fx.Node))]:
                    spec = planned.meta.get("spec")
                    if spec is None or not hasattr(spec, "dim_order"):
                        continue
                    stride = tuple(contiguous_stride_from_shape(spec.shape))
                    if tuple(spec.stride) != stride:
                        spec.stride, spec.dim_order = stride, dim_order_from_stride(stride)
                        record_hit("_patch_nonzero_planned_row_major")
        return result

    return call

