"""Stage 3 of the ExecuTorch exporter, continued: XNNPACK fixes outside its layout pass (exporters/executorch/layout.py).

``exporters.executorch.exporter`` imports this module, so every XNNPACK export installs them (backend
``"executorch.xnnpack"``). XNNPACK's partitioner claims nodes by per-op configs, and each partition is then
preprocessed by XNNPACK's own passes (``XNNPACKPassManager``: clone removal, redundant-copy removal, the PReLU
reshape, ...), which assume more than the configs checked; the fixes here cover two such gaps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exporters.fx_rewrites import emitter, replace_node
from exporters.utils import record_hit, register_fx_node_fix, register_patch

__all__: list[str] = []


@register_patch(
    "executorch.xnnpack",
    "executorch.backends.xnnpack.xnnpack_preprocess.generate_node_to_external_map",
    dependency="executorch",
    counts_itself=True,
)
def _patch_xnnpack_output_passed_through(original: Callable) -> Callable:
    """Give a partition output that its passes made an input, or another output, a copy of its own.

    A partition that returns both ``y`` and ``y.clone()`` (or ``y.contiguous()`` of a permuted ``y``) keeps
    two outputs until ``XNNPACKRemoveCloneOpsTransform`` drops the clone: the partition then returns ``y``
    twice, and ``generate_node_to_external_map`` refuses it (``RuntimeError: Output node
    'aten_permute_copy_default' is already in the inputs. This is likely due to pass through arguments, which
    are not supported in XNNPACK Delegate``; the check came with pytorch/executorch#14937). PeAudioModel returns
    its embedder's permuted output that way, OneFormer a ``cat``. A returned graph input hits the same check.
    Each such repeated output becomes ``aten.clone`` of the value, which XNNPACK serialises as a copy
    (``CloneVisitor``), so every output is a value of its own; the partition keeps its outputs and the program
    around it is unchanged. Hits count the copies made. Not reported upstream yet: the ready-to-file issue is
    docs/upstream-drafts/_patch_xnnpack_output_passed_through.md.
    """
    from executorch.backends.xnnpack.xnnpack_preprocess import is_param_node
    from executorch.exir.dialects._ops import ops as exir_ops

    def generate_node_to_external_map(exported_program: Any, graph_module: torch.fx.GraphModule) -> Any:
        graph = graph_module.graph
        output = graph.output_node()
        external = {n for n in graph.nodes if n.op == "placeholder" and not is_param_node(exported_program, n)}
        values, copied = [], False
        for value in output.args[0]:
            if isinstance(value, torch.fx.Node) and value in external:
                with graph.inserting_before(output):
                    copy = graph.call_function(exir_ops.edge.aten.clone.default, (value,))
                copy.meta = dict(value.meta)
                record_hit("_patch_xnnpack_output_passed_through")
                value, copied = copy, True
            external.add(value)
            values.append(value)
        if copied:  # every partition of every export comes through here; most need nothing
            output.args = (values, *output.args[1:])
            graph_module.recompile()
        return original(exported_program, graph_module)

    return generate_node_to_external_map


@register_fx_node_fix(
    "executorch.xnnpack", upstream="https://github.com/pytorch/executorch/pull/18624", dependency="executorch"
)
def _fix_prelu_not_4d_for_xnnpack(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write a PReLU whose input is not 4-D as ``where(x > 0, x, weight * x)``: XNNPACK claims it, then cannot
    lower it.

    XNNPACK's ``PreluConfig`` accepts any ``aten.prelu`` with a constant weight, but its layout pass treats
    PReLU as an NHWC op and converts only 4-D inputs (``Attempting to convert non-NHWC compatible node to
    NHWC``, channels_last_tagged_reshape_pass.py:398), and ``PReLUReshapePass`` requires 4-D too. DAB-DETR's
    box MLPs apply ``nn.PReLU()`` to [batch, queries, hidden] activations. The rewrite is exact (the weight
    broadcast along dim 1, torch's channel dim, or taken whole when it has one element); XNNPACK then runs the
    compare, multiply and select. 4-D PReLUs are left to XNNPACK. Upstream: pytorch/executorch#18624 (the same
    fix to the layout pass, closed without merging; executorch main still converts 4-D only), so the
    ready-to-file issue docs/upstream-drafts/_fix_prelu_not_4d_for_xnnpack.md is still to file.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.prelu.default:
        return False
    source, weight = node.args[0], node.args[1]
    value = source.meta["val"]
    if value.dim() == 4:
        return False
    aten, emit = torch.ops.aten, emitter(graph_module, node)
    channels = weight.meta["val"].numel()
    if channels > 1 and value.dim() >= 2:
        weight = emit(aten.view.default, weight, [channels] + [1] * (value.dim() - 2))
    negative = emit(aten.mul.Tensor, source, weight)
    return replace_node(graph_module, node, emit(aten.where.self, emit(aten.gt.Scalar, source, 0), source, negative))
