"""Graph rewrites shared by the workarounds of several backends.

A workaround stays registered per backend (each can be removed on its own when its backend's bug is
fixed); the rewrite it performs lives here once.
"""

from __future__ import annotations

import math

import torch


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
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True
