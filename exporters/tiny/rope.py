"""Shrinking rules about rotary position embeddings: multimodal RoPE sections that must add up to the shrunk
rotary dimension, one RoPE per layer kind, and the RoPE base a sub-config reads from its parent.

Called from ``exporters.tiny.shrink``; each rule reads and writes one config in place.
"""

from __future__ import annotations

from typing import Any

from exporters.tiny.sizes import HEAD_DIM, _ints, _modeling_source, _strs, _sub_configs


def _rope_base_for_sub_configs(config: Any) -> None:
    """A sub-config whose model reads ``<name>.rope_theta`` from it but that no longer declares one (DBRX's
    attention config: its RoPE base moved to the parent's ``rope_parameters``, and ``DbrxModel(DbrxConfig())``
    fails with ``'DbrxAttentionConfig' object has no attribute 'rope_theta'``) gets the parent's base."""
    theta = (vars(config).get("rope_parameters") or {}).get("rope_theta")
    if not isinstance(theta, (int, float)):
        return
    source = None
    for name, sub in _sub_configs(config):
        if hasattr(sub, "rope_theta"):
            continue
        source = _modeling_source(config) if source is None else source
        if f"{name}.rope_theta" in source:
            sub.rope_theta = theta


_MROPE_DEFAULT = [16, 24, 24]  # the (t, h, w) split most multimodal-RoPE models fall back to


def _shrink_rope_sections(config: Any) -> None:
    """Multimodal RoPE sections (``mrope_section``) must add up to half the (shrunk) rotary dimension.

    Configs that declare ``mrope_section`` (``ignore_keys_at_rope_validation``) but leave it out of their
    defaults get one: their models fall back to a full-size split hard-coded in the modeling code.
    """
    uses_mrope = "mrope_section" in (getattr(type(config), "ignore_keys_at_rope_validation", None) or ())
    kinds = vars(config).get("layer_types")
    for value in _rope_dicts(config, kinds if isinstance(kinds, list) else []):
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


def _rope_dicts(config: Any, kinds: list[Any]) -> list[dict[str, Any]]:
    """The config's dict fields, and the per-layer-kind RoPE dicts nested in them (``{"full_attention": {...}}``)."""
    dicts = [v for v in vars(config).values() if isinstance(v, dict)]
    return dicts + [v for d in dicts for k, v in d.items() if k in kinds and isinstance(v, dict)]


def _rope_per_layer_kind(config: Any) -> None:
    """An empty ``rope_parameters`` dict in a config whose model reads one RoPE per layer kind gets a default
    RoPE for each kind of its ``layer_types``: CohereCompass' text config defaults to ``{}`` (its checkpoint
    sets them) and its rotary embedding reads ``rope_parameters[layer_type]`` (``KeyError: 'full_attention'``).
    Only where the modeling module reads that per-kind entry."""
    kinds = vars(config).get("layer_types")
    if vars(config).get("rope_parameters") != {} or not _strs(kinds) or not _reads_rope_per_kind(config):
        return
    theta = getattr(config, "default_theta", None) or 10000.0
    config.rope_parameters = {kind: {"rope_type": "default", "rope_theta": theta} for kind in dict.fromkeys(kinds)}


def _reads_rope_per_kind(config: Any) -> bool:
    return "rope_parameters[layer_type]" in _modeling_source(config)
