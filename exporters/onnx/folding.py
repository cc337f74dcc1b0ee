"""Stage 1 of the ONNX exporter, continued: patches to onnxscript's constant folder (the optimizer's first pass).

Registered with ``register_patch("onnx", ...)`` like the torch patches in ``exporters.onnx.exporter``, which
imports this module, so importing the exporter installs them for every ONNX export
(``grep -rn "^def _patch_" exporters/`` lists them all).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exporters.utils import record_hit, register_patch


@register_patch("onnx", "onnxscript.optimizer._constant_folding.registry", dependency="onnxscript")
def _patch_split_to_sequence_fold_needs_a_split_value(original: Any) -> Any:
    """Leave a ``SplitToSequence`` unfolded when its ``split`` is not a constant and not a static 1-D shape.

    The folder's ``split_to_sequence`` (onnxscript/optimizer/_constant_folding.py:809, since
    microsoft/onnxscript#2544) turns the op into ``Split`` + ``SequenceConstruct``; it handles a split with a
    known value, or without a value but with a static 1-D shape, and otherwise reads ``split_value.ndim`` of
    ``None`` (:875): ``AttributeError: 'NoneType' object has no attribute 'ndim'``, raised as a ``PassError``
    that fails the export (microsoft/onnxscript#2550 added the check for a *missing* split only). torchlib
    lowers ``chunk`` of a dynamic-length dim to ``SplitToSequence(x, split)`` with a computed scalar split,
    exactly that case: ProphetNet's n-gram streams, ``hidden_states.chunk(1 + ngram, dim=1)``
    (modeling_prophetnet.py:599-602). Not folding is what the folder does for every other input it cannot
    read, and ONNX Runtime runs the op as it is. The folder looks its evaluators up in the module's
    ``registry``; the replacement is a copy of it whose SplitToSequence evaluator is guarded, so nothing else
    changes. No upstream issue found; draft with reproducer:
    docs/upstream-drafts/_patch_split_to_sequence_fold_needs_a_split_value.md.
    """
    from onnxscript.optimizer import _constant_folding

    def guarded(fold: Any) -> Any:
        def split_to_sequence(node: Any, op: Any, state: Any) -> Any:
            split = node.inputs[1] if len(node.inputs) > 1 else None
            if split is not None and _constant_folding._get_numpy_value(split) is None:
                shape = split.shape
                if shape is not None and shape.is_static() and len(shape) != 1:
                    record_hit("_patch_split_to_sequence_fold_needs_a_split_value")  # where it would raise
                    return None
            return fold(node, op, state)

        return split_to_sequence

    copy = type(original)()
    copy.op_evaluators = {key: list(evaluators) for key, evaluators in original.op_evaluators.items()}
    copy.op_evaluators[("", "SplitToSequence")] = [
        dataclasses.replace(evaluator, function=guarded(evaluator.function))
        for evaluator in original.op_evaluators.get(("", "SplitToSequence"), [])
    ]
    return copy
