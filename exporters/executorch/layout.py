"""Stage 3 of the ExecuTorch exporter, continued: XNNPACK's channels-last layout pass, where it changes results.

``exporters.executorch.exporter`` imports this module, so every XNNPACK export installs these patches
(``register_patch("executorch.xnnpack", ...)``). XNNPACK runs convolutions, poolings and ``max.dim`` /
``amax`` in NHWC: its ``ChannelsLastTaggedReshapePass`` tags their outputs NHWC and lets the tag flow through
every op it does not list as needing NCHW, on the assumption that such an op does not care about the layout.
Elementwise ops do not; the visitors of ``cat``, ``permute``, ``slice_copy``, ``constant_pad_nd`` and
``view_copy`` remap their dims for an NHWC input. A softmax does neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exporters.utils import record_hit, register_patch

__all__: list[str] = []


@register_patch(
    "executorch.xnnpack",
    "executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass.ChannelsLastTaggedReshapePass"
    ".requires_nchw_inputs",
    dependency="executorch",
    counts_itself=True,
)
def _patch_xnnpack_softmax_of_channels_last(original: Callable) -> Callable:
    """Give XNNPACK's softmax its input in NCHW, so that it normalises over the dim the graph names.

    XNNPACK takes ``_softmax`` over the last dim only (``SoftmaxConfig``), and its visitor serialises it as
    a softmax over the innermost memory dim. Its layout pass does not list softmax among the ops that need
    NCHW inputs, so when the input is tagged NHWC (it comes from a convolution or a max pooling) the softmax
    runs over the channels. The attention-sink softmax of GPT-OSS, MiMo-V2-Flash and HunYuan V4,
    ``softmax(logits - logits.max(-1, keepdim=True).values)``, gave logits off by up to 2.7 (ONNX passes); a
    4-D ``softmax(conv(x), -1)`` is off by 0.48. Returning True for a softmax makes the pass convert an NHWC
    input back to NCHW first (a transpose inside the delegate), as it does for ``linear``. A hit is counted
    where the input was NHWC, the case the patch changes. Not reported upstream yet: the ready-to-file issue
    is docs/upstream-drafts/_patch_xnnpack_softmax_of_channels_last.md.
    """
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import (
        ChannelsLastTaggedReshapePass,
    )
    from executorch.exir.dialects._ops import ops as exir_ops

    softmax = exir_ops.edge.aten._softmax.default

    def requires_nchw_inputs(self: Any, node: torch.fx.Node) -> bool:
        if original(self, node):
            return True
        if node.target != softmax:
            return False
        if ChannelsLastTaggedReshapePass.is_nhwc_node(node.args[0]):
            record_hit("_patch_xnnpack_softmax_of_channels_last")
        return True

    return requires_nchw_inputs
