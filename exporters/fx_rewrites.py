"""Graph rewrites shared by the workarounds of several backends.

A workaround stays registered per backend (each can be removed on its own when its backend's bug is
fixed); the rewrite it performs lives here once.
"""

from __future__ import annotations

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
