"""How a policy's settings dataclass meets the flat options users write (`make_cache(**options)`, `POLICY@key=value`
specs, a saved session's options): a field is set by the option of its name, or of the name `named` gives it, and
a wrapper's nested settings take their options from the same flat set; and what a policy reads of its cache's
config (`SharedSettings`)."""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any, Protocol


class SharedSettings(Protocol):
    """What a policy reads of its cache's config (kvstore.cache.config.CacheConfig, which names the policies through
    their registry): the forced set every policy shares and the policy's own settings. A Protocol, so the policies
    never import the cache's config back."""

    block: int  # tokens per key block
    sink: int | None  # attention-sink tokens always kept; None: the policy's default
    recent: int | float | None  # token policies: recent tokens always kept (float: share of the layer budget)
    recent_blocks: int  # block policies: most recent complete blocks always kept
    recent_share: float  # at least this share of the layer budget kept as recent tokens
    settings: Any  # the policy's own settings (its dataclass)


def named(option: str, default: Any) -> Any:
    """A settings field that users set as the flat option `option` (shorter inside its policy's settings, e.g.
    H2OSettings.normalize is the option `h2o_normalize`)."""
    return field(default=default, metadata={"option": option})


def nested() -> Any:
    """A settings field holding a wrapped policy's settings (Ada-KV's scorer): its options are the wrapper's too."""
    return field(default=None, metadata={"nested": True})


def settings_options(settings: Any) -> dict[str, Any]:
    """A policy's settings as flat options (what `take_settings` reads back), nested settings included."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        out |= settings_options(value) if f.metadata.get("nested") else {f.metadata.get("option", f.name): value}
    return out


def take_settings(settings_type: type, options: dict[str, Any], **given: Any) -> Any:
    """`settings_type` built from the flat options it declares, which are taken out of `options` (nested fields
    come as `given`)."""
    kwargs = dict(given)
    for f in fields(settings_type):
        name = f.metadata.get("option", f.name)
        if not f.metadata.get("nested") and name in options:
            kwargs[f.name] = options.pop(name)
    return settings_type(**kwargs)
