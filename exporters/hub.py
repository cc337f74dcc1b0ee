"""Hugging Face Hub ids (``org/name``): the config through ``from_pretrained``, or one line saying why not.

The hub is reached through ``huggingface_hub``'s own cache (``HF_HUB_CACHE``), so a model downloaded
once exports offline. When it is not cached and the hub is offline (``HF_HUB_OFFLINE=1``) or unreachable,
the error says which, in one line, instead of transformers' paragraph.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import urllib.parse
from pathlib import Path
from typing import Any

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class HubUnavailableError(OSError):
    """A hub id whose config cannot be had: offline and not cached, unreachable, or no such repository."""


def is_hub_id(model: str) -> bool:
    """``org/name`` that is not a local path (``./x``, ``/x``, an existing directory)."""
    return bool(_HUB_ID.match(model)) and not Path(model).exists() and not model.startswith(".")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@functools.cache
def reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint accepts a TCP connection (behind a proxy: assumed yes).

    Checked once, up front: without it a network that is down costs huggingface_hub's five retries
    (about 25 s) per file before transformers falls back to the cache."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    from huggingface_hub import constants

    url = urllib.parse.urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def local_only() -> bool:
    """Read from the local cache only: offline by choice, or the hub cannot be reached."""
    return offline() or not reachable()


def load_config(repo_id: str) -> Any:
    """``AutoConfig.from_pretrained(repo_id)`` from the cache or the hub; ``HubUnavailableError`` in one line."""
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(repo_id, local_files_only=local_only())
    except OSError as error:
        raise HubUnavailableError(_why(repo_id, error)) from error
    except ValueError as error:  # an unknown model_type in the config
        raise HubUnavailableError(f"{repo_id}: {str(error).splitlines()[0]}") from error


def _why(repo_id: str, error: BaseException) -> str:
    text = " ".join(str(e) for e in _chain(error)).lower()
    if offline():
        return (f"{repo_id}: the hub is offline (HF_HUB_OFFLINE=1) and {repo_id} is not in the local cache; "
                "unset HF_HUB_OFFLINE, or pass a checkpoint directory")
    if not reachable() or any(word in text for word in ("couldn't connect", "connection", "timed out")):
        return (f"{repo_id}: the hub is unreachable (network down?) and {repo_id} is not in the local cache; "
                "pass a checkpoint directory, or retry online")
    if "not a valid model identifier" in text or "repository not found" in text or "404" in text:
        return f"{repo_id}: no such model on the hub (or it is private: log in with `hf auth login`)"
    return f"{repo_id}: {str(error).strip().splitlines()[0]}"


def _chain(error: BaseException) -> list[BaseException]:
    chain = [error]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
        if len(chain) > 20:
            break
    return chain
