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
from dataclasses import dataclass
from pathlib import Path
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

# ── Config shrinking rules: field name → new value (callables receive the old value) ──
_HIDDEN_FIELDS = ("hidden_size", "d_model", "n_embd", "dim", "word_embed_proj_dim")
_HEAD_FIELDS = (
    "num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
)
_LAYER_FIELDS = (
    "num_hidden_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "num_layers",
    "num_decoder_layers",
)
_INTERMEDIATE_FIELDS = ("intermediate_size", "hidden_dim", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff")
_LIST_WIDTH_FIELDS = ("hidden_sizes", "conv_dim", "embed_dims", "neck_hidden_sizes")
_LIST_DEPTH_FIELDS = ("depths",)
_ONE_FIELDS = ("layer_scale_init_value", "layerscale_value")  # keep outputs of order one
_FIXED: dict[str, Any] = {
    "max_position_embeddings": lambda old: min(old, 128) if isinstance(old, int) else old,
    "max_source_positions": lambda old: min(old, 16) if isinstance(old, int) else old,
    "max_target_positions": lambda old: min(old, 64) if isinstance(old, int) else old,
    "vocab_size": lambda old: min(old, VOCAB) if isinstance(old, int) else old,
    "num_labels": lambda old: 3,
    "num_mel_bins": lambda old: 16 if isinstance(old, int) else old,
    "initializer_range": lambda old: 0.1 if isinstance(old, float) else old,
}


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


def shrink_config(config: Any) -> Any:
    """Shrink the generic size fields of ``config`` and of every nested sub-config, consistently."""
    for sub in _sub_configs(config):
        shrink_config(sub)
    fields = vars(config)
    old_layers = next((fields[f] for f in _LAYER_FIELDS if isinstance(fields.get(f), int)), None)
    for name in _HIDDEN_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HIDDEN:
            setattr(config, name, HIDDEN)
    for name in _HEAD_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > HEADS:
            setattr(config, name, HEADS)
    if isinstance(fields.get("num_key_value_heads"), int):
        heads = next((fields[f] for f in _HEAD_FIELDS if isinstance(fields.get(f), int)), HEADS)
        config.num_key_value_heads = min(KV_HEADS, heads)
    if isinstance(fields.get("d_kv"), int):
        config.d_kv = HIDDEN // HEADS
    if isinstance(fields.get("head_dim"), int):
        config.head_dim = HIDDEN // HEADS
    if isinstance(fields.get("rotary_dim"), int):
        config.rotary_dim = min(fields["rotary_dim"], HIDDEN // HEADS)
    for name in _LAYER_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > LAYERS:
            setattr(config, name, LAYERS)
    for name in _INTERMEDIATE_FIELDS:
        if isinstance(fields.get(name), int) and fields[name] > INTERMEDIATE:
            setattr(config, name, INTERMEDIATE)
    for name in _LIST_WIDTH_FIELDS:
        if isinstance(fields.get(name), (list, tuple)) and all(isinstance(v, int) for v in fields[name]):
            setattr(config, name, type(fields[name])(max(4, v // 8) for v in fields[name]))
    for name in _LIST_DEPTH_FIELDS:
        if isinstance(fields.get(name), (list, tuple)):
            setattr(config, name, type(fields[name])(1 for _ in fields[name]))
    if isinstance(fields.get("num_heads"), (list, tuple)) and isinstance(fields.get("embed_dim"), int):
        config.embed_dim = max(fields["embed_dim"] // 8, max(fields["num_heads"]))
    for name in _ONE_FIELDS:
        if isinstance(fields.get(name), float):
            setattr(config, name, 1.0)
    for name, rule in _FIXED.items():
        if name in fields:
            setattr(config, name, rule(fields[name]))
    _truncate_per_layer_lists(config, old_layers)
    _shrink_images(config)
    _clamp_token_ids(config)
    return config


def _truncate_per_layer_lists(config: Any, old_layers: int | None) -> None:
    """Lists with one item per layer (``layer_types``) follow the new layer count."""
    if not old_layers or old_layers <= LAYERS:
        return
    for name, value in list(vars(config).items()):
        if isinstance(value, list) and len(value) == old_layers:
            setattr(config, name, value[:LAYERS])


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


def build_tiny(name: str, seed: int = 0, batch: int = BATCH, sequence: int = SEQUENCE) -> TinyModel:
    """Build class ``name`` tiny and random, with sample inputs derived from its forward signature."""
    cls = model_class(name)
    config = shrink_config(cls.config_class())
    torch.manual_seed(seed)
    model = cls(config).eval()
    return TinyModel(model, sample_inputs(model, batch=batch, sequence=sequence, seed=seed))


def load_local(directory: Path, seed: int = 0) -> TinyModel:
    """Load a user's checkpoint directory offline (``from_pretrained``) and make sample inputs for it."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(directory, local_files_only=True)
    architectures = getattr(config, "architectures", None) or []
    if not architectures:
        raise TinyModelError(f"{directory}: config.json names no architecture")
    cls = model_class(architectures[0])
    model = cls.from_pretrained(directory, local_files_only=True).eval()
    return TinyModel(model, sample_inputs(model, seed=seed))


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


def _input_features(config: Any, batch: int, generator: torch.Generator) -> torch.Tensor:
    if hasattr(config, "max_source_positions") and hasattr(config, "num_mel_bins"):  # Whisper-like
        return torch.randn(batch, config.num_mel_bins, 2 * config.max_source_positions, generator=generator)
    width = getattr(config, "input_feat_per_channel", 16) * getattr(config, "input_channels", 1)
    return torch.randn(batch, 32, width, generator=generator)


def _make(name: str, config: Any, batch: int, sequence: int, generator: torch.Generator) -> torch.Tensor | None:
    vocab = _vocab(config)
    if name in ("input_ids", "decoder_input_ids"):
        return torch.randint(3, vocab, (batch, sequence), generator=generator)
    if name in ("attention_mask", "decoder_attention_mask"):
        return torch.ones(batch, sequence, dtype=torch.long)
    if name == "token_type_ids":
        return torch.zeros(batch, sequence, dtype=torch.long)
    if name == "pixel_values":
        height, width = _image_size(config)
        channels = getattr(_vision(config), "num_channels", 3)
        return torch.randn(batch, channels, height, width, generator=generator)
    if name == "input_values":
        return torch.randn(batch, AUDIO_SAMPLES, generator=generator)
    if name == "input_features":
        return _input_features(config, batch, generator)
    if name == "bbox":
        corners = torch.randint(0, 500, (batch, sequence, 2), generator=generator)
        return torch.cat([corners, corners + 100], dim=-1)
    return None


_PRIMARY = ("input_ids", "pixel_values", "input_values", "input_features")
_COMPANIONS = ("attention_mask", "token_type_ids", "bbox")


def sample_inputs(
    model: torch.nn.Module, batch: int = BATCH, sequence: int = SEQUENCE, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Inputs for ``model.forward``: its primary input, text companions, decoder inputs, required ones."""
    config = model.config
    parameters = inspect.signature(model.forward).parameters
    generator = torch.Generator().manual_seed(seed)
    wanted: list[str] = []
    primary = next((p for p in parameters if p in _PRIMARY), None)
    if primary is None:
        raise TinyModelError(f"{type(model).__name__}: forward takes none of {', '.join(_PRIMARY)}")
    wanted.append(primary)
    if primary == "input_ids":
        wanted += [p for p in _COMPANIONS if p in parameters]
        if "pixel_values" in parameters and hasattr(config, "vision_config") and not _has_image_token(config):
            wanted.append("pixel_values")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        wanted.append("decoder_input_ids")
    for name, parameter in parameters.items():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if required and name not in wanted:
            wanted.append(name)
    inputs = {}
    for name in wanted:
        value = _make(name, config, batch, sequence, generator)
        if value is None:
            raise TinyModelError(f"{type(model).__name__}: cannot make a sample for required input {name!r}")
        inputs[name] = value
    return inputs


def _has_image_token(config: Any) -> bool:
    return any(hasattr(config, n) for n in ("image_token_id", "image_token_index"))
