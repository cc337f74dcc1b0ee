"""Shrinking a transformers config to a tiny one: the sizes, and the field rules applied to every sub-config.

Split out of ``exporters.tiny`` (which re-exports the public names, and the sizes of ``exporters.tiny.sizes``): the rules are data (the tables below)
and the functions that apply them, recursively in nested sub-configs; nothing here builds a model.
The sizes and field tables live in ``exporters.tiny.sizes``; the rules about layer stacks in
``exporters.tiny.layers``, about rotary embeddings in ``exporters.tiny.rope``.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from exporters.tiny.layers import (
    _deepen_to_every_layer_kind,
    _derived_layer_kinds,
    _fill_layer_kinds,
    _fit_ssm_heads,
    _hold_an_attention_layer,
    _per_layer_overrides,
    _shrink_out_indices,
    _shrink_per_layer_heads,
    _truncate_per_layer_lists,
)
from exporters.tiny.rope import _rope_base_for_sub_configs, _rope_per_layer_kind, _shrink_rope_sections
from exporters.tiny.sizes import (
    _EXPERT_FIELDS,
    _FIXED,
    _HEAD_FIELDS,
    _HIDDEN_FIELDS,
    _INTERMEDIATE_FIELDS,
    _LAYER_FIELDS,
    _LIST_DEPTH_FIELDS,
    _LIST_WIDTH_FIELDS,
    _NONE_FILL,
    _ONE_FIELDS,
    _RANK_FIELDS,
    _TOPK_FIELDS,
    _UNGUARDED_NONE_FILL,
    EXPERTS,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    IMAGE,
    INTERMEDIATE,
    KV_HEADS,
    LAYERS,
    PATCH,
    VOCAB,
    _guarded,
    _ints,
    _modeling_source,
    _own_width,
    _sub_configs,
    _width,
)


class TinyModelError(ValueError):
    """The class cannot be built as a tiny model (unknown name, or inputs it needs that we cannot make)."""


def model_class(name: str) -> type:
    import transformers

    cls = getattr(transformers, name, None)
    if cls is None or not inspect.isclass(cls) or not hasattr(cls, "config_class"):
        raise TinyModelError(f"{name!r} is not a transformers model class")
    return cls


def default_config(cls: type) -> Any:
    """The default config of model class ``cls``, with a native backbone where the default one is timm's:
    DETR-family configs build a ``timm_backbone`` (resnet50) by default, and their ``use_timm_backbone=False``
    constructor knob gives the transformers ResNet (or Swin) instead. Chosen whether or not timm is installed,
    so a class's tiny model, and every record made from it, does not depend on an optional package."""
    config = cls.config_class()
    if not _uses_timm(config):
        return config
    try:
        native = cls.config_class(use_timm_backbone=False)
    except Exception:  # no such knob: the model needs timm, and its build says so
        return config
    return config if _uses_timm(native) else native


def _uses_timm(config: Any) -> bool:
    return getattr(config, "model_type", None) == "timm_backbone" or any(_uses_timm(s) for _, s in _sub_configs(config))


def shrink_config(config: Any, keep_stage_widths: bool = False) -> Any:
    """Shrink the generic size fields of ``config`` and of every nested sub-config, consistently.

    The fields are first shrunk in place; the config is then rebuilt from its constructor so that the
    values its ``__post_init__`` derives from them (head dims, per-layer type lists, projection sizes)
    follow the new sizes instead of keeping the full-size ones. ``keep_stage_widths`` leaves per-stage width
    lists (``hidden_sizes``, ...) at their defaults, for models whose other channel fields must match them.
    """
    import copy

    tied = _sizes_before(config)
    kinds = _derived_layer_kinds(config)
    # The full-size fields, before the sub-configs' sizes are followed: a followed field counts as changed, so the
    # rebuild keeps it even where ``__post_init__`` would derive it (Sam2's ``backbone_channel_list``).
    before = {k: v for k, v in vars(config).items() if not isinstance(v, torch.nn.Module)}
    before = copy.deepcopy({k: v for k, v in before.items() if k not in dict(_sub_configs(config))})
    for name, sub in _sub_configs(config):
        old_sizes = (vars(sub).get("patch_size"), _width(sub), _stage_lists(sub))
        setattr(config, name, shrink_config(sub, keep_stage_widths))
        _follow_sub_config(config, old_sizes, getattr(config, name))
    _index_shrunk_vision_layers(config, tied[0].get("vision_config", {}))
    _follow_sibling_widths(config, *tied)
    per_layer = _per_layer_overrides(config)
    _shrink_fields(config, keep_stage_widths)
    if per_layer is not None:  # heterogeneous configs: every layer's overrides are shrunk by the same rules
        layers = next((vars(config)[f] for f in _LAYER_FIELDS if isinstance(vars(config).get(f), int)), 0)
        per_layer = {i: _shrunk_overrides(o) for i, o in per_layer.items() if i < layers}
    from exporters.tiny.validators import retie, satisfy_validator  # (it reads this module's size rules)

    shrunk = _fill_missing(_rebuild(config, before, per_layer))
    # The constructor validated the broken config away (it keeps the in-place one, without its derived fields):
    # make it valid again, then rebuild so that ``__post_init__`` derives from the valid sizes.
    if retie(shrunk, *tied) or satisfy_validator(shrunk, before, tied[0]):
        shrunk = _fill_missing(_rebuild(shrunk, before, per_layer))
    if _deepen_to_every_layer_kind(shrunk, kinds):
        shrunk = _fill_missing(_rebuild(shrunk, before, per_layer))
    return shrunk


def _sizes_before(config: Any) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The full-size integer fields of each sub-config, and the width of the config and of each sub-config."""
    subs = _sub_configs(config)
    fields = {n: {f: v for f, v in vars(s).items() if type(v) is int} for n, s in subs}
    widths = {n: w for n, w in [("", _own_width(config)), *((n, _own_width(s)) for n, s in subs)] if w}
    return fields, widths


def _follow_sub_config(config: Any, old_sizes: tuple[Any, int, dict[str, list[int]]], sub: Any) -> None:
    """A parent's copies of its sub-config's sizes follow the shrunk sub-config: the ``patch_size`` it reshapes
    the backbone's tokens by, the ``*_hidden_size`` channels it reads from it (DepthAnything's
    ``reassemble_hidden_size``), the per-stage channels it reads, in the sub-config's order or reversed (Sam2's
    ``backbone_channel_list`` is the Hiera ``embed_dim_per_stage`` from the deepest stage), when they equal the
    sub-config's full-size values."""
    old_patch, old_width, old_lists = old_sizes
    fields = vars(config)
    if fields.get("patch_size") == old_patch != vars(sub).get("patch_size"):
        config.patch_size = vars(sub)["patch_size"]
    for name in list(fields):
        if name.endswith("hidden_size") and name not in _HIDDEN_FIELDS and fields[name] == old_width != _width(sub):
            setattr(config, name, _width(sub))
    new_lists = _stage_lists(sub)
    for name in list(fields):
        value = fields[name]
        if name in _LIST_WIDTH_FIELDS or not _ints(value):
            continue
        for field, old in old_lists.items():
            new = new_lists.get(field, old)
            if new != old and list(value) in (old, old[::-1]):
                setattr(config, name, type(value)(new if list(value) == old else new[::-1]))
                break


def _follow_sibling_widths(config: Any, full: dict[str, dict[str, int]], widths: dict[str, int]) -> None:
    """A sub-config's ``*channels`` field that shrinking left at its full-size value, where that value is the
    full-size width of a sibling sub-config (and not its own config's width), is the width that sibling reads:
    it follows the sibling's shrunk width. SAM's vision neck puts out ``output_channels`` 256 for a prompt
    encoder and mask decoder 256 wide; left at 256 against their 32 the decoder failed (``The size of tensor a
    (256) must match the size of tensor b (32)``). Its ``num_pos_feats`` (128) are sine and cosine features of
    half that width each, so a half-width field follows half the sibling's width. Checked without a validator,
    which SAM has none of."""
    subs = dict(_sub_configs(config))
    for name, sub in subs.items():
        for field, old in full.get(name, {}).items():
            if not field.endswith(_SIBLING_WIDTH_FIELDS) or vars(sub).get(field) != old or old == widths.get(name):
                continue
            for ratio in (1, 2):
                source = next((n for n, w in widths.items() if n != name and n in subs and w == old * ratio), None)
                shrunk = _own_width(subs[source]) if source else None
                if shrunk and shrunk // ratio and shrunk // ratio != old:
                    setattr(sub, field, shrunk // ratio)
                    break


_SIBLING_WIDTH_FIELDS = ("channels", "num_pos_feats")


def _index_shrunk_vision_layers(config: Any, full_vision: dict[str, int]) -> None:
    """Vision feature layers picked among the full-size vision tower's layers (Molmo2's adapter reads layers
    [24, 18] of 25) that the shrunk tower lacks are counted from its end instead, as far from the last layer as
    the tower allows (-1, -2 of 2): ``*feature_layer*`` fields of the config and its sub-configs whose indices all
    count from the start (VipLlava's mixed [-2, -5, -8, -11, 6] is left as it is: it builds and exports today)."""
    vision = vars(config).get("vision_config")
    old = next((full_vision[f] for f in _LAYER_FIELDS if f in full_vision), None)
    layers = next((vars(vision)[f] for f in _LAYER_FIELDS if isinstance(vars(vision).get(f), int)), None) if vision else None
    if not old or not layers or layers >= old:
        return
    for owner in (config, *(sub for _, sub in _sub_configs(config))):
        for name, value in list(vars(owner).items()):
            if "feature_layer" not in name:
                continue
            one = type(value) is int
            indices = [value] if one else value if _ints(value) else None
            if indices is None or min(indices) < 0 or all(i < layers for i in indices):
                continue
            moved = [max(i - old, -layers) if i >= layers else i for i in indices]
            setattr(owner, name, moved[0] if one else type(value)(moved))


def _stage_lists(config: Any) -> dict[str, list[int]]:
    """A config's per-stage width lists (``hidden_sizes``, ... and those ``_scale_stage_widths`` scales)."""
    fields = vars(config)
    return {n: list(fields[n]) for n in (*_LIST_WIDTH_FIELDS, *_SCALED_STAGE_WIDTHS) if _ints(fields.get(n))}


def _fill_missing(config: Any) -> Any:
    """Fields some configs lack although their model reads them (MoonshineStreaming's decoder attention reads
    ``num_key_value_heads``): set after the rebuild, which keeps declared fields only."""
    fields = vars(config)
    if "num_key_value_heads" not in fields and isinstance(fields.get("num_attention_heads"), int):
        config.num_key_value_heads = fields["num_attention_heads"]  # one key per head: plain multi-head attention
    _fill_read_token_ids(config)
    _rope_base_for_sub_configs(config)
    return config


def _fill_read_token_ids(config: Any) -> None:
    """Start-of-span token ids the modeling module reads as ``self.config.<name>_start_token_id`` that a config
    declaring another one lacks get unused ids of the (text) vocabulary: Qwen2.5-Omni's thinker config declares
    ``audio_start_token_id`` but not the ``vision_start_token_id`` its multimodal RoPE index reads
    (``'Qwen2_5OmniThinkerConfig' object has no attribute 'vision_start_token_id'``). Only span markers: other
    ids a module reads (a VLM's ``image_token_id``) belong to a config the same module defines next to it."""
    import re

    own = {n: v for n, v in vars(config).items() if n.endswith("token_id")}
    if not any(n.endswith("_start_token_id") for n in own):
        return
    read = dict.fromkeys(re.findall(r"self\.config\.(\w+_start_token_id)\b", _modeling_source(config)))
    missing = [name for name in read if not hasattr(config, name)]
    text = vars(config).get("text_config")
    vocab = next((v for v in (vars(config).get("vocab_size"), getattr(text, "vocab_size", None)) if isinstance(v, int)), VOCAB)
    taken = {v for v in own.values() if isinstance(v, int)}
    free = (i for i in range(vocab - 1, 0, -1) if i not in taken)
    for name in missing:
        setattr(config, name, next(free))


def _shrunk_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    from types import SimpleNamespace

    layer = SimpleNamespace(**overrides)
    _shrink_fields(layer)
    return vars(layer)


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
    for name, value in _UNGUARDED_NONE_FILL.items():
        if name in fields and fields[name] is None and not _guarded(name, _modeling_source(config)):
            setattr(config, name, value)
    for name in _HIDDEN_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HIDDEN:
            setattr(config, name, HIDDEN)
    width = next((fields[f] for f in _HIDDEN_FIELDS if isinstance(fields.get(f), int)), None)
    _scale_stage_widths(config, old_hidden, width)
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
    old_heads = next((fields[f] for f in _HEAD_FIELDS if isinstance(fields.get(f), int)), None)
    for name in _HEAD_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HEADS:
            setattr(config, name, HEADS)
    _shrink_per_layer_heads(config, old_heads)
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
    _fill_layer_kinds(config)
    _fill_channel_lists(config)
    _hold_an_attention_layer(config)
    _shrink_out_indices(config, old_layers)
    _fit_ssm_heads(config)
    _rope_per_layer_kind(config)
    _shrink_rope_sections(config)
    _shrink_images(config)
    _clamp_token_ids(config)


# Per-stage widths that start at the config's width and grow with depth (Sam2's Hiera: 96, 192, 384, 768).
_SCALED_STAGE_WIDTHS = ("embed_dim_per_stage",)


def _scale_stage_widths(config: Any, old_width: int | None, width: int | None) -> None:
    """Per-stage widths whose first stage is the config's width scale with it, keeping the ratios between the
    stages (Sam2's Hiera: its 96-wide stem feeds a first stage of 96: hidden 32 makes 32, 64, 128, 256)."""
    fields = vars(config)
    for name in _SCALED_STAGE_WIDTHS:
        value = fields.get(name)
        if old_width and width and width < old_width and _ints(value) and value[0] == old_width:
            setattr(config, name, type(value)(max(1, v * width // old_width) for v in value))


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
    aliases = getattr(cls, "attribute_map", None) or {}
    kwargs = {}
    for field in dataclasses.fields(cls):
        # A field named by an alias is stored under its target (Kimi-Linear's ``num_local_experts`` field lives in
        # ``num_experts``): read it there, or the constructor's full-size default (256 experts) comes back.
        stored = field.name if field.name in vars(config) else aliases.get(field.name, field.name)
        if not field.init or stored not in vars(config):
            continue
        if field.default is not dataclasses.MISSING:
            declared = field.default
        elif field.default_factory is not dataclasses.MISSING:
            declared = field.default_factory()
        else:
            declared = dataclasses.MISSING
        derived = declared is not dataclasses.MISSING and _differs(fresh.get(stored, declared), declared)
        value = vars(config)[stored]  # not getattr: per-layer attributes refuse global reads
        if field.name in _KEPT:  # chosen by a parent (not a default's); the constructor takes them without "_"
            if _differs(fresh.get(field.name), value):
                kwargs[field.name.lstrip("_")] = value
        elif not derived or field.name in subs or (stored in before and _differs(before[stored], value)):
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


def _fill_channel_lists(config: Any) -> None:
    """Per-block channel lists (``*_out_channels``) that a config leaves ``None`` (its checkpoint sets them) but
    its model indexes (Sapiens2's head reads ``upsample_out_channels[:-1]``: ``'NoneType' object is not
    subscriptable``) get one block of ``HIDDEN`` channels; lists the model only tests for ``None`` (an optional
    branch) stay unset."""
    import re

    fields = vars(config)
    source = None
    for name, value in list(fields.items()):
        if value is not None or not name.endswith("_out_channels"):
            continue
        source = _modeling_source(config) if source is None else source
        if re.search(rf"\.{name}\[", source) and not re.search(rf"\.{name} is not None", source):
            setattr(config, name, [HIDDEN])


def _shrink_images(config: Any) -> None:
    fields = vars(config)
    image = fields.get("image_size")
    # A patch made by a stem of strided convolutions (a ``stride`` field: LeViT's four stride-2 convs make its
    # 16-pixel patch) is what the stem does, not a kernel size: shrunk, the model's attention-bias grid expects
    # 32 / 8 = 4 positions where the stem leaves 2 (``The size of tensor a (4) must match ... (16)``).
    patch = isinstance(fields.get("patch_size"), int) and fields["patch_size"] > PATCH and not isinstance(
        fields.get("stride"), int)
    if isinstance(image, int) and image > IMAGE:
        config.image_size = IMAGE
        if patch:
            config.patch_size = PATCH
    elif isinstance(image, (list, tuple)) and len(image) == 2 and image[0] > IMAGE:
        config.image_size = type(image)([IMAGE, IMAGE])
        if patch:
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
