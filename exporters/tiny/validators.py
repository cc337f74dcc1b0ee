"""Making a shrunk config pass its own validator again (``config.validate()``, strict dataclasses' validators).

Shrinking sets each size field by its own rule; a config's ``validate_architecture`` may require relations
between them (a sub-config's output width equal to the text width, key-value heads equal to the query heads,
an image size divisible by the windows). Its constructor then rejects the shrunk fields, ``_rebuild`` keeps the
in-place config without re-deriving its ``__post_init__`` fields, and ``save_pretrained`` fails on the invalid
config. The fixes here are driven by the validator's own message: only the fields it names are changed, only to
values it then accepts, and every change is undone when the config still does not validate.
Called from ``exporters.tiny.shrink.shrink_config`` at every level of the config tree.
"""

from __future__ import annotations

import re
from typing import Any

from exporters.tiny.sizes import _own_width, _sub_configs

_TIE_RATIOS = (1, 2, 4, 8)
_MAX_TIES = 8


def retie(config: Any, fields: dict[str, dict[str, int]], widths: dict[str, int]) -> bool:
    """Re-establish cross-config sizes that the config's own validator requires and shrinking broke, one at a
    time, as the validator names them (``adaptor_config.intermediate_size`` must equal ``text_config.hidden_size
    // 4``, ``vision_config.out_hidden_size`` the text width, ``flow_head_config.condition_dim`` the parent's):
    a named sub-config field whose full-size value was another config's full-size width (divided by 1, 2, 4 or
    8) becomes that config's shrunk width divided alike. True when something was re-tied and the config now
    validates; otherwise every change is undone and the validator's error shows at the build."""
    if not callable(getattr(config, "validate", None)):
        return False
    subs = dict(_sub_configs(config))
    now = {"": _own_width(config), **{n: _own_width(s) for n, s in subs.items()}}
    undo: list[tuple[Any, str, Any]] = []
    for _ in range(_MAX_TIES):
        message = _invalid(config)
        if message is None:
            return bool(undo)
        tie = _tie_one(config, subs, fields, widths, now, message)
        if tie is None:
            break
        undo.append(tie)
    for sub, field, value in reversed(undo):
        setattr(sub, field, value)
    return False


def _tie_one(
    config: Any, subs: dict[str, Any], fields: dict[str, dict[str, int]], widths: dict[str, int],
    now: dict[str, int | None], message: str,
) -> tuple[Any, str, Any] | None:
    """Tie the first field the validator's ``message`` names that some tie clears; (sub, field, old value).
    A message that names no field (Dots3Note: ``vision adapter output width must match the text hidden size``)
    gets the fields shrinking left at their full-size value tried instead, a tie kept if that error is then gone
    (``vision_config.adapter_out_dim`` 5,120, the text width, becomes the shrunk text width); ``retie`` undoes
    every tie unless the config ends up valid."""
    for by_name in (True, False):
        for name, sub in subs.items():
            for field, old in fields.get(name, {}).items():
                named = f"{name}.{field}"
                if (named not in message) if by_name else (named in message or vars(sub)[field] != old):
                    continue
                before = vars(sub)[field]
                for value in _tied_values(old, name, widths, now):
                    setattr(sub, field, value)
                    after = _invalid(config)
                    if after is None or (named not in after if by_name else after != message):
                        return sub, field, before
                setattr(sub, field, before)
    return None


def _tied_values(old: int, owner: str, widths: dict[str, int], now: dict[str, int | None]) -> list[int]:
    values = []
    for source, width in widths.items():
        shrunk = now.get(source)
        ratio = next((k for k in _TIE_RATIOS if width % k == 0 and old == width // k), None)
        if source != owner and shrunk and ratio is not None and shrunk // ratio > 0:
            values.append(shrunk // ratio)
    return values


def _invalid(config: Any) -> str | None:
    try:
        config.validate()
    except Exception as error:  # the validator's message names the fields it wants tied
        return str(error)
    return None


# A field as a validator's message names it: ``num_windows``, ``text_config.hidden_size``, ``config.patch_size``.
_FIELD_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def satisfy_validator(config: Any, before: dict[str, Any], full_sizes: dict[str, dict[str, int]]) -> bool:
    """Change one integer field the validator's message names (of the config, or ``sub.field`` of a sub-config)
    to the first value that makes the config validate: another named field's value (``num_key_value_heads``
    must equal ``num_attention_heads``: ESMC), the field halved (``mamba_n_heads`` must divide ``mamba_expand *
    hidden_size``: Bamba), or doubled up to its full-size value (``image_size / num_windows`` a multiple of
    ``sqrt(num_windows)``: LW-DETR's 32 pixels and 16 windows). ``before`` and ``full_sizes`` hold the full-size
    fields of the config and of its sub-configs. True when the config now validates; otherwise nothing changed."""
    message = _invalid(config)
    if message is None:
        return False
    named = _named_int_fields(config, message)
    values = [vars(owner)[field] for owner, field, _ in named]
    for owner, field, path in named:
        current = vars(owner)[field]
        full = (before if "." not in path else full_sizes.get(path.split(".")[0], {})).get(path.split(".")[-1])
        for value in _candidates(current, full if type(full) is int else None, values):
            setattr(owner, field, value)
            if _invalid(config) is None:
                return True
        setattr(owner, field, current)
    return False


def _named_int_fields(config: Any, message: str) -> list[tuple[Any, str, str]]:
    """(owner config, field, path) of every integer field the message names, in the order it names them."""
    named: list[tuple[Any, str, str]] = []
    for match in _FIELD_NAME.findall(message):
        path = match.removeprefix("config.")
        *subs, field = path.split(".")
        owner = config
        for sub in subs:
            owner = dict(_sub_configs(owner)).get(sub)
            if owner is None:
                break
        if owner is not None and type(vars(owner).get(field)) is int \
                and not any(o is owner and f == field for o, f, _ in named):
            named.append((owner, field, path))
    return named


def _candidates(current: int, full: int | None, others: list[int]) -> list[int]:
    """Other named fields' values, then ``current`` halved down to 1, then doubled up to ``full``."""
    halved = [current >> k for k in range(1, current.bit_length())]
    doubled = [current << k for k in range(1, 12) if full is not None and current << k <= full]
    return [v for v in dict.fromkeys([*others, *halved, *doubled]) if v > 0 and v != current]
