"""Initialisation fixes that keep a tiny random model's outputs of order one, so a comparison can fail.

A random model is not a trained one in ways that make a comparison against it prove nothing: eval-mode
BatchNorm at its initial statistics (mean 0, variance 1) passes through whatever a stack of small-std
convolutions leaves, which vanishes with depth (MobileNetV1: 2.6 at the stem, 6e-10 at the last layer);
a learned scale that the model initialises to zero (Zaya's key scale) zeroes what it multiplies; a router
initialised to zero ties every expert. A trained model has none of these. Each fix here is applied after
the model is built, on the sample it will be compared on, and touches only the modules it names.
"""

from __future__ import annotations

from typing import Any

import torch

# Learned scales that a model initialises to zero although they multiply activations (a trained value is
# not zero): set to one, the neutral scale. Matched on the parameter's own name, the last part of its path.
_ZERO_INIT_SCALES = ("temp",)  # Zaya: ZayaQKNorm.temp multiplies every key (modeling_zaya.py:267, 277, 664)
# The same, matched on the end of the name: the Perception Encoder family's contrastive heads scale their
# similarity logits by ``text_audio_logit_scale`` (``text_video_logit_scale``, ...), nn.Parameter(torch.zeros(1))
# (modeling_pe_audio.py:720, 778), so PeAudioModel's logits_audio_text was exactly its zero bias.
_ZERO_INIT_SCALE_SUFFIXES = ("_logit_scale",)


def fix_initialisation(model: torch.nn.Module, inputs: dict[str, Any], seed: int) -> None:
    """Every fix below, in order: parameters first, then the statistics measured through them."""
    _break_router_ties(model, seed)
    _open_zero_scales(model)
    calibrate_batch_norms(model, inputs)


def calibrate_batch_norms(model: torch.nn.Module, inputs: dict[str, Any]) -> int:
    """Scale every BatchNorm's running variance to the mean square of its own input on ``inputs``, over all its
    channels (about the running mean, which stays as initialised: 0), so that in eval mode each passes its
    input on at unit root-mean-square, as a trained network's statistics keep activations of order one on its
    data; returns how many were calibrated.

    One scale per layer, not per channel: the relative sizes of the channels stay those of the random
    weights (a variance-preserving init, as fan-in scaling would give), where a per-channel scale raises
    channels made mostly of rounding noise to unit size and the deep stack then amplifies float32 rounding
    (calibrated per channel, MobileNetV2's logits differed by 0.52 between float32 and float64 eager; per
    layer by 2.4e-6). No measured mean is subtracted, for the same reason: subtracting it from a channel
    whose spread is far below its mean cancels digits (ResNet's logits were off by 1e-3 that way).
    The statistics are measured in one eval-mode forward, each BatchNorm just before it runs (a forward
    pre-hook), so every layer sees its predecessors already calibrated and the next forward on the same
    inputs reproduces that one; a train-mode forward would store the unbiased batch variance while
    normalising by the biased one, a factor of 2 on a batch of 2 at 1x1 pixels that compounds (MobileNetV2's
    logits grew to 2.7e4). A module called twice keeps the statistics of its first call. When the forward
    raises, the statistics are reset and the model is left to fail at its own forward.
    """
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    norms = [m for m in norms if m.track_running_stats and m.running_mean is not None]
    if not norms:
        return 0
    done: set[int] = set()

    def measure(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if id(module) in done or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() < 2:
            return
        done.add(id(module))
        per_channel = args[0].transpose(0, 1).reshape(args[0].shape[1], -1).to(module.running_mean.dtype)
        module.running_var.fill_((per_channel - module.running_mean[:, None]).square().mean())

    handles = [m.register_forward_pre_hook(measure) for m in norms]
    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # the model's own forward shows its error; nothing half-calibrated is kept
        for module in norms:
            module.reset_running_stats()
        return 0
    finally:
        for handle in handles:
            handle.remove()
    return len(done)


def _open_zero_scales(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            own = name.rsplit(".", 1)[-1]
            if (own in _ZERO_INIT_SCALES or own.endswith(_ZERO_INIT_SCALE_SUFFIXES)) and not parameter.any():
                parameter.fill_(1.0)


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


# The config fields that set how large a random model's weights are drawn (normal std, or a factor on it).
INIT_SCALE_FIELDS = ("initializer_range", "initializer_factor", "init_std")


def init_scale_overrides(config: Any, scale: float) -> dict[str, float]:
    """Config overrides multiplying ``config``'s initialisation scales by ``scale`` (``--init-scale``).

    Why a user needs it: a random tiny model can be degenerate (the same token forever, a near-constant
    output), which validation reports ``inconclusive`` since a comparison against it could not fail; larger
    weights make its outputs vary (T5 needs its ``initializer_factor`` at 4). Fields the config lacks are
    left out.
    """
    return {name: getattr(config, name) * scale for name in INIT_SCALE_FIELDS
            if isinstance(getattr(config, name, None), (int, float))}
