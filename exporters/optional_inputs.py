"""Forward arguments that eager treats as optional: filled with eager's own default when a caller omits them.

An exported graph takes every tensor its sample had: a BERT exported with ``token_type_ids`` requires them,
although eager fills zeros when they are missing, so a caller whose tokenizer leaves them out (most do for
single-segment text) got ``missing input 'token_type_ids'``. The forward signature says which arguments are
optional (default ``None``); what eager puts in their place is found by running it: the first constant fill
(0, then 1) of the shape of another input with which eager gives the same outputs as without the argument.
That candidate is then *validated on the written bundle*, called without the argument, against eager
called without it (``ExportResult`` does it, from the files); only then does the manifest record it, as
``optional: {"token_type_ids": {"fill": 0, "shape_of": "input_ids"}}``, and ``exporters.load`` fills it.
An argument not listed there must be passed.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from exporters.bundle.format import OptionalInput
from exporters.validation import named_tensors

__all__ = ["FILLS", "eager_default", "optional_arguments"]

FILLS = (0, 1)  # the defaults eager uses for ids and masks: zeros (token types), ones (attention masks)


def optional_arguments(model: torch.nn.Module, inputs: Mapping[str, Any]) -> list[str]:
    """The sample's tensor arguments that ``model.forward`` declares optional (default None), but the first:
    the model's main input is never optional."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return []
    names = [name for name, value in inputs.items() if isinstance(value, torch.Tensor)]
    return [name for name in names[1:]
            if name in parameters and parameters[name].default is None]


def _outputs(model: torch.nn.Module, inputs: Mapping[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [tensor for _, tensor in named_tensors(model(**copy.deepcopy(dict(inputs))))]


def eager_default(model: torch.nn.Module, inputs: Mapping[str, Any], name: str, atol: float,
                  rtol: float) -> OptionalInput | None:
    """The fill eager uses for ``name`` when it is left out: a constant of ``FILLS`` in the shape of another
    input of the sample's same shape, whose outputs equal (within ``atol``/``rtol``) eager's without ``name``;
    None when eager requires it, no input has its shape, or no fill reproduces eager."""
    value = inputs[name]
    shape_of = next((other for other, tensor in inputs.items() if other != name and isinstance(tensor, torch.Tensor)
                     and tensor.shape == value.shape), None)
    if shape_of is None:
        return None
    without = {k: v for k, v in inputs.items() if k != name}
    try:
        expected = _outputs(model, without)
    except Exception:  # eager needs it after all
        return None
    for fill in FILLS:
        filled = _outputs(model, {**inputs, name: torch.full_like(value, fill)})
        if len(filled) == len(expected) and all(
                a.shape == e.shape and torch.allclose(a.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True)
                for a, e in zip(filled, expected)):
            return OptionalInput(fill, shape_of)
    return None
