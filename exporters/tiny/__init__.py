"""Tiny, random, deterministic transformers models built by class name, with sample inputs.

No hub access: the model's config class is instantiated with its defaults and shrunk field by field
(and recursively in nested sub-configs), then the model is random-initialised under a fixed seed.
Special cases are data (the tables in ``exporters.tiny.sizes``), not code paths.

Outputs must be able to expose a wrong export: initialisers that make activations vanish (layer-scale
factors of 1e-6, for example) are raised so that outputs are of order one, and ``exporters.tiny.initialisation``
scales BatchNorm statistics and opens zero-initialised scales after building. Validation still reports
any degenerate output as inconclusive.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from exporters.padding import padded_mask, padding_side, resized_mask
from exporters.tiny.initialisation import fix_initialisation
from exporters.tiny.inputs import _vision, noise_inputs, noise_static_dims, sample_inputs
from exporters.tiny.shrink import TinyModelError, default_config, model_class, shrink_config
from exporters.tiny.sizes import (
    _LIST_WIDTH_FIELDS,
    AUDIO_SAMPLES,
    BATCH,
    CHOICES,
    EXPERTS,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    IMAGE,
    INTERMEDIATE,
    KV_HEADS,
    LAYERS,
    MAX_LAYERS,
    PATCH,
    SEQUENCE,
    VOCAB,
    _ints,
    _sub_configs,
)

# Building lives here; the parts live in one module per job, data flowing one way (none imports this one):
# exporters.tiny.sizes (sizes) → exporters.tiny.shrink (config rules) → exporters.padding (padded masks)
# → exporters.tiny.inputs (sample inputs) → exporters.tiny.initialisation (initialisation fixes) → this module (build_tiny).
__all__ = [
    "AUDIO_SAMPLES",
    "BATCH",
    "CHOICES",
    "EXPERTS",
    "HEADS",
    "HEAD_DIM",
    "HIDDEN",
    "IMAGE",
    "INTERMEDIATE",
    "KV_HEADS",
    "LAYERS",
    "MAX_LAYERS",
    "PATCH",
    "SEQUENCE",
    "VOCAB",
    "TinyModel",
    "TinyModelError",
    "build_tiny",
    "model_class",
    "padded_mask",
    "padding_side",
    "resized_mask",
    "sample_inputs",
    "shrink_config",
]


@dataclass
class TinyModel:
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    static_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)  # axes a dynamic export keeps static


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
    staged = _has_stage_widths(default_config(cls))
    try:
        tiny = _build(cls, shrink_config(default_config(cls)), seed, batch, sequence, image_size, overrides)
        if staged:
            _run_once(tiny)
        return tiny
    except Exception:
        if not staged:
            raise
        first = sys.exc_info()
    try:
        wide = shrink_config(default_config(cls), keep_stage_widths=True)
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
    if _values_take_every_head(model):
        torch.manual_seed(seed)
        model = cls(config).eval()
    languages = getattr(config, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD routes through one adapter per language
        model.set_default_language(languages[0])
    tiny = _grown_to_fit(TinyModel(model, sample_inputs(model, batch=batch, sequence=sequence, seed=seed)), seed)
    tiny = _features_as_read(tiny, seed)
    tiny = _patches_in_one_sequence(tiny)
    tiny.inputs = noise_inputs(tiny.model, tiny.inputs, seed)
    tiny.static_dims = noise_static_dims(tiny.inputs)
    fix_initialisation(tiny.model, tiny.inputs, seed)
    return tiny


def _values_take_every_head(model: torch.nn.Module) -> bool:
    """Turn grouped-query attention back into multi-head attention in (sub-)configs whose attention sizes
    ``v_proj`` by the query heads and ``k_proj`` by the key-value heads (Nemotron 3 Diarization): eager SDPA
    broadcasts k and v separately, but under export ``repeat_kv`` repeats both by the group size, so v ends up
    with more heads than q. Their default configs are multi-head; only the shrinker made them grouped. Also
    configs whose every attention sizes keys and values by the query heads (Granite Speech 5's block attention,
    where SDPA's grouping then doubled them: ``The size of tensor a (4) must match the size of tensor b (8)``);
    not where some attention of the config is grouped as the config says (MiMo-V2-Flash doubles its key-value
    heads in sliding layers only, so those match the query heads). True when a config was changed (the model
    must be rebuilt)."""
    attentions: dict[int, tuple[Any, list[str]]] = {}
    for module in model.modules():
        queries, keys, values, config = (getattr(module, n, None) for n in ("q_proj", "k_proj", "v_proj", "config"))
        if not (isinstance(keys, torch.nn.Linear) and isinstance(values, torch.nn.Linear) and config is not None):
            continue
        heads, kv_heads = vars(config).get("num_attention_heads"), vars(config).get("num_key_value_heads")
        if not (type(heads) is int and type(kv_heads) is int and kv_heads < heads):
            continue
        if keys.out_features * heads == values.out_features * kv_heads:
            kind = "values by query heads"
        elif isinstance(queries, torch.nn.Linear) and queries.out_features == keys.out_features == values.out_features:
            kind = "every head"
        else:
            kind = "grouped"
        attentions.setdefault(id(config), (config, []))[1].append(kind)
    changed = False
    for config, kinds in attentions.values():
        if "values by query heads" in kinds or (kinds and set(kinds) == {"every head"}):
            config.num_key_value_heads = config.num_attention_heads
            changed = True
    return changed


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



# A Linear layer refusing the sample's features: ``mat1 and mat2 shapes cannot be multiplied (64x16 and 64x32)``.
_LINEAR_REFUSED = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x\d+\)")


def _features_as_read(tiny: TinyModel, seed: int) -> TinyModel:
    """``input_features`` as wide as the Linear layer that reads them, where that is a multiple of their width:
    Granite Speech 5 reads frames stacked 4 at a time by its feature extractor (``num_mel_bins * 4``, hard-coded
    in its encoder), where every other model reads ``num_mel_bins``, a filter-bank stack or a convolution's
    channels (``_input_features``). Found by running: which Linear reads the features first is not in the config,
    and registration order is not the order of use. Other models keep their sample."""
    features = tiny.inputs.get("input_features")
    if features is None or not features.is_floating_point() or features.dim() != 3:
        return tiny
    try:
        _run_once(tiny)
        return tiny
    except Exception as error:  # only a Linear refusing the features' width is this rule's business
        refused = _LINEAR_REFUSED.search(str(error))
    width = features.shape[-1]
    if refused is None or int(refused[2]) != width or int(refused[3]) % width or int(refused[3]) <= width:
        return tiny
    generator = torch.Generator().manual_seed(seed)
    shape = (*features.shape[:-1], int(refused[3]))
    return TinyModel(tiny.model, {**tiny.inputs, "input_features": torch.randn(shape, generator=generator)})


def _patches_in_one_sequence(tiny: TinyModel) -> TinyModel:
    """A vision tower's ``pixel_values`` patches with their ``grid_thw``, given as all images' patches in one
    sequence where the batched sequences (``(batch, patches, width)``, what most such towers read) fail, as
    Qwen-VL towers read their ``hidden_states``: MuseGlimmer adds one position table over every image's grid
    to them (``The size of tensor a (16) must match the size of tensor b (32)``); flattened for a Linear patch
    embedding, or as ``(patches, channels, patch, patch)`` images for a convolution's (Kimi-K2.5's ``Expected
    3D (unbatched) or 4D (batched) input to conv2d``). Towers that run on the batched sequences keep them."""
    pixels = tiny.inputs.get("pixel_values")
    if "grid_thw" not in tiny.inputs or pixels is None or pixels.dim() != 3 or not _fails(tiny):
        return tiny
    flat = pixels.reshape(-1, pixels.shape[-1])
    layouts = [flat]
    embed = next((m for m in tiny.model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))), None)
    if isinstance(embed, torch.nn.Conv2d) and flat.shape[-1] == embed.in_channels * math.prod(embed.kernel_size):
        layouts.append(flat.reshape(-1, embed.in_channels, *embed.kernel_size))
    for layout in layouts:
        trial = TinyModel(tiny.model, {**tiny.inputs, "pixel_values": layout})
        if not _fails(trial):
            return trial
    return tiny


def _fails(tiny: TinyModel) -> bool:
    try:
        _run_once(tiny)
    except Exception:  # the caller tries another layout; the error of the one kept shows at the forward
        return True
    return False

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

