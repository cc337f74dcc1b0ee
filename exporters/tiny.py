"""Tiny, random, deterministic transformers models built by class name, with sample inputs.

No hub access: the model's config class is instantiated with its defaults and shrunk field by field
(and recursively in nested sub-configs), then the model is random-initialised under a fixed seed.
Special cases are data (the tables below), not code paths.

Outputs must be able to expose a wrong export: initialisers that make activations vanish (layer-scale
factors of 1e-6, for example) are raised so that outputs are of order one. Validation still reports
any degenerate output as inconclusive.
"""

from __future__ import annotations

import inspect
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

import torch

BATCH = 2
SEQUENCE = 8
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
LAYERS = 2
INTERMEDIATE = 64
VOCAB = 256
IMAGE = 32
PATCH = 8
AUDIO_SAMPLES = 1600
CHOICES = 2  # multiple-choice heads: candidate answers per example

# ── Config shrinking rules: field name → new value (callables receive the old value) ──
HEAD_DIM = HIDDEN // HEADS
EXPERTS = 4
_HIDDEN_FIELDS = (
    "hidden_size", "d_model", "n_embd", "dim", "word_embed_proj_dim", "projection_dim", "projection_size",
    "proj_dim", "vision_embed_dim", "text_embed_dim", "d_latents",
)
_HEAD_FIELDS = (
    "num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
    "index_n_heads", "num_self_attention_heads", "num_cross_attention_heads",
)
_LAYER_FIELDS = (
    "num_hidden_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "num_layers",
    "num_decoder_layers", "num_self_attends_per_block",
)
_INTERMEDIATE_FIELDS = (
    "intermediate_size", "hidden_dim", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
    "moe_intermediate_size", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
)
_LIST_WIDTH_FIELDS = ("hidden_sizes", "conv_dim", "embed_dims", "neck_hidden_sizes")
_LIST_DEPTH_FIELDS = ("depths",)
_ONE_FIELDS = ("layer_scale_init_value", "layerscale_value")  # keep outputs of order one
# Mixture of experts: few experts, few per token, one group.
_EXPERT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
_TOPK_FIELDS = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token", "moe_k")
# Low-rank projections (multi-head latent attention).
_RANK_FIELDS = {"kv_lora_rank": 2 * HEAD_DIM, "q_lora_rank": 4 * HEAD_DIM}
# Sizes some configs leave ``None`` although their model needs them (and does not derive them).
_NONE_FILL = {
    "head_dim": HEAD_DIM, "vocab_size": VOCAB, "n_routed_experts": EXPERTS, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "pad_token_id": 1,
    # Left for the checkpoint to set although every layer builds with them (DiffusionGemma's router, Hiera's decoder).
    "num_experts": EXPERTS, "top_k_experts": 2, "moe_intermediate_size": INTERMEDIATE, "decoder_hidden_size": HIDDEN,
    "decoder_depth": 1, "decoder_num_heads": HEADS,
    "prediction_length": 4,  # time-series forecasters (the context length defaults to it)
}
_FIXED: dict[str, Any] = {
    "max_position_embeddings": lambda old: min(old, 128) if isinstance(old, int) else old,
    "max_source_positions": lambda old: min(old, 16) if isinstance(old, int) else old,
    "max_target_positions": lambda old: min(old, 64) if isinstance(old, int) else old,
    "vocab_size": lambda old: min(old, VOCAB) if isinstance(old, int) else old,
    "num_labels": lambda old: 3,
    "num_mel_bins": lambda old: 16 if isinstance(old, int) else old,
    "initializer_range": lambda old: 0.1 if isinstance(old, float) else old,
    "n_group": lambda old: 1 if isinstance(old, int) else old,
    "topk_group": lambda old: 1 if isinstance(old, int) else old,
    "n_shared_experts": lambda old: min(old, 1) if isinstance(old, int) else old,
    "num_latents": lambda old: min(old, 16) if isinstance(old, int) else old,  # Perceiver latent array
    # Detection queries pick the top-k of the encoder's anchors, of which a 32-pixel image has a few dozen.
    "num_queries": lambda old: min(old, 10) if isinstance(old, int) else old,
    "context_length": lambda old: min(old, 32) if isinstance(old, int) else old,  # time series (TimesFm: 16,384)
}
MAX_LAYERS = 8  # hybrid stacks keep the shortest prefix holding every layer kind, up to this many layers

class TinyModelError(ValueError):
    """The class cannot be built as a tiny model (unknown name, or inputs it needs that we cannot make)."""


def model_class(name: str) -> type:
    import transformers

    cls = getattr(transformers, name, None)
    if cls is None or not inspect.isclass(cls) or not hasattr(cls, "config_class"):
        raise TinyModelError(f"{name!r} is not a transformers model class")
    return cls


def _sub_configs(config: Any) -> list[Any]:
    from transformers import PretrainedConfig

    found = []
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            found.append(value)
    return found


def shrink_config(config: Any, keep_stage_widths: bool = False) -> Any:
    """Shrink the generic size fields of ``config`` and of every nested sub-config, consistently.

    The fields are first shrunk in place; the config is then rebuilt from its constructor so that the
    values its ``__post_init__`` derives from them (head dims, per-layer type lists, projection sizes)
    follow the new sizes instead of keeping the full-size ones. ``keep_stage_widths`` leaves per-stage width
    lists (``hidden_sizes``, ...) at their defaults, for models whose other channel fields must match them.
    """
    import copy

    for name, sub in _sub_configs(config):
        old_sizes = (vars(sub).get("patch_size"), _width(sub))
        setattr(config, name, shrink_config(sub, keep_stage_widths))
        _follow_sub_config(config, old_sizes, getattr(config, name))
    before = {k: v for k, v in vars(config).items() if not isinstance(v, torch.nn.Module)}
    before = copy.deepcopy({k: v for k, v in before.items() if k not in dict(_sub_configs(config))})
    per_layer = _per_layer_overrides(config)
    _shrink_fields(config, keep_stage_widths)
    if per_layer is not None:  # heterogeneous configs: every layer's overrides are shrunk by the same rules
        layers = next((vars(config)[f] for f in _LAYER_FIELDS if isinstance(vars(config).get(f), int)), 0)
        per_layer = {i: _shrunk_overrides(o) for i, o in per_layer.items() if i < layers}
    return _fill_missing(_rebuild(config, before, per_layer))


def _follow_sub_config(config: Any, old_sizes: tuple[Any, int], sub: Any) -> None:
    """A parent's copies of its sub-config's sizes follow the shrunk sub-config: the ``patch_size`` it reshapes
    the backbone's tokens by, the ``*_hidden_size`` channels it reads from it (DepthAnything's
    ``reassemble_hidden_size``), when they equal the sub-config's full-size values."""
    old_patch, old_width = old_sizes
    fields = vars(config)
    if fields.get("patch_size") == old_patch != vars(sub).get("patch_size"):
        config.patch_size = vars(sub)["patch_size"]
    for name in list(fields):
        if name.endswith("hidden_size") and name not in _HIDDEN_FIELDS and fields[name] == old_width != _width(sub):
            setattr(config, name, _width(sub))


def _fill_missing(config: Any) -> Any:
    """Fields some configs lack although their model reads them (MoonshineStreaming's decoder attention reads
    ``num_key_value_heads``): set after the rebuild, which keeps declared fields only."""
    fields = vars(config)
    if "num_key_value_heads" not in fields and isinstance(fields.get("num_attention_heads"), int):
        config.num_key_value_heads = fields["num_attention_heads"]  # one key per head: plain multi-head attention
    return config


def _per_layer_overrides(config: Any) -> dict[int, dict[str, Any]] | None:
    """Every layer's explicit per-layer attributes, for configs with a ``per_layer_config`` (heterogeneous)."""
    if vars(config).get("_heterogeneity_spec") is None:
        return None
    from transformers.integrations.heterogeneity.configuration_utils import _get_explicit_per_layer_overrides

    return _get_explicit_per_layer_overrides(config)


def _shrunk_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    from types import SimpleNamespace

    layer = SimpleNamespace(**overrides)
    _shrink_fields(layer)
    return vars(layer)


def _ints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, int) for v in value)


def _shrink_fields(config: Any, keep_stage_widths: bool = False) -> None:
    fields = vars(config)
    old_layers = next((fields[f] for f in _LAYER_FIELDS if isinstance(fields.get(f), int)), None)
    old_hidden = next((fields[f] for f in _HIDDEN_FIELDS if isinstance(fields.get(f), int)), None)
    multi_head_latent = isinstance(fields.get("kv_lora_rank"), int)
    mla_parts = [fields.get(f) for f in ("qk_nope_head_dim", "qk_rope_head_dim")]
    mla_sums = {n for n in ("qk_head_dim", "head_dim") if _ints(mla_parts) and fields.get(n) == sum(mla_parts)}
    for name, value in _NONE_FILL.items():
        if name in fields and fields[name] is None:
            setattr(config, name, value)
    for name in _HIDDEN_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HIDDEN:
            setattr(config, name, HIDDEN)
    width = next((fields[f] for f in _HIDDEN_FIELDS if isinstance(fields.get(f), int)), None)
    if old_hidden and width and fields.get("embedding_size") == old_hidden:  # tied to the width (SqueezeBert)
        config.embedding_size = width
    elif width and isinstance(fields.get("embedding_size"), int) and fields["embedding_size"] > width:
        config.embedding_size = width // 2  # a narrower embedding projected up (MobileBert: hidden - embedding)
    axial = fields.get("axial_pos_embds_dim")
    if _ints(axial) and old_hidden and sum(axial) == old_hidden and width:  # Reformer: the parts sum to the width
        config.axial_pos_embds_dim = type(axial)([width // 2, width - width // 2])
    per_stage_heads = any(_ints(fields.get(f)) for f in _HEAD_FIELDS)
    if isinstance(fields.get("embed_dim"), int):
        if per_stage_heads:  # hierarchical (Swin-like): stage widths embed_dim * 2**i must divide by heads
            heads = max(max(fields[f]) for f in _HEAD_FIELDS if _ints(fields.get(f)))
            config.embed_dim = -(-max(fields["embed_dim"] // 8, heads) // heads) * heads  # a multiple (Swin2SR: 6)
        elif fields["embed_dim"] > HIDDEN:
            config.embed_dim = HIDDEN
    for name in _HEAD_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HEADS:
            setattr(config, name, HEADS)
    if isinstance(fields.get("num_key_value_heads"), int):
        heads = next((fields[f] for f in _HEAD_FIELDS if isinstance(fields.get(f), int)), HEADS)
        # Multi-head latent attention expands its latents to one key per query head: no grouping there.
        config.num_key_value_heads = heads if multi_head_latent else min(KV_HEADS, heads)
    elif "num_key_value_heads" in fields and fields["num_key_value_heads"] is None:  # None: one per query head
        config.num_key_value_heads = next((fields[f] for f in _HEAD_FIELDS if isinstance(fields.get(f), int)), HEADS)
    if isinstance(fields.get("coordinate_size"), int) and isinstance(fields.get("shape_size"), int):
        config.coordinate_size, config.shape_size = HIDDEN // 8, HIDDEN // 4  # 4 * coordinate + 2 * shape = hidden
    if isinstance(fields.get("d_kv"), int):
        config.d_kv = HEAD_DIM
    for name in list(fields):  # head_dim, qk_rope_head_dim, v_head_dim, index_head_dim, ...
        if name.endswith("head_dim") and isinstance(fields[name], int) and fields[name] > HEAD_DIM:
            setattr(config, name, HEAD_DIM)
    for name in ("qk_head_dim", "head_dim"):  # MLA: a query/key head made of its nope and rope parts stays so
        if name in mla_sums:
            setattr(config, name, fields["qk_nope_head_dim"] + fields["qk_rope_head_dim"])
    if isinstance(fields.get("rotary_dim"), int):
        config.rotary_dim = min(fields["rotary_dim"], HEAD_DIM)
    for name, rank in _RANK_FIELDS.items():
        if isinstance(fields.get(name), int) and fields[name] > rank:
            setattr(config, name, rank)
    routed = any(isinstance(fields.get(f), int) for f in _TOPK_FIELDS)
    for name in _EXPERT_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > EXPERTS:
            setattr(config, name, EXPERTS)
        elif routed and fields.get(name) == 1:  # a one-expert default (HunYuan MoE V1) never routes: use two
            setattr(config, name, 2)
    for name in _TOPK_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > 2:
            setattr(config, name, 2)
    for name in _LAYER_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > LAYERS:
            setattr(config, name, LAYERS)
    for name in _INTERMEDIATE_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > INTERMEDIATE:
            setattr(config, name, INTERMEDIATE)
        elif _ints(fields.get(name)):  # one width per modality (Ernie 4.5 VL: text and vision experts)
            setattr(config, name, type(fields[name])(min(v, INTERMEDIATE) for v in fields[name]))
    for name in list(fields):  # depthwise convolutions (``upsample_groups``: one group per hidden channel)
        if name.endswith("groups") and isinstance(fields[name], int) and old_hidden and fields[name] == old_hidden:
            setattr(config, name, getattr(config, next(f for f in _HIDDEN_FIELDS if isinstance(fields.get(f), int))))
    stage_heads = next((fields[f] for f in _HEAD_FIELDS if _ints(fields.get(f))), None)
    for name in () if keep_stage_widths else _LIST_WIDTH_FIELDS:  # per-stage widths: multiples of 8 (heads, groups)
        if _ints(fields.get(name)):
            old_first = fields[name][0]
            widths = [max(8, -(-v // 64) * 8) for v in fields[name]]
            if stage_heads is not None and len(stage_heads) == len(widths):  # and of each stage's heads (GLPN: 5)
                widths = [-(-w // math.lcm(8, h)) * math.lcm(8, h) for w, h in zip(widths, stage_heads, strict=True)]
            setattr(config, name, widths)  # a list: models prepend to it (ConvNext's backbone), tuples refuse
            if fields.get("stem_out_channels") == old_first:  # the stem feeds the first stage (TextNet)
                config.stem_out_channels = fields[name][0]
    shrink = fields.get("channel_shrink_ratio")
    if isinstance(shrink, int) and width:  # LiLT: six box embeddings of hidden // 6 and a layout stream of
        step = math.lcm(6, shrink * fields.get("num_attention_heads", HEADS))  # hidden // ratio, split in heads
        for name in _HIDDEN_FIELDS:
            if isinstance(fields.get(name), int):
                setattr(config, name, -(-fields[name] // step) * step)
    if isinstance(fields.get("dim_bbox"), int):  # Bros: hidden // 4 // dim_bbox sinusoid dims, at least 2
        for name in _HIDDEN_FIELDS:
            if isinstance(fields.get(name), int):
                setattr(config, name, max(fields[name], 8 * fields["dim_bbox"]))
    for name in _LIST_DEPTH_FIELDS:
        if isinstance(fields.get(name), (list, tuple)):
            setattr(config, name, type(fields[name])(1 for _ in fields[name]))
    for name in _ONE_FIELDS:
        if isinstance(fields.get(name), float):
            setattr(config, name, 1.0)
    old_positions = fields.get("max_position_embeddings")
    for name, rule in _FIXED.items():
        if name in fields:
            setattr(config, name, rule(fields[name]))
    shape = fields.get("axial_pos_shape")
    if _ints(shape) and len(shape) == 2 and math.prod(shape) == old_positions != fields["max_position_embeddings"]:
        side = 2 ** (int(math.log2(fields["max_position_embeddings"])) // 2)  # Reformer: the factors multiply to it
        config.axial_pos_shape = type(shape)([side, fields["max_position_embeddings"] // side])
    _truncate_per_layer_lists(config, old_layers)
    _shrink_out_indices(config, old_layers)
    _fit_ssm_heads(config)
    _shrink_rope_sections(config)
    _shrink_images(config)
    _clamp_token_ids(config)


def _sub_configs(config: Any) -> list[tuple[str, Any]]:
    from transformers import PretrainedConfig

    return [(name, value) for name, value in vars(config).items() if isinstance(value, PretrainedConfig)]


# Kept through the rebuild when a parent model chose the backbone's stages (a default instance derives them).
_KEPT = ("_out_features", "_out_indices")


def _rebuild(config: Any, before: dict[str, Any], per_layer: dict[int, dict[str, Any]] | None = None) -> Any:
    """``type(config)(**fields)``: re-run ``__post_init__`` on the shrunk primary fields.

    Fields that ``__post_init__`` derives (their value in a default instance differs from the field's
    declared default) and that shrinking left alone are left out so that they are derived again. Falls back to the in-place config when
    the constructor rejects the combination.
    """
    import dataclasses

    cls = type(config)
    if not dataclasses.is_dataclass(cls):
        return config
    try:
        fresh = vars(cls())
    except Exception:  # a config without usable defaults: keep the in-place one
        return config
    subs = dict(_sub_configs(config))
    kwargs = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.name not in vars(config):
            continue
        if field.default is not dataclasses.MISSING:
            declared = field.default
        elif field.default_factory is not dataclasses.MISSING:
            declared = field.default_factory()
        else:
            declared = dataclasses.MISSING
        derived = declared is not dataclasses.MISSING and _differs(fresh.get(field.name, declared), declared)
        value = vars(config)[field.name]  # not getattr: per-layer attributes refuse global reads
        if field.name in _KEPT:  # chosen by a parent (not a default's); the constructor takes them without "_"
            if _differs(fresh.get(field.name), value):
                kwargs[field.name.lstrip("_")] = value
        elif not derived or field.name in subs or (field.name in before and _differs(before[field.name], value)):
            kwargs[field.name] = value
    if per_layer is not None:
        kwargs["per_layer_config"] = per_layer
    try:
        rebuilt = cls(**kwargs)
    except Exception:
        return config
    for name, sub in subs.items():  # sub-configs stay as shrunk, whatever the parent's post-init made of them
        if getattr(rebuilt, name, None) is not sub and name not in kwargs:
            setattr(rebuilt, name, sub)
    return rebuilt


def _differs(first: Any, second: Any) -> bool:
    try:
        return bool(first != second)
    except Exception:  # tensors, odd objects
        return True


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


def _fit_ssm_heads(config: Any) -> None:
    """Mamba-2 splits its ``expand * hidden_size`` inner channels into ``num_heads`` heads of ``head_dim``: after
    shrinking, the head dim follows (the full-size product of 128 heads of 64 is the inner width of 4,096 x 2),
    and the B/C groups ``n_groups`` must still divide the heads."""
    fields = vars(config)
    expand, heads, width = fields.get("expand"), fields.get("num_heads"), _width(config)
    if not (isinstance(expand, int) and isinstance(heads, int) and isinstance(fields.get("head_dim"), int)):
        return
    config.head_dim = expand * width // heads
    if isinstance(fields.get("n_groups"), int) and heads % fields["n_groups"]:
        config.n_groups = math.gcd(heads, fields["n_groups"])


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


_MROPE_DEFAULT = [16, 24, 24]  # the (t, h, w) split most multimodal-RoPE models fall back to


def _shrink_rope_sections(config: Any) -> None:
    """Multimodal RoPE sections (``mrope_section``) must add up to half the (shrunk) rotary dimension.

    Configs that declare ``mrope_section`` (``ignore_keys_at_rope_validation``) but leave it out of their
    defaults get one: their models fall back to a full-size split hard-coded in the modeling code.
    """
    uses_mrope = "mrope_section" in (getattr(type(config), "ignore_keys_at_rope_validation", None) or ())
    for value in vars(config).values():
        if not isinstance(value, dict):
            continue
        if uses_mrope and "rope_theta" in value and value.get("mrope_section") is None:
            value["mrope_section"] = list(_MROPE_DEFAULT)
        if not _ints(value.get("mrope_section")):
            continue
        sections = value["mrope_section"]
        head_dim = vars(config).get("head_dim") or HEAD_DIM
        rotary = int(head_dim * value.get("partial_rotary_factor", vars(config).get("partial_rotary_factor", 1.0)))
        if rotary // 2 < len(sections) and "partial_rotary_factor" in value:  # too few rotary dims for one per section
            value["partial_rotary_factor"] = rotary_factor = 2 * len(sections) / head_dim
            rotary = int(head_dim * rotary_factor)
        half = max(rotary // 2, len(sections))
        scaled = [max(1, v * half // sum(sections)) for v in sections]
        # The remainder goes to the last section so that equal sections stay equal (Ernie pairs h with w).
        scaled[-1] += half - sum(scaled)
        value["mrope_section"] = type(sections)(scaled)


def _shrink_images(config: Any) -> None:
    fields = vars(config)
    image = fields.get("image_size")
    if isinstance(image, int) and image > IMAGE:
        config.image_size = IMAGE
        if isinstance(fields.get("patch_size"), int) and fields["patch_size"] > PATCH:
            config.patch_size = PATCH
    elif isinstance(image, (list, tuple)) and len(image) == 2 and image[0] > IMAGE:
        config.image_size = type(image)([IMAGE, IMAGE])
        if isinstance(fields.get("patch_size"), int) and fields["patch_size"] > PATCH:
            config.patch_size = PATCH
    stride, patch = fields.get("output_stride"), fields.get("patch_size")
    if isinstance(stride, int) and isinstance(patch, int) and isinstance(fields.get("image_size"), int):
        # MobileViT: the last stage (image / output_stride) must still hold one patch
        config.image_size = max(config.image_size, stride * patch)
    window, depths, patch = fields.get("window_size"), fields.get("depths"), fields.get("patch_size")
    if isinstance(window, int) and isinstance(depths, (list, tuple)) and isinstance(patch, int) and "image_size" in fields:
        # Windowed hierarchical encoders (Swin-like): every stage's resolution must be a multiple of the window,
        # the last one equal to it, as at full size (224 / 4 / 2**3 = 7).
        config.window_size = min(window, 2)
        side = patch * config.window_size * 2 ** (len(depths) - 1)
        config.image_size = side if isinstance(fields["image_size"], int) else type(fields["image_size"])([side, side])


def _clamp_token_ids(config: Any) -> None:
    """Special token ids must stay inside the shrunk vocabulary (and stay distinct)."""
    vocab = vars(config).get("vocab_size")
    if not isinstance(vocab, int):
        return
    for offset, name in enumerate(sorted(n for n in vars(config) if n.endswith("token_id"))):
        value = getattr(config, name)
        if isinstance(value, int) and value >= vocab:
            setattr(config, name, vocab - 1 - offset)


@dataclass
class TinyModel:
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]


def build_tiny(
    name: str, seed: int = 0, batch: int = BATCH, sequence: int = SEQUENCE, config: Any = None,
    image_size: int | None = None, overrides: dict[str, Any] | None = None,
) -> TinyModel:
    """Build class ``name`` tiny and random, with sample inputs derived from its forward signature.

    ``config`` (already small) replaces the shrunk default config: a ledger reproducer's overrides.
    ``image_size`` sets the (vision) config's ``image_size``, so position tables and samples follow it. Otherwise,
    models with per-stage width lists (CNN and detection backbones) are shrunk fully first and, if that model
    cannot be built or run on its inputs, again with the stage widths at their defaults: their other channel
    fields (``stage_out_channels``, a detector's ``encoder_in_channels``) must match those widths, and no rule
    can know each family's. Other models are built once.
    ``overrides`` set config fields after shrinking (a generation check sets a short ``sliding_window`` so
    that the window is exercised within a few tokens); fields the config does not have are ignored.
    """
    cls = model_class(name)
    if config is not None:
        return _build(cls, config, seed, batch, sequence, image_size, overrides)
    staged = _has_stage_widths(cls.config_class())
    try:
        tiny = _build(cls, shrink_config(cls.config_class()), seed, batch, sequence, image_size, overrides)
        if staged:
            _run_once(tiny)
        return tiny
    except Exception:
        if not staged:
            raise
        first = sys.exc_info()
    try:
        wide = shrink_config(cls.config_class(), keep_stage_widths=True)
        return _build(cls, wide, seed, batch, sequence, image_size, overrides)
    except Exception:
        raise first[1].with_traceback(first[2]) from None  # the fully shrunk model's error is the one to fix


def _build(
    cls: type, config: Any, seed: int, batch: int, sequence: int, image_size: int | None,
    overrides: dict[str, Any] | None = None,
) -> TinyModel:
    if image_size is not None and hasattr(_vision(config), "image_size"):
        _vision(config).image_size = image_size
    for field_name, value in (overrides or {}).items():
        for target in (config, getattr(config, "text_config", None)):
            if target is not None and getattr(target, field_name, None) is not None:
                setattr(target, field_name, value)
    torch.manual_seed(seed)
    model = cls(config).eval()
    _break_router_ties(model, seed)
    languages = getattr(config, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD routes through one adapter per language
        model.set_default_language(languages[0])
    return _grown_to_fit(TinyModel(model, sample_inputs(model, batch=batch, sequence=sequence, seed=seed)), seed)


# Errors of a convolution or pooling stack whose downsampling leaves nothing of a too-small image or clip.
_TOO_SMALL = ("Output size is too small", "Kernel size can't be greater than actual input size")
_GROWTH = (2, 4, 8)  # longer audio, larger images: up to 8x the default sample along time or height and width


def _grown_to_fit(tiny: TinyModel, seed: int) -> TinyModel:
    """The sample with its signal (``pixel_values`` images, ``input_values`` audio) grown until one forward runs,
    for models that downsample it more than the default size allows: text recognisers pool a line image
    16-32x, x-vector heads run dilated kernels over the frames of a 1,600-sample clip. Other models, and
    models that fail for another reason, keep the sample as it is (their error shows at their forward)."""
    grown = {n: v for n, v in tiny.inputs.items() if n in ("pixel_values", "input_values") and v.is_floating_point()}
    if not grown or not _too_small(tiny):
        return tiny
    generator = torch.Generator().manual_seed(seed)
    for factor in _GROWTH:
        inputs = dict(tiny.inputs)
        for name, value in grown.items():
            spatial = 2 if name == "pixel_values" and value.dim() == 4 else 1
            shape = (*value.shape[:-spatial], *(size * factor for size in value.shape[-spatial:]))
            inputs[name] = torch.randn(shape, generator=generator, dtype=value.dtype)
        trial = TinyModel(tiny.model, inputs)
        if not _too_small(trial):
            return trial
    return tiny


def _too_small(tiny: TinyModel) -> bool:
    try:
        _run_once(tiny)
    except Exception as error:  # only a too-small error is this rule's business
        return any(text in str(error) for text in _TOO_SMALL)
    return False


def _has_stage_widths(config: Any) -> bool:
    return any(_ints(vars(config).get(f)) for f in _LIST_WIDTH_FIELDS) or any(
        _has_stage_widths(sub) for _, sub in _sub_configs(config)
    )


def _run_once(tiny: TinyModel) -> None:
    with torch.no_grad():
        tiny.model(**tiny.inputs)


def _break_router_ties(model: torch.nn.Module, seed: int) -> None:
    """Randomise MoE router weights that the model initialises to zero (Afmoe's ``router.gate``).

    With every router score equal, top-k picks experts by tie-breaking, which differs between eager and a
    runtime (ONNX Runtime's TopK takes the lowest indices): the comparison would test tie-breaking, not
    the export. Trained routers have no such ties.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "router" in name and parameter.dim() == 2 and not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


# ── Sample inputs ──
def _vocab(config: Any) -> int:
    for candidate in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        if candidate is not None and isinstance(getattr(candidate, "vocab_size", None), int):
            return candidate.vocab_size
    return VOCAB


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def _image_size(config: Any) -> tuple[int, int]:
    size = getattr(_vision(config), "image_size", IMAGE)
    if isinstance(size, dict):
        size = size.get("height", IMAGE), size.get("width", IMAGE)
    if isinstance(size, int):
        return size, size
    return int(size[0]), int(size[-1])


def _input_features(
    config: Any, batch: int, generator: torch.Generator, model: torch.nn.Module | None = None
) -> torch.Tensor:
    bins = getattr(config, "num_mel_bins", None)
    if hasattr(config, "max_source_positions") and isinstance(bins, int):  # Whisper-like
        return torch.randn(batch, bins, 2 * config.max_source_positions, generator=generator)
    first_conv = next((m for m in model.modules() if isinstance(m, torch.nn.Conv1d)), None) if model else None
    if isinstance(bins, int) and first_conv is not None and first_conv.in_channels == bins:
        return torch.randn(batch, bins, 32, generator=generator)  # a convolutional front end: channels first
    if isinstance(getattr(config, "feature_projection_input_dim", None), int):  # Wav2Vec2-BERT: stacked filter banks
        return torch.randn(batch, 32, config.feature_projection_input_dim, generator=generator)
    if isinstance(bins, int) and isinstance(getattr(config, "num_stacked_frames", None), int):  # low frame rate stacks
        return torch.randn(batch, 32, bins * config.num_stacked_frames, generator=generator)
    width = getattr(config, "input_feat_per_channel", 16) * getattr(config, "input_channels", 1)
    return torch.randn(batch, 32, width, generator=generator)


def _make(
    name: str, config: Any, batch: int, sequence: int, generator: torch.Generator, side: str = "right"
) -> torch.Tensor | None:
    vocab = _vocab(config)
    if name.endswith("input_ids"):  # input_ids, decoder_input_ids, qformer_input_ids
        return torch.randint(3, vocab, (batch, sequence), generator=generator)
    if name in ("attention_mask", "decoder_attention_mask"):
        return padded_mask(batch, sequence, side)
    if name == "token_type_ids":
        types = getattr(config, "type_vocab_sizes", None)  # table models: one type id per column kind
        shape = (batch, sequence, len(types)) if isinstance(types, (list, tuple)) else (batch, sequence)
        return torch.zeros(*shape, dtype=torch.long)
    if name in ("pixel_values", "pixel_values_videos"):
        height, width = _image_size(config)
        channels = getattr(_vision(config), "num_channels", 3)
        frames = _video_frames(config) if name == "pixel_values" else _video_frames(config) or 2
        return torch.randn(batch, *((frames,) if frames else ()), channels, height, width, generator=generator)
    if name == "input_values":
        frames, bins = getattr(config, "max_length", None), getattr(config, "num_mel_bins", None)
        if isinstance(frames, int) and isinstance(bins, int):  # spectrogram transformers (AST)
            return torch.randn(batch, frames, bins, generator=generator)
        codec = _codec(config)
        if codec is not None:  # waveform codecs: (batch, channels, samples), whole hops of samples
            channels, hop = codec
            return torch.randn(batch, channels, -(-AUDIO_SAMPLES // hop) * hop, generator=generator)
        return torch.randn(batch, AUDIO_SAMPLES, generator=generator)
    if name == "input_features":
        return _input_features(config, batch, generator)
    if name == "bbox":
        corners = torch.randint(0, 500, (batch, sequence, 2), generator=generator)
        return torch.cat([corners, corners + 100], dim=-1)
    return None


def _video_frames(config: Any) -> int | None:
    """Frames per clip of a video model (its ``pixel_values`` are ``(batch, frames, channels, height, width)``):
    a family of the video-classification mapping, or a model whose vision sub-config counts frames (X-CLIP);
    2 for keypoint matchers (an image pair).
    None for image models (Perceiver counts frames for its multimodal preprocessor, on the config itself)."""
    from transformers.models.auto import modeling_auto

    if getattr(config, "model_type", None) in modeling_auto.MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES:
        return 2  # keypoint matchers take the two images of a pair
    vision = _vision(config)
    frames = next((vars(vision)[f] for f in ("num_frames", "frames_per_clip") if isinstance(vars(vision).get(f), int)), None)
    video_family = getattr(config, "model_type", None) in modeling_auto.MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES
    return frames if video_family or vision is not config else None


def _codec(config: Any) -> tuple[int, int] | None:
    """(channels, hop) of a waveform codec (Encodec, DAC, Mimi, ...): a config, or a sub-config of it, with the
    up- or down-sampling ratios of its convolution stack; the hop is their product (samples per frame)."""
    fields = vars(config)
    ratios = next((fields[f] for f in ("downsampling_ratios", "upsampling_ratios") if _ints(fields.get(f))), None)
    if ratios is not None:
        channels = next((fields[f] for f in ("audio_channels", "channels") if isinstance(fields.get(f), int)), 1)
        return channels, math.prod(ratios)
    return next((found for _, sub in _sub_configs(config) if (found := _codec(sub)) is not None), None)


# ── Padded attention masks ──
# All-ones masks hide every masking bug (a sign-flipped ``1 - mask`` gives the same zeros): sample masks pad
# every other row, as a batch of prompts of different lengths does. Decoder-only models are padded on the left
# (as for generation), every other model on the right. ``resized_mask`` keeps that pattern at another shape.
def padding_side(model: torch.nn.Module) -> str:
    """``left`` for decoder-only language models (a causal-LM class, or a model of a family that has one and
    no masked-LM head), ``right`` for encoders, encoder-decoders and everything else."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return "right"
    from transformers.models.auto import modeling_auto

    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    model_type = getattr(config, "model_type", None)
    if type(model).__name__ in causal.values() or (model_type in causal and model_type not in masked):
        return "left"
    return "right"


def padded_mask(batch: int, sequence: int, side: str, pads: int | None = None) -> torch.Tensor:
    """``(batch, sequence)`` mask of ones, with the odd rows padded by ``pads`` zeros (a quarter of the sequence
    by default, at least one) on ``side``; every row keeps at least one token."""
    mask = torch.ones(batch, sequence, dtype=torch.long)
    count = min(max(1, sequence // 4) if pads is None else pads, sequence - 1)
    if count > 0:
        columns = slice(0, count) if side == "left" else slice(sequence - count, sequence)
        mask[1::2, columns] = 0
    return mask


def _padding_of(row: torch.Tensor) -> tuple[str, int] | None:
    """(side, pads) of a 0/1 row that is ones with contiguous zeros at one end; None for any other row."""
    zeros = int((row == 0).sum())
    if zeros == 0:
        return "right", 0
    if zeros < row.numel() and bool((row[:zeros] == 0).all()):
        return "left", zeros
    if zeros < row.numel() and bool((row[-zeros:] == 0).all()):
        return "right", zeros
    return None


def resized_mask(original: torch.Tensor, shape: list[int]) -> torch.Tensor | None:
    """``original`` (a padded 2-d mask) at ``shape``: row ``i`` pads like original row ``i % batch``, on the same
    side, by as many zeros (fewer when the new row would have no token left). None when ``original`` is not a
    padded mask (3-d, values other than 0/1, holes), so the caller resamples it another way."""
    if original.dim() != 2 or len(shape) != 2 or original.is_floating_point() or original.numel() == 0:
        return None
    if not bool(((original == 0) | (original == 1)).all()):
        return None
    rows = [_padding_of(row) for row in original]
    if any(row is None for row in rows):
        return None
    batch, sequence = shape
    mask = torch.ones(batch, sequence, dtype=original.dtype)
    for index in range(batch):
        side, pads = rows[index % len(rows)]
        count = min(pads, sequence - 1)
        if count > 0:
            mask[index, slice(0, count) if side == "left" else slice(sequence - count, sequence)] = 0
    return mask


def _width(config: Any) -> int:
    return next((getattr(config, f) for f in _HIDDEN_FIELDS if isinstance(getattr(config, f, None), int)), HIDDEN)


def _patch_side(config: Any) -> int:
    """Side of the square patch grid given to models that take images as patch sequences."""
    pool = getattr(config, "pooling_kernel_size", None) or getattr(config, "spatial_merge_size", None)
    return 2 * pool if isinstance(pool, int) else 4


def _patch_width(config: Any) -> int:
    patch = getattr(config, "patch_size", PATCH)
    patch = patch if isinstance(patch, int) else int(patch[0])
    channels = getattr(config, "num_channels", None) or getattr(config, "in_channels", 3)
    return channels * getattr(config, "temporal_patch_size", 1) * patch * patch


def _make_embeds(name: str, config: Any, batch: int, sequence: int, generator: torch.Generator) -> torch.Tensor | None:
    """Embedding-level inputs, for models that take no token ids, pixels or audio (sub-modules of a larger model)."""
    hidden = _width(config)
    if name in ("inputs", "query_embeds", "noise_embeds"):  # Perceiver, Q-Former queries, drafter noise blocks
        return torch.randn(batch, sequence, hidden, generator=generator)
    if name == "latents":  # codec decoders (Mimi): channels first, one frame per step
        return torch.randn(batch, hidden, sequence, generator=generator)
    if name == "encoder_hidden_states" and isinstance(getattr(config, "encoder_hidden_size", None), int):
        return torch.randn(batch, sequence, config.encoder_hidden_size, generator=generator)
    if name == "context_hidden_states":  # speculative drafters: hidden states of several target-model layers
        layers = len(getattr(config, "target_layer_ids", None) or [0])
        return torch.randn(batch, sequence, hidden * layers, generator=generator)
    return None


def _make_patches(name: str, config: Any, batch: int, generator: torch.Generator) -> torch.Tensor | None:
    """Images given as sequences of flattened patches, with their grid (position ids, masks, shapes)."""
    side = _patch_side(config)
    if name == "pixel_values":
        return torch.randn(batch, side * side, _patch_width(config), generator=generator)
    if name == "hidden_states":  # Qwen-VL-style vision towers: all images' patches in one sequence
        return torch.randn(batch * side * side, _patch_width(config), generator=generator)
    if name == "grid_thw":
        return torch.tensor([[1, side, side]] * batch, dtype=torch.long)
    if name == "pixel_position_ids":  # (x, y) of every patch
        index = torch.arange(side * side)
        return torch.stack([index % side, index // side], dim=-1).expand(batch, -1, -1).clone()
    if name == "pixel_attention_mask":
        return torch.ones(batch, side * side, dtype=torch.long)
    if name == "spatial_shapes":
        return torch.tensor([[side, side]] * batch, dtype=torch.long)
    return None


def _make_series(name: str, config: Any, batch: int, generator: torch.Generator) -> torch.Tensor | None:
    """Time-series inputs: a history of ``context_length`` steps plus the largest lag the model looks back by
    (``lags_sequence``), one value per step (or ``num_input_channels`` / ``input_size`` of them), its time
    features, and the ``prediction_length`` steps a forecaster's decoder reads; nothing observed is missing."""
    fields = vars(config)
    context = fields.get("context_length") or fields.get("prediction_length") or SEQUENCE
    history = context + max(fields.get("lags_sequence") or [0])
    future = fields.get("prediction_length") or SEQUENCE
    channels = next((fields[f] for f in ("num_input_channels", "input_size") if isinstance(fields.get(f), int)), 1)
    per_step = (channels,) if "num_input_channels" in fields or channels > 1 else ()
    time_features = fields.get("num_time_features") or 0
    if name == "past_values":
        return torch.randn(batch, history, *per_step, generator=generator)
    if name in ("past_observed_mask", "observed_mask"):
        return torch.ones(batch, history, *per_step)
    if name == "past_values_padding":  # TimesFm: 1 marks a padded step
        return torch.zeros(batch, history, dtype=torch.long)
    if name == "freq":  # TimesFm: the series' frequency class
        return torch.zeros(batch, 1, dtype=torch.long)
    if name == "past_time_features":
        return torch.randn(batch, history, time_features, generator=generator)
    if name == "future_values":
        return torch.randn(batch, future, *per_step, generator=generator)
    if name == "future_time_features":
        return torch.randn(batch, future, time_features, generator=generator)
    return None


_PRIMARY = ("input_ids", "pixel_values", "input_values", "input_features", "past_values", "pixel_values_videos")
_COMPANIONS = ("attention_mask", "token_type_ids", "bbox")
# Primaries of models that take none of the above (checked only then, in signature order).
_EMBEDDING_PRIMARY = ("inputs", "query_embeds", "noise_embeds", "latents", "hidden_states")
_EMBEDDING_COMPANIONS = ("encoder_hidden_states",)
# Required inputs that describe a patch grid: the images are then given as patch sequences.
_PATCH_GRID = ("grid_thw", "pixel_position_ids", "pixel_attention_mask", "spatial_shapes")


def sample_inputs(
    model: torch.nn.Module, batch: int = BATCH, sequence: int = SEQUENCE, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Inputs for ``model.forward``: its primary input, text companions, decoder inputs, required ones.

    Multiple-choice heads take ``(batch, choices, sequence)`` text inputs; sequence classifiers that pool at
    the end-of-sequence token get one in every row (``_end_rows_with_eos``).
    """
    config = model.config
    choices = CHOICES if type(model).__name__.endswith("ForMultipleChoice") else 1
    batch *= choices  # the choices are rows of their own until the end, then folded into (batch, choices)
    parameters = inspect.signature(model.forward).parameters
    generator = torch.Generator().manual_seed(seed)
    wanted: list[str] = []
    primary = next((p for p in parameters if p in _PRIMARY), None)
    embedded = primary is None
    if embedded:
        primary = next((p for p in parameters if p in _EMBEDDING_PRIMARY), None)
    if primary is None:
        raise TinyModelError(f"{type(model).__name__}: forward takes none of {', '.join(_PRIMARY)}")
    wanted.append(primary)
    if embedded:
        wanted += [p for p in _EMBEDDING_COMPANIONS if p in parameters]
    if primary == "input_ids":
        wanted += [p for p in _COMPANIONS if p in parameters]
        visual = hasattr(config, "vision_config") or isinstance(getattr(config, "image_size", None), int)
        if "pixel_values" in parameters and visual and not _has_image_token(config):
            wanted.append("pixel_values")
    if primary == "pixel_values" and "input_ids" in parameters:  # vision-language: the text half too (Kosmos-2)
        wanted += [p for p in ("input_ids", "attention_mask") if p in parameters]
    # Block-diffusion models (DiffusionGemma) draw a random canvas when decoder_input_ids is left out, so eager
    # would differ from itself: the canvas is given, like an encoder-decoder's decoder inputs.
    decoded = getattr(config, "is_encoder_decoder", False) or getattr(config, "canvas_length", None)
    if decoded and "decoder_input_ids" in parameters:
        wanted.append("decoder_input_ids")
    for name, parameter in parameters.items():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if required and name not in wanted:
            wanted.append(name)
    patches = any(p in wanted for p in _PATCH_GRID)
    inputs: dict[str, torch.Tensor] = {}
    for name in wanted:
        value = _make_patches(name, config, batch, generator) if patches else None
        if value is None and embedded:
            value = _make_embeds(name, config, batch, sequence, generator)
        if value is None and primary == "past_values":
            value = _make_series(name, config, batch, generator)
        if value is None and name == "input_features":
            value = _input_features(config, batch, generator, model)
        if value is None:
            rows = batch * _codebook_rows(model, name)
            value = _make(name, config, rows, sequence, generator, padding_side(model))
        if value is None and name.endswith("_mask") and primary in ("input_ids", "input_features"):
            value = torch.ones(inputs[primary].shape[:2], dtype=torch.long)  # a required mask: nothing masked
        if value is None:
            raise TinyModelError(f"{type(model).__name__}: cannot make a sample for required input {name!r}")
        inputs[name] = value
    if _pools_at_eos(model) and "input_ids" in inputs:
        _place_tokens(inputs["input_ids"], inputs.get("attention_mask"), config.eos_token_id, ends=(-1,))
    sep = getattr(config, "sep_token_id", None)
    if "global_attention_mask" in parameters and isinstance(sep, int) and "input_ids" in inputs:
        # Longformer derives global attention from a "question </s></s> answer </s>" layout: three separators
        _place_tokens(inputs["input_ids"], inputs.get("attention_mask"), sep, ends=(0.5, 0.5, -1))
    question = getattr(config, "question_token_id", None)
    if isinstance(question, int) and "input_ids" in inputs:  # Splinter: each row asks at least one question
        _place_tokens(inputs["input_ids"], inputs.get("attention_mask"), question, ends=(0.25,))
    if choices > 1:
        inputs = {n: v.view(batch // choices, choices, *v.shape[1:]) if v.shape[:1] == (batch,) else v
                  for n, v in inputs.items()}  # fmt: skip
    return inputs


def _codebook_rows(model: torch.nn.Module, name: str) -> int:
    """Rows per example of input ``name``: ``num_codebooks`` where the forward's docstring gives its shape as
    ``(batch_size * num_codebooks, sequence_length)`` (Musicgen's audio codes, one row per codebook), else 1."""
    documented = rf"(?<!\w){name} \(`torch.LongTensor` of shape `\(batch_size \* num_codebooks"
    if not re.search(documented, model.forward.__doc__ or ""):
        return 1
    config = model.config
    return next((c.num_codebooks for c in (config, *(s for _, s in _sub_configs(config)))
                 if isinstance(vars(c).get("num_codebooks"), int)), 1)  # fmt: skip


def _pools_at_eos(model: torch.nn.Module) -> bool:
    """Encoder-decoder sequence classifiers (BART, T5, ...) classify the decoder's state at the last ``<eos>`` of
    each row, and refuse rows without one (or with different counts)."""
    config = model.config
    return (type(model).__name__.endswith("ForSequenceClassification") and getattr(config, "is_encoder_decoder", False)
            and isinstance(getattr(config, "eos_token_id", None), int))  # fmt: skip


def _place_tokens(input_ids: torch.Tensor, mask: torch.Tensor | None, token: int, ends: tuple[float, ...]) -> None:
    """Put ``token`` in every row where a tokenizer would and nowhere else: ``-1`` is the row's last unpadded
    position, a fraction ``f`` the end of its first ``f`` (a question's end); equal places stack up."""
    input_ids[input_ids == token] = 3 if token != 3 else 4  # sampled ids are >= 3
    lengths = mask.sum(dim=-1) if mask is not None and mask.shape == input_ids.shape else None
    for row in range(input_ids.shape[0]):
        length = int(lengths[row]) if lengths is not None else input_ids.shape[-1]
        taken: list[int] = []
        for end in ends:
            position = length - 1 if end == -1 else int(length * end) - 1
            while position in taken:
                position += 1
            taken.append(position)
            input_ids[row, position] = token


def _has_image_token(config: Any) -> bool:
    return any(hasattr(config, n) for n in ("image_token_id", "image_token_index"))
