"""Stage 2 of the ONNX exporter, continued: patches to onnxscript's pattern rewriter (the optimizer's second pass).

Registered with ``register_patch("onnx", ...)`` like the patches in ``exporters.onnx.exporter``, which imports
this module, so importing the exporter installs them for every ONNX export (``grep -n "^def _patch_"`` over
``exporters/*.py`` lists them all).
"""

from __future__ import annotations

from typing import Any

from exporters.utils import record_hit, register_patch


@register_patch(
    "onnx", "onnxscript.rewriter._matcher.SimplePatternMatcher.match", dependency="onnxscript", counts_itself=True,
    speed=True,
)  # fmt: skip
def _patch_multi_output_match_checks_its_first_node(original: Any) -> Any:
    """Reject a node for a pattern with several output nodes when it is not of the first output node's op.

    The rewriter tries every rule at every node. For a pattern with more than one output node, the default
    rule set's ``SlicesSplit`` (two ``Slice`` of one input → one ``Split``, onnxscript/rewriter/rules/common/
    _basic_rules.py:163), ``SimplePatternMatcher.match`` (onnxscript/rewriter/_matcher.py:347) first walks the
    whole graph to group its nodes by op and then tries the given node with every node of the second output's
    op, before ``_multi_match`` compares the given node with the first output node at all: per graph node a
    walk of the graph, so the rewrite pass is quadratic in the graph's size. A graph of many nodes and many
    ``Slice`` nodes pays for it: the chunked delta rule of Kimi Linear, Qwen3-Next, Qwen3.5 and OLMo Hybrid
    (``for i in range(1, chunk_size): attn[..., i, :i] = ...``, 63 steps of ``slice`` / ``slice_scatter``,
    modeling_kimi_linear.py:519-522) spent 99 of its 130 s of torch.onnx.export in this pass (cProfile of
    one call, 943 ONNX nodes: 186,530 rule tries, 941,621 ``_multi_match`` calls, 9.3 million node-list
    steps). Every one of those combinations fails at its first comparison when the node's op or domain is
    not the first output node's, so checking that first gives the same result without the walk. No upstream
    issue found.
    """
    from onnxscript.rewriter import _basics

    def match(self: Any, model: Any, graph_or_function: Any, node: Any, **kwargs: Any) -> Any:
        if not self.pattern.has_single_output_node:
            first = self.pattern.output_nodes[0]
            if not (first.op.matches(node.op_type) and first.domain.matches(node.domain)):
                record_hit("_patch_multi_output_match_checks_its_first_node")  # a graph walk skipped
                return _basics.MatchResult().fail(f"OpType mismatch: expected {first.op}, got {node.op_type}.", node)
        return original(self, model, graph_or_function, node, **kwargs)

    return match
