"""Sample inputs for a tiny model, derived from its forward signature and config.

Split out of ``exporters.tiny`` (which re-exports ``sample_inputs``): the primary input (token ids, pixels,
audio, features, embeddings, patches or a time series), its companions and every required input, at the
sizes of ``exporters.tiny.sizes``, with masks padded by ``exporters.padding``.
"""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

import torch

from exporters.padding import padded_mask, padding_side
from exporters.tiny.shrink import TinyModelError
from exporters.tiny.sizes import (
    AUDIO_SAMPLES,
    BATCH,
    CHOICES,
    IMAGE,
    PATCH,
    SEQUENCE,
    VOCAB,
    _ints,
    _sub_configs,
    _width,
)


def _vocab(config: Any) -> int:
    for candidate in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        if candidate is not None and isinstance(getattr(candidate, "vocab_size", None), int):
            return candidate.vocab_size
    return VOCAB


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def _image_size(config: Any) -> tuple[int, int]:
    size = getattr(_vision(config), "image_size", None) or _multi_level_detector_side(config) or IMAGE
    if isinstance(size, dict):
        size = size.get("height", IMAGE), size.get("width", IMAGE)
    if isinstance(size, int):
        return size, size
    return int(size[0]), int(size[-1])


def _multi_level_detector_side(config: Any) -> int | None:
    """An image side for a detector that adds feature levels below its backbone's last one, else None.

    Deformable DETR and (MM) Grounding DINO take ``num_feature_levels`` (4) levels from a backbone that gives
    three (``out_indices`` [2, 3, 4], the last at stride 32) and make each missing one with a stride-2 conv from
    the level above. On the 32 px default the last two levels are 1 x 1, ``input_proj_vision``'s GroupNorm(32,
    d_model) then normalises one pixel per group to its bias, and those tokens, constant across channels, come
    out of LayerNorm as float rounding that eager and every backend round differently (cause
    mm-grounding-dino-vision-encoder-mismatch). The side that keeps the smallest level at 2 x 2 is
    ``64 * 2 ** extra_levels`` (128 px for one extra level).
    """
    levels, backbone = getattr(config, "num_feature_levels", None), getattr(config, "backbone_config", None)
    taken = getattr(backbone, "out_indices", None) or getattr(backbone, "out_features", None)
    if not isinstance(levels, int) or not isinstance(taken, (list, tuple)) or levels <= len(taken):
        return None
    return 64 * 2 ** (levels - len(taken))


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


REGIONS = 4  # detected regions per image, for models fed a detector's region features


def _make(
    name: str, config: Any, batch: int, sequence: int, generator: torch.Generator, side: str = "right"
) -> torch.Tensor | None:
    vocab = _vocab(config)
    if name.endswith("input_ids"):  # input_ids, decoder_input_ids, qformer_input_ids
        return torch.randint(3, vocab, (batch, sequence), generator=generator)
    if name == "visual_feats":  # one feature vector per detected region, REGIONS of them
        return torch.randn(batch, REGIONS, config.visual_feat_dim, generator=generator)
    if name == "visual_pos":  # their normalised boxes
        return torch.rand(batch, REGIONS, config.visual_pos_dim, generator=generator)
    length = getattr(config, name.removesuffix("_inputs") + "_seq_len", None) if name.endswith("_inputs") else None
    if isinstance(length, int):  # tokenised prompts of a fixed length (OneFormer's task_inputs, task_seq_len 77)
        vocabs = [v for f, v in vars(config).items() if f.endswith("vocab_size") and isinstance(v, int)]
        return torch.randint(3, min([*vocabs, VOCAB]), (batch, length), generator=generator)
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


def _patch_side(config: Any) -> int:
    """Side of the square patch grid given to models that take images as patch sequences."""
    pool = getattr(config, "pooling_kernel_size", None) or getattr(config, "spatial_merge_size", None)
    return 2 * pool if isinstance(pool, int) else 4


def _patch_width(config: Any) -> int:
    patch = getattr(config, "patch_size", PATCH)
    patch = patch if isinstance(patch, int) else int(patch[0])
    channels = getattr(config, "num_channels", None) or getattr(config, "in_channels", 3)
    # (MuseGlimmer names its temporal patch size ``patch_temporal``)
    temporal = getattr(config, "temporal_patch_size", None) or getattr(config, "patch_temporal", None) or 1
    return channels * temporal * patch * patch


def _make_embeds(name: str, config: Any, batch: int, sequence: int, generator: torch.Generator) -> torch.Tensor | None:
    """Embedding-level inputs, for models that take no token ids, pixels or audio (sub-modules of a larger model)."""
    hidden = _width(config)
    # Perceiver, Q-Former queries, drafter noise blocks, encoders fed by another model's frames (Nemotron 3.5
    # Transcribe's word-timestamp head: ``main_input_name = "inputs_embeds"``, no token ids)
    if name in ("inputs", "query_embeds", "noise_embeds", "inputs_embeds"):
        return torch.randn(batch, sequence, hidden, generator=generator)
    if name == "latents":  # codec decoders (Mimi): channels first, one frame per step
        return torch.randn(batch, hidden, sequence, generator=generator)
    if name == "encoder_hidden_states" and isinstance(getattr(config, "encoder_hidden_size", None), int):
        return torch.randn(batch, sequence, config.encoder_hidden_size, generator=generator)
    if name == "context_hidden_states":  # speculative drafters: hidden states of several target-model layers
        layers = len(getattr(config, "target_layer_ids", None) or [0])
        return torch.randn(batch, sequence, hidden * layers, generator=generator)
    if name == "attention_mask":  # a drafter's keys are the context's then the block's: the mask spans both
        return padded_mask(batch, 2 * sequence, "left")
    return None


def _make_patches(name: str, config: Any, batch: int, generator: torch.Generator) -> torch.Tensor | None:
    """Images given as sequences of flattened patches, with their grid (position ids, masks, shapes)."""
    config = _vision(config)  # a parent (Siglip2Model) reads its patches with its vision tower's patch size
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
_EMBEDDING_PRIMARY = ("inputs", "query_embeds", "noise_embeds", "latents", "hidden_states", "inputs_embeds")
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
        if "context_hidden_states" in parameters and "attention_mask" in parameters:  # MuseGlimmer's drafter
            wanted.append("attention_mask")  # (left out, export builds a mask over the block's keys only)
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
    if "visual_feats" in parameters and isinstance(getattr(config, "visual_feat_dim", None), int):
        # Region features of a detector (LXMERT): optional in the signature, required by the forward
        # (```visual_feats` cannot be `None```), with their boxes.
        wanted += [p for p in ("visual_feats", "visual_pos") if p in parameters and p not in wanted]
    if "pixel_values" in wanted and "spatial_shapes" in parameters:
        # NaViT-style towers (Siglip2) read their images as patch sequences with shapes and a mask even where the
        # forward leaves them optional (a 4-d image there met a Linear patch embedding: ``mat1 and mat2 shapes``).
        wanted += [p for p in _PATCH_GRID if p in parameters and p not in wanted]
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


# Random inputs a forward draws itself when they are not given (ViTMAE's masking noise, UnivNet's noise
# sequence): eager would differ from itself and the graph would hold the draw.
_NOISE_INPUTS = ("noise", "noise_sequence")
_DRAWS = ("rand", "randn")


def noise_inputs(model: torch.nn.Module, inputs: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """``inputs`` plus the noise input the forward takes, drawn once here: its shape, dtype and distribution
    are those of the first ``torch.rand``/``torch.randn`` draw the forward makes without it, so no rule per
    model says what shape a model's noise has. Unchanged when the forward takes no noise input, draws
    nothing, or fails (its error shows at its own forward)."""
    parameters = inspect.signature(model.forward).parameters
    name = next((n for n in _NOISE_INPUTS if n in parameters and n not in inputs), None)
    if name is None:
        return inputs
    drawn = _first_draw(model, inputs)
    if drawn is None:
        return inputs
    draw, shape, dtype = drawn
    generator = torch.Generator().manual_seed(seed)
    return {**inputs, name: getattr(torch, draw)(shape, generator=generator, dtype=dtype)}


def noise_static_dims(inputs: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """The axes past the batch of a masking ``noise`` input, which a dynamic export must keep static.

    ViTMAE and Hiera sort ``noise`` (one value per patch or mask unit) into the indices they keep
    (``argsort`` then ``gather``): the tie between its length and the image is in the values, so torch.export
    cannot see it and under Dim.AUTO keeps the length as a symbol of its own, and any other length indexes out
    of bounds. ``noise_sequence`` (UnivNet: one value per spectrogram frame) is added to the frames, a tie
    torch.export does see, so it stays dynamic.
    """
    noise = inputs.get("noise")
    return {"noise": tuple(range(1, noise.dim()))} if isinstance(noise, torch.Tensor) and noise.dim() > 1 else {}


def _first_draw(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[str, torch.Size, torch.dtype] | None:
    originals = {name: getattr(torch, name) for name in _DRAWS}
    drawn: list[tuple[str, torch.Size, torch.dtype]] = []

    def recording(name: str) -> Any:
        def draw(*args: Any, **kwargs: Any) -> torch.Tensor:
            value = originals[name](*args, **kwargs)
            drawn.append((name, value.shape, value.dtype))
            return value

        return draw

    for name in _DRAWS:
        setattr(torch, name, recording(name))
    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # the model's own forward shows its error
        return None
    finally:
        for name, function in originals.items():
            setattr(torch, name, function)
    return drawn[0] if drawn else None
