"""Shrinking rules about a config's stack of layers: per-layer lists and kinds (hybrid stacks keep a layer of
every kind), per-layer heads, Mamba-2 state-space heads, and backbone outputs picked among the layers.

Called from ``exporters.tiny.shrink``; each rule reads and writes one config in place.
"""

from __future__ import annotations

import math
from typing import Any

from exporters.tiny.sizes import (
    _HEAD_FIELDS,
    _LAYER_FIELDS,
    HEADS,
    KV_HEADS,
    LAYERS,
    MAX_LAYERS,
    _ints,
    _modeling_source,
    _width,
)

_KIND_PROPERTIES = ("layer_types", "layers_block_type")


def _derived_layer_kinds(config: Any) -> set[str]:
    """The kinds of layer a config derives from a pattern rather than lists (a ``layer_types`` property):
    Jamba's attention every ``attn_layer_period`` layers from ``attn_layer_offset``, RecurrentGemma's repeated
    ``block_types``. Stored lists are ``_truncate_per_layer_lists``' business."""
    for name in _KIND_PROPERTIES:
        if name in vars(config) or (getattr(type(config), "attribute_map", None) or {}).get(name) in vars(config):
            continue
        try:
            value = getattr(config, name, None)
        except Exception:  # per-layer configs refuse some global reads
            continue
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return set(value)
    return set()


def _deepen_to_every_layer_kind(config: Any, kinds: set[str]) -> bool:
    """Grow the layer count (up to ``MAX_LAYERS``) until the shrunk stack derives every kind of layer the full
    one has: two layers of Jamba are both Mamba (attention first comes at layer 4), and a stack without one
    attention layer has no cache layer that ``get_seq_length`` may ask. True when the count changed."""
    field = next((f for f in _LAYER_FIELDS if isinstance(vars(config).get(f), int)), None)
    if field is None or len(kinds) < 2:
        return False
    start = vars(config)[field]
    for layers in range(start, MAX_LAYERS + 1):
        setattr(config, field, layers)
        if kinds <= _derived_layer_kinds(config):
            return layers != start
    setattr(config, field, start)
    return False


def _per_layer_overrides(config: Any) -> dict[int, dict[str, Any]] | None:
    """Every layer's explicit per-layer attributes, for configs with a ``per_layer_config`` (heterogeneous)."""
    if vars(config).get("_heterogeneity_spec") is None:
        return None
    from transformers.integrations.heterogeneity.configuration_utils import _get_explicit_per_layer_overrides

    return _get_explicit_per_layer_overrides(config)


def _shrink_per_layer_heads(config: Any, old_heads: int | None) -> None:
    """Per-layer head counts (``*_heads_per_layer``) shrink as the scalar head fields do: a layer with the full-size
    head count gets the tiny one, a layer of fewer (grouped key-value) heads ``KV_HEADS``. Sapiens2 derives
    ``num_key_value_heads_per_layer`` [16 x 8, 8 x 8, 16 x 8] from 16 heads, and kept at 16 against 4 tiny query
    heads its attention failed (``The size of tensor a (4) must match the size of tensor b (16)``)."""
    fields = vars(config)
    heads = next((fields[f] for f in _HEAD_FIELDS if isinstance(fields.get(f), int)), None)
    if not old_heads or not heads:
        return
    for name, value in list(fields.items()):
        if name.endswith("heads_per_layer") and _ints(value):
            setattr(config, name, type(value)(heads if v >= old_heads else min(v, KV_HEADS, heads) for v in value))


def _truncate_per_layer_lists(config: Any, old_layers: int | None) -> None:
    """Lists with one item per layer (``layer_types``) follow the new layer count.

    Hybrid stacks (linear and full attention, sliding and global) keep the shortest prefix that still holds
    every kind of layer, so a tiny model has at least one layer of each kind.
    """
    if not old_layers or old_layers <= LAYERS:
        return
    lists = {n: v for n, v in vars(config).items() if isinstance(v, list) and len(v) == old_layers}
    layers = LAYERS
    for value in lists.values():
        try:
            kinds = list(dict.fromkeys(value))
        except TypeError:  # unhashable items
            continue
        if len(kinds) <= MAX_LAYERS:
            layers = max(layers, max(value.index(kind) for kind in kinds) + 1)
    layers = min(layers, MAX_LAYERS)
    for name in _LAYER_FIELDS:
        if isinstance(vars(config).get(name), int):
            setattr(config, name, layers)
    for name, value in lists.items():
        setattr(config, name, value[:layers])


# Per-layer kind lists, and the kind of their plain layers (a config's usual default for them).
_PLAIN_KINDS = {"layer_types": "full_attention", "mlp_layer_types": "dense"}


def _fill_layer_kinds(config: Any) -> None:
    """A per-layer kinds list that the config leaves ``None`` (its checkpoint sets it) but its model indexes per
    layer (Lfm2-MoE's ``layer_types[layer_idx] != "conv"``, DeepSeek-OCR 2's ``mlp_layer_types[layer_idx] ==
    "sparse"``: ``'NoneType' object is not subscriptable``) gets one plain layer and then the kinds the modeling
    module compares it with, so the tiny stack holds each kind its forward tells apart."""
    import re

    fields = vars(config)
    layers = next((fields[f] for f in _LAYER_FIELDS if isinstance(fields.get(f), int)), None)
    for name, plain in _PLAIN_KINDS.items():
        if name not in fields or fields[name] is not None or not layers:
            continue
        compared = re.findall(rf'\.{name}\[[^\]]+\]\s*[!=]=\s*"(\w+)"', _modeling_source(config))
        kinds = [plain, *(k for k in dict.fromkeys(compared) if k != plain)]
        if len(kinds) < 2:
            continue
        if layers < len(kinds):
            for field in _LAYER_FIELDS:
                if isinstance(fields.get(field), int):
                    setattr(config, field, len(kinds))
            layers = len(kinds)
        setattr(config, name, [kinds[min(i, len(kinds) - 1)] for i in range(layers)])


def _hold_an_attention_layer(config: Any) -> None:
    """A hybrid stack whose default holds only linear-attention (Mamba) layers gets its last layer as full
    attention, as its checkpoints have (Bamba-9B's ``attn_layer_indices`` [9, 18, 27], Granite 4.0-H's mixed
    ``layer_types``): its forward builds a causal mask from a cache without one attention layer and raises
    ``get_seq_length can only be called on Attention layers``. Only stacks whose modeling module builds
    ``"full_attention"`` layers: pure Mamba models (Mamba-2, FalconMamba) stay as they are. The last layer is
    set in a stored kinds list, or named in the attention-index field a derived kinds list reads."""
    fields = vars(config)
    layers = next((fields[f] for f in _LAYER_FIELDS if isinstance(fields.get(f), int)), None)
    stored = fields.get("layer_types")
    kinds = stored if isinstance(stored, list) else _derived_kinds_list(config)
    if not layers or not kinds or set(kinds) != {"linear_attention"} or not _builds_full_attention(config):
        return
    if isinstance(stored, list) and len(stored) == layers:
        config.layer_types = [*stored[:-1], "full_attention"]
        return
    for name, value in fields.items():
        if ("attn" in name or "attention" in name) and name.endswith(("indices", "idxs")) and value in (None, []):
            setattr(config, name, [layers - 1])
            return


def _derived_kinds_list(config: Any) -> list[str] | None:
    for name in _KIND_PROPERTIES:
        try:
            value = getattr(config, name, None)
        except Exception:  # per-layer configs refuse some global reads
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return None


def _builds_full_attention(config: Any) -> bool:
    return '"full_attention"' in _modeling_source(config)


# Mamba-2 state-space blocks, by config family: (heads, head dim, expand, B/C groups) field names.
_SSM_HEADS = (
    ("num_heads", "head_dim", "expand", "n_groups"),  # Mamba-2
    ("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups"),  # Bamba, GraniteMoeHybrid, Falcon-H1
    ("mamba_num_heads", "mamba_head_dim", "expand", "n_groups"),  # NemotronH
    ("n_mamba_heads", "mamba_headdim", "mamba_expand", "mamba_ngroups"),  # Zamba2
)


_SSM_STATE_FIELDS = ("state_size", "ssm_state_size", "mamba_d_state")


SSM_STATE = 16


def _fit_ssm_heads(config: Any) -> None:
    """Mamba-2 splits its ``expand * hidden_size`` inner channels into heads of a head dim: after shrinking, the
    heads are ``HEADS`` and the head dim follows (the full-size product of 128 heads of 64 is the inner width of
    4,096 x 2), the B/C groups still divide the heads, and the SSM state is tiny too.

    Why: the chunked scan (no CUDA kernels here) materialises ``[batch, chunk, chunk, heads, state]`` score
    tensors over a sequence padded to the chunk size. Left at Falcon-H1's 128 heads and 256-wide state, one eager
    forward of the "tiny" model took 6.4 s and 500 MB (0.6 s and 15 MB shrunk), and its generation export ran out
    of memory under the sweep's 4 GiB cap. The chunk (256) stays longer than every prompt a generation export
    takes (``max_cache_len`` 64), so every prompt is padded, as in the full-size model: at an 8-token chunk the
    8-token sample took the no-padding path and the exported prefill broke at the 6-token second shape (Zamba2:
    ``cannot be reshaped ... Input shape:{3,8,4,16}, requested shape:{3,6,-1}``)."""
    fields = vars(config)
    width = _width(config)
    for heads_field, head_dim_field, expand_field, groups_field in _SSM_HEADS:
        expand = fields.get(expand_field)
        if not (isinstance(expand, int) and isinstance(fields.get(heads_field), int)
                and isinstance(fields.get(head_dim_field), int)):
            continue
        heads = min(fields[heads_field], HEADS)
        setattr(config, heads_field, heads)
        setattr(config, head_dim_field, expand * width // heads)
        if isinstance(fields.get("mamba_d_ssm"), int):  # Falcon-H1's explicit inner width: heads x head dim
            config.mamba_d_ssm = expand * width
        if isinstance(fields.get(groups_field), int) and heads % fields[groups_field]:
            setattr(config, groups_field, math.gcd(heads, fields[groups_field]))
        for name in _SSM_STATE_FIELDS:
            if isinstance(fields.get(name), int) and fields[name] > SSM_STATE:
                setattr(config, name, SSM_STATE)
        return


def _shrink_out_indices(config: Any, old_layers: int | None) -> None:
    """Backbone outputs chosen among the full-size layers (``out_indices`` 9..12 of 12, DPT's
    ``backbone_out_indices``) are picked again among the tiny ones, as many as before (a DPT neck takes one
    feature map per neck stage), spread the same way; the layer count grows to that many if it must."""
    fields = vars(config)
    layers = next((fields[f] for f in _LAYER_FIELDS if isinstance(fields.get(f), int)), None)
    if not old_layers or not layers or old_layers <= layers or isinstance(fields.get("depths"), (list, tuple)):
        return  # (hierarchical backbones number their stages by ``depths``, not by layers)
    for name, first in (("_out_indices", 1), ("backbone_out_indices", 0)):  # stage numbers / layer indices
        indices = fields.get(name)
        if not _ints(indices) or max(indices) < layers + first:
            continue
        if len(indices) > layers:
            layers = len(indices)
            for field in _LAYER_FIELDS:
                if isinstance(fields.get(field), int):
                    setattr(config, field, layers)
        picked = sorted({max(first, min(layers - 1 + first, round(i * layers / old_layers))) for i in indices})
        if len(picked) < len(indices):  # rounding merged some: the last ones, as deep layers are the usual pick
            picked = list(range(layers - len(indices) + first, layers + first))
        setattr(config, name, type(indices)(picked))
        if name == "_out_indices":
            config.stage_names = ["stem", *(f"stage{i}" for i in range(1, layers + 1))]
            config._out_features = [config.stage_names[i] for i in picked]
