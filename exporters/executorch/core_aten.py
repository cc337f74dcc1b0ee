"""ExecuTorch fixes for operators outside the Core ATen opset, which the edge verifier rejects.

``to_edge_transform_and_lower`` accepts only Core ATen operators (and those a partitioner claims); a traced
operator outside that set fails the export with ``SpecViolationError: Operator torch._ops.aten.<op> is not in
Core ATen opset`` (pytorch/pytorch#158113, moved to ExecuTorch) unless ExecuTorch decomposes it. Each fix here
writes one such operator with Core ATen operators, or drops it where it only feeds assertions. Registered on the
``"executorch"`` backend (stage 5 of ``exporters.executorch.exporter``), so ``grep -n "@register_"`` finds them;
the FFT, a whole-program rewrite, is a stage-4 program fix there (``_fix_fft_not_core_aten``).
"""

from __future__ import annotations

import torch

from exporters.fx_rewrites import (
    count_bincount_by_comparison,
    count_bucketize_by_comparison,
    count_histc_by_comparison,
    count_searchsorted_by_comparison,
    drop_assertion_only_chain,
    drop_tensor_check,
    running_extreme_by_triangle,
)
from exporters.utils import register_fx_node_fix


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_histc_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Count ``histc`` bins with compares and a sum: ``aten.histc`` is not in the Core ATen opset.

    Mixture-of-experts routers count tokens per expert with ``torch.histc(expert_ids, bins=num_experts, min=0,
    max=num_experts - 1)`` (transformers' grouped-mm experts, every MoE family that uses them, and the aux-loss
    helpers); ExecuTorch's edge verifier rejects it with ``Operator torch._ops.aten.histc.default is not in Core
    ATen opset`` and ExecuTorch has no decomposition for it. The rewrite bins exactly as ATen's CPU kernel does.
    """
    return count_histc_by_comparison(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_bucketize_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Bucket with compares and a sum: ``aten.bucketize`` is not in the Core ATen opset.

    Idefics2/Idefics3, SmolVLM and Phi-4 multimodal place each vision patch's fractional coordinate into
    position buckets with ``torch.bucketize(coords, boundaries, right=True)``; ExecuTorch's edge verifier rejects
    it with ``Operator torch._ops.aten.bucketize.Tensor is not in Core ATen opset`` and has no decomposition.
    """
    return count_bucketize_by_comparison(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_tensor_check_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Drop traced ``torch._check_tensor_all`` assertions: ``aten._is_all_true`` is not in the Core ATen opset.

    transformers' ``torch_compilable_check(tensor_cond, ...)`` (Llava's check that the image placeholders match
    the image features, in every vision-language prefill) traces to ``_is_all_true`` → ``item`` → ``sym_ite`` →
    ``_assert_scalar``; ExecuTorch's edge verifier rejects it with ``Operator
    torch._ops.aten._is_all_true.default is not in Core ATen opset`` (and ``sym_ite`` after it). The chain only
    raises on inputs the model refuses, computes no value, and torch.onnx drops the same assertion (the ONNX
    twin, ``_aten_is_all_true``, only has to translate the op).
    """
    return drop_tensor_check(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_unique_consecutive_check_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Drop a ``unique_consecutive`` that only feeds runtime assertions: it is not in the Core ATen opset.

    The BART-style sequence-classification heads (BART, mBART, PLBart, MVP, BigBirdPegasus, T5, mT5, UMT5)
    check that every row has as many EOS tokens with ``torch_compilable_check(torch.unique_consecutive(
    eos_mask.sum(1)).numel() == 1)``; traced, that is ``unique_consecutive`` → ``sym_size`` (unbacked) →
    ``_assert_scalar``. ExecuTorch's edge verifier rejects the op (``Operator
    torch._ops.aten.unique_consecutive.default is not in Core ATen opset``) although its own
    ``RemoveGraphAssertsPass`` deletes the assertion, and with it the op's last use, in ``to_executorch``
    anyway; torch.onnx drops the same assertion before translating. Only chains that end in assertions are
    removed, so a ``unique_consecutive`` whose values the model uses still fails loudly.
    """
    if node.op != "call_function" or node.target is not torch.ops.aten.unique_consecutive.default:
        return False
    return drop_assertion_only_chain(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_cummax_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Write ``cummax``/``cummin`` as a masked max/min over the ``j <= i`` triangle: neither is Core ATen.

    (MM) Grounding DINO's text mask builder takes ``torch.cummax`` and ``torch.cummin`` over special-token
    positions (modeling_mm_grounding_dino.py:1751-1753, modeling_grounding_dino.py:1833-1840); ExecuTorch's edge
    verifier rejects them with ``Operator torch._ops.aten.cummax.default is not in Core ATen opset`` and has no
    decomposition. Same formula as the ONNX translation ``_aten_cummax``, torch's last-tied index included.
    """
    return running_extreme_by_triangle(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_bincount_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Count with compares and a sum a ``bincount`` whose length the program fixes: it is not Core ATen.

    Splinter's pretraining head counts question tokens per row, ``torch.bincount(rows)`` (modeling_splinter.py:722),
    and checks that there is one count per row; ExecuTorch's edge verifier rejects it with ``Operator
    torch._ops.aten.bincount.default is not in Core ATen opset`` and has no decomposition. See
    :func:`exporters.fx_rewrites.count_bincount_by_comparison`.
    """
    return count_bincount_by_comparison(graph_module, node)


@register_fx_node_fix("executorch", upstream="https://github.com/pytorch/pytorch/issues/158113", dependency="executorch")
def _fix_searchsorted_not_core_aten(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Search with compares and a sum: ``aten.searchsorted`` is not in the Core ATen opset.

    Splinter's question positions take each question token's column as ``i - searchsorted(rows, rows)``
    (modeling_splinter.py:728); ExecuTorch's edge verifier rejects it with ``Operator
    torch._ops.aten.searchsorted.Tensor is not in Core ATen opset``. The ONNX twin is ``_aten_searchsorted``.
    """
    return count_searchsorted_by_comparison(graph_module, node)
