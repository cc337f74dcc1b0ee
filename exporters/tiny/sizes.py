"""The sizes every tiny model and sample share, the tables of config fields shrunk to them, and the
small readers of a config (its width, its sub-configs, its modeling source) the shrinking rules use.

Data only: ``exporters.tiny.shrink`` applies the tables, ``exporters.tiny.layers`` and ``exporters.tiny.rope``
hold the rules about per-layer stacks and rotary embeddings.
"""

from __future__ import annotations

from typing import Any

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
    "num_encoder_layers",  # ProphetNet (its num_hidden_layers is a read-only alias of it)
)
_INTERMEDIATE_FIELDS = (
    "intermediate_size", "hidden_dim", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
    "moe_intermediate_size", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
    "moe_hidden_size",  # MuseSpark's experts run at their own width (4,096), projected from and back to hidden
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
    # Qwen4-Exp's token indexer (one-off fields): its default layer_types hold "indexed_attention" layers, which
    # need all five; one key head, as its validator requires, and a budget of 2 blocks of 2 tokens in 8.
    "indexer_n_heads": KV_HEADS, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 4,
    "indexer_compress_ratio": 2,
}
# Optional fields left ``None`` that some model uses without testing for ``None``: filled only where its modeling
# module never does (DBRX clamps q/k/v to +-clip_qkv: ``torch.clamp: At least one of 'min' or 'max' must not be
# None``; its checkpoints use 8); MPT and OLMo test ``if ...clip_qkv`` first and keep their unclamped default.
_UNGUARDED_NONE_FILL = {"clip_qkv": 8.0}
_FIXED: dict[str, Any] = {
    "max_position_embeddings": lambda old: min(old, 128) if isinstance(old, int) else old,
    "max_source_positions": lambda old: min(old, 16) if isinstance(old, int) else old,
    "max_target_positions": lambda old: min(old, 64) if isinstance(old, int) else old,
    "vocab_size": lambda old: min(old, VOCAB) if isinstance(old, int) else old,
    # Gemma 3n / 4 per-layer embeddings read the same token ids: 262,144 rows were 1.6 GB of a "tiny" model.
    "vocab_size_per_layer_input": lambda old: min(old, VOCAB) if isinstance(old, int) else old,
    # The PP-OCR recognisers' CTC character set: a softmax over 18,385 characters gives every probability about
    # 5e-5, below atol 1e-4, so no comparison of the output could fail (inconclusive: "eager output is near zero").
    "head_out_channels": lambda old: min(old, VOCAB) if isinstance(old, int) else old,
    "num_labels": lambda old: 3,
    "num_mel_bins": lambda old: 16 if isinstance(old, int) else old,
    "initializer_range": lambda old: 0.1 if isinstance(old, float) else old,
    "init_std": lambda old: 0.1 if isinstance(old, float) else old,  # the same std under its other name (Bart, PatchTSMixer)
    "n_group": lambda old: 1 if isinstance(old, int) else old,
    "num_expert_group": lambda old: 1 if isinstance(old, int) else old,  # n_group stored under its alias target
    "topk_group": lambda old: 1 if isinstance(old, int) else old,
    "n_shared_experts": lambda old: min(old, 1) if isinstance(old, int) else old,
    "num_latents": lambda old: min(old, 16) if isinstance(old, int) else old,  # Perceiver latent array
    # Detection queries pick the top-k of the encoder's anchors, of which a 32-pixel image has a few dozen.
    "num_queries": lambda old: min(old, 10) if isinstance(old, int) else old,
    "context_length": lambda old: min(old, 32) if isinstance(old, int) else old,  # time series (TimesFm: 16,384)
    # X-vector heads: a TDNN stack of 512-1,500 channels under the tiny initialiser_range of 0.1 grew about 3x per
    # layer (fan-in 2,560) to 1,590 at the logits, where float32 rounding alone misses the tolerance.
    "tdnn_dim": lambda old: type(old)(min(v, INTERMEDIATE) for v in old) if _ints(old) else old,
    "xvector_output_dim": lambda old: min(old, HIDDEN) if isinstance(old, int) else old,
}
MAX_LAYERS = 8  # hybrid stacks keep the shortest prefix holding every layer kind, up to this many layers


def _guarded(name: str, source: str) -> bool:
    import re

    return re.search(rf"if [\w.]*\b{name}(?: is not None)?:", source) is not None


def _ints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, int) for v in value)


def _sub_configs(config: Any) -> list[tuple[str, Any]]:
    from transformers import PretrainedConfig

    return [(name, value) for name, value in vars(config).items() if isinstance(value, PretrainedConfig)]


def _modeling_source(config: Any) -> str:
    """The source of the modeling module next to ``config``'s configuration module ("" when there is none): what
    a rule about the model's use of a config field reads, since the config alone does not say."""
    import importlib.util

    module = type(config).__module__
    if ".configuration_" not in module:
        return ""
    try:
        spec = importlib.util.find_spec(module.replace(".configuration_", ".modeling_"))
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    with open(spec.origin, encoding="utf-8") as source:
        return source.read()


def _strs(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(isinstance(v, str) for v in value)


def _width(config: Any) -> int:
    return _own_width(config) or HIDDEN


def _own_width(config: Any) -> int | None:
    return next((getattr(config, f) for f in _HIDDEN_FIELDS if isinstance(getattr(config, f, None), int)), None)
