"""Stage 3 of the ExecuTorch exporter, continued: the outputs of an XNNPACK partition, after its own passes.

``exporters.exporter_executorch`` imports this module, so every XNNPACK export installs the patch
(``register_patch("executorch.xnnpack", ...)``). XNNPACK preprocesses each partition with its own passes
(``XNNPACKPassManager``: clone removal, redundant-copy removal, ...) and only then numbers the partition's
external values, each graph input and each output once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exporters.utils import record_hit, register_patch

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
        values = []
        for value in output.args[0]:
            if isinstance(value, torch.fx.Node) and value in external:
                with graph.inserting_before(output):
                    copy = graph.call_function(exir_ops.edge.aten.clone.default, (value,))
                copy.meta = dict(value.meta)
                record_hit("_patch_xnnpack_output_passed_through")
                value = copy
            external.add(value)
            values.append(value)
        output.args = (values, *output.args[1:])
        graph_module.recompile()
        return original(exported_program, graph_module)

    return generate_node_to_external_map
