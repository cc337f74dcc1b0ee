"""A checkpoint's tokenizer, processor and feature extractor, saved in its bundle so that the bundle is complete.

A bundle of a checkpoint runs on token ids; the text → ids step is the checkpoint's tokenizer (its image or
audio processor for other inputs). Without it in the bundle, a user who copied the bundle elsewhere, or
deleted the checkpoint, has the model and no way to feed it text. Each preprocessor the checkpoint holds is
loaded the way a user loads it (``Auto*.from_pretrained``, local files only) and written with its own
``save_pretrained`` into the bundle, so ``exporters.load(dir).tokenizer`` and ``exportbot generate DIR --prompt
"text"`` need nothing outside the directory. The checkpoint is the one the model was loaded from
(``config._name_or_path``, which ``from_pretrained`` sets): a directory, or a hub id in the local cache. A
tiny random model has none, and its bundle keeps working on token ids.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any

__all__ = ["PREPROCESSORS", "checkpoint_of", "load_preprocessor", "save_preprocessors"]

# kind → (transformers auto class, the file its save_pretrained writes that names it in the manifest's ``files``)
PREPROCESSORS: dict[str, tuple[str, str]] = {
    "tokenizer": ("AutoTokenizer", "tokenizer_config.json"),
    "feature_extractor": ("AutoFeatureExtractor", "preprocessor_config.json"),
    "image_processor": ("AutoImageProcessor", "preprocessor_config.json"),
    "processor": ("AutoProcessor", "processor_config.json"),
}


def checkpoint_of(model: Any) -> str | None:
    """The checkpoint ``model`` was loaded from: a local directory, or a hub id; None for a model built from a
    config class (a tiny model: ``_name_or_path`` is empty)."""
    from exporters import hub

    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if not name:
        return None
    return name if Path(name).is_dir() or hub.is_hub_id(name) else None


def load_preprocessor(source: str | Path, kind: str) -> Any | None:
    """``kind`` of the checkpoint or bundle at ``source`` (local files only), or None when it has none. A
    processor counts only when it is one (``AutoProcessor`` hands back a bare tokenizer for a text model)."""
    import transformers

    auto_name, _ = PREPROCESSORS[kind]
    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # a checkpoint without this kind makes transformers explain at length
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            loaded = getattr(transformers, auto_name).from_pretrained(str(source), local_files_only=True)
    except Exception:  # not there (OSError, ValueError, KeyError: each auto class says it its own way)
        return None
    finally:
        quiet.setLevel(level)
    if kind == "processor" and not isinstance(loaded, transformers.ProcessorMixin):
        return None
    return loaded


def save_preprocessors(model: Any, directory: Path) -> dict[str, str]:
    """Save every preprocessor of ``model``'s checkpoint into ``directory``; ``{kind: file}`` of those saved."""
    source = checkpoint_of(model)
    if source is None:
        return {}
    files: dict[str, str] = {}
    for kind, (_, file) in PREPROCESSORS.items():
        preprocessor = load_preprocessor(source, kind)
        if preprocessor is not None:
            preprocessor.save_pretrained(directory)
            files[kind] = file
    return files
