"""A cache as plain tensors + JSON-able metadata (for saving sessions), and back."""

from __future__ import annotations

from typing import Any

import torch

from kvstore.cache.capture import install
from kvstore.cache.config import CacheConfig, saved_by_older_version
from kvstore.cache.evicting import ARCHITECTURE_KEYS, EvictingCache, model_identity
from kvstore.cache.stats import LayerStats
from kvstore.errors import KVStoreError

STATE_VERSION = 1
_META = ("config", "identity", "budget_tokens", "protected", "replies", "layers")  # what export_state writes


def export_state(cache: EvictingCache) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Everything needed to continue exactly where the cache is: tensors (contiguous, on CPU) and metadata."""
    signals = cache.signals
    tensors: dict[str, torch.Tensor] = {"generator": cache.generator.get_state()}
    if signals.prior is not None:
        tensors["prior"] = _copy(signals.prior)
    cache.flush_observations()  # statistics still pending are applied, not saved
    layers = []
    for i, layer in enumerate(cache.layers):
        entries = {
            "keys": layer.keys,
            "values": layer.values,
            "positions": layer.positions,
            "valid": layer.valid,
            "window_q": layer.window_q,
            "events": layer.stats.events_tensor(),
        }
        entries |= {f"state.{k}": v for k, v in layer.state.items()}
        for name, t in entries.items():
            if t is not None and layer.is_initialized:
                tensors[f"layer{i}.{name}"] = _copy(t)
        layers.append(
            {
                "seen": layer.seen,
                "last_q_len": layer.last_q_len,
                "scaling": getattr(layer, "scaling", None),
                "initialized": bool(layer.is_initialized),
                "counters": layer.stats.counters(),
            }
        )
    meta = {
        "version": STATE_VERSION,
        "config": cache.config.to_dict(),
        "identity": cache.identity,
        "budget_tokens": cache.budget_tokens,
        "protected": signals.protected,
        "replies": signals.replies,
        "names": signals.names,
        "layers": layers,
        "prior_kind": signals.prior_kind,
    }
    return tensors, meta


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy: the layer's buffers are views written in place (kvstore.cache.buffers), so a saved
    tensor never shares their memory."""
    return t.detach().to("cpu", copy=True).contiguous()


def restore_cache(model: torch.nn.Module, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> EvictingCache:
    """Rebuild the cache saved by `export_state` on `model` (which must have the same architecture and shapes); a
    cache saved by an older version is refused with one line."""
    if meta.get("version") != STATE_VERSION:
        raise KVStoreError(f"cache state version {meta.get('version')!r} is not supported (expected {STATE_VERSION})")
    if any(key not in meta for key in _META):
        raise saved_by_older_version(f"no {', '.join(key for key in _META if key not in meta)} in its cache state")
    ident = model_identity(model)
    for key in ARCHITECTURE_KEYS:
        if ident[key] != meta["identity"].get(key):
            raise KVStoreError(
                f"saved cache is for a model with {key}={meta['identity'].get(key)!r}, "
                f"this model has {key}={ident[key]!r}"
            )
    install(model)
    cache = EvictingCache(CacheConfig.from_saved(meta["config"]), ident)
    _check_policy_state(cache, tensors)
    if meta["budget_tokens"] is not None and cache.budget_tokens is None:
        cache._set_budget(meta["budget_tokens"])
    cache.generator.set_state(tensors["generator"])
    cache.signals.protected = [(int(a), int(b)) for a, b in meta["protected"]]
    cache.signals.replies = [(int(a), int(b)) for a, b in meta["replies"]]
    cache.signals.names = [(int(a), int(b)) for a, b in meta.get("names", [])]  # older saves found none
    if "prior" in tensors:
        cache.signals.set_prior(tensors["prior"], meta.get("prior_kind", "profile"))  # older saves: a profile's
    device = next(model.parameters()).device
    for i, (layer, info) in enumerate(zip(cache.layers, meta["layers"], strict=True)):
        _restore_layer(
            layer, info, {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"layer{i}.")}, device
        )
    return cache


def _check_policy_state(cache: EvictingCache, tensors: dict[str, torch.Tensor]) -> None:
    """The saved per-token state must be what the policy keeps today: a policy whose definition changed since the
    session was saved (e.g. a new default memory under the same name) cannot continue it exactly."""
    saved = {k.split(".", 2)[2] for k in tensors if k.startswith("layer0.state.")}
    if "layer0.keys" in tensors and saved != set(cache.policy.token_state):
        raise saved_by_older_version(
            f"policy {cache.config.policy!r} with per-token state {sorted(saved) or 'none'}, "
            f"where it now keeps {sorted(cache.policy.token_state) or 'none'}"
        )


def _restore_layer(layer, info: dict[str, Any], t: dict[str, torch.Tensor], device: torch.device) -> None:
    layer.seen, layer.last_q_len, layer.scaling = info["seen"], info["last_q_len"], info["scaling"]
    layer.stats = LayerStats.restore(info["counters"], t.get("events", torch.zeros(0, 2, dtype=torch.int64)))
    if not info["initialized"]:
        return
    layer.device = device
    layer.store.limit = layer.owner.decode_limit(layer.layer_idx)  # the capacity decoding needs, allocated once
    layer.keys, layer.values = t["keys"].to(device), t["values"].to(device)
    layer.positions = t["positions"].to(device)
    layer.valid = t["valid"].to(device) if "valid" in t else None
    layer.window_q = t["window_q"].to(device) if "window_q" in t else None
    layer.state = {k[len("state.") :]: v.to(device) for k, v in t.items() if k.startswith("state.")}
    layer.is_initialized = True
