"""The catalogue a sweep covers: every class of transformers' auto mappings (imports transformers)."""

from __future__ import annotations

from collections.abc import Mapping

from bot.sweep.tasks import collect_class_names


def enumerate_model_classes() -> list[str]:
    """Every model class named by a ``MODEL_*_MAPPING_NAMES`` auto mapping that ``transformers`` exports.

    Existence is checked with ``dir(transformers)``, which lists the lazy module's names without importing
    hundreds of modeling files (15 s); a class that is listed but cannot be imported shows up as a
    ``build-error`` record, which is the honest outcome for it.
    """
    import transformers
    from transformers.models.auto import modeling_auto

    mappings = [
        value
        for name, value in vars(modeling_auto).items()
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(value, Mapping)
    ]
    return sorted(collect_class_names(mappings) & set(dir(transformers)))




# The auto mappings whose classes a generation task exports (``sweep run --task``).
GENERATION_MAPPINGS = {
    "text-generation": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
    "text2text-generation": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "automatic-speech-recognition": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
}


def generation_classes(task: str) -> list[str]:
    """Every class with a generation head for ``task`` that ``transformers`` exports (see above for why
    ``dir``); one the tiny builder cannot build becomes a ``build-error`` record."""
    import transformers
    from transformers.models.auto import modeling_auto

    mappings = [getattr(modeling_auto, name) for name in GENERATION_MAPPINGS[task]]
    return sorted(collect_class_names(mappings) & set(dir(transformers)))
