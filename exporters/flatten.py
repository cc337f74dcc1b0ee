"""Flatten model outputs to named leaves whatever pytree registration the installed transformers made.

Why: validation, output naming and the artifact runners name every output tensor by its pytree key path
(``last_hidden_state``, ``past_key_values.layers.0.keys``). transformers registers its ``ModelOutput``
subclasses with torch's pytree itself, and how it does so changed between releases: up to 5.12 it passes
only ``flatten_fn`` (context: the field names), later releases also pass ``flatten_with_keys_fn``.
``pytree.tree_flatten_with_path`` refuses a node registered without keys (``Did not find a
flatten_with_keys_fn``), so every export at transformers 5.12.1 failed inside our own naming step. This
module walks such nodes itself, taking keys from the node's context when it is the list of field names
(a ``ModelOutput``) and positions otherwise, and leaves every node that has keys to pytree.
"""

from __future__ import annotations

from typing import Any

import torch.utils._pytree as pytree

KeyPath = tuple[Any, ...]


def _lacks_keys(node: Any) -> bool:
    entry = pytree.SUPPORTED_NODES.get(type(node))
    return entry is not None and entry.flatten_with_keys_fn is None


def _keyed_children(node: Any) -> list[tuple[Any, Any]]:
    """A keyless node's children with keys: field names when the context lists one per child."""
    children, context = pytree.SUPPORTED_NODES[type(node)].flatten_fn(node)
    children = list(children)
    names = list(context) if isinstance(context, (list, tuple)) else []
    if len(names) == len(children) and all(isinstance(name, str) for name in names):
        return [(pytree.MappingKey(name), child) for name, child in zip(names, children)]
    return [(pytree.SequenceKey(index), child) for index, child in enumerate(children)]


def leaves_with_path(tree: Any, prefix: KeyPath = ()) -> list[tuple[KeyPath, Any]]:
    """``pytree.tree_flatten_with_path(tree)[0]``, also through nodes registered without keys."""
    found: list[tuple[KeyPath, Any]] = []
    for path, leaf in pytree.tree_flatten_with_path(tree, is_leaf=_lacks_keys)[0]:
        if _lacks_keys(leaf):
            for key, child in _keyed_children(leaf):
                found.extend(leaves_with_path(child, (*prefix, *path, key)))
        else:
            found.append(((*prefix, *path), leaf))
    return found
