"""kvstore: the evicting KV cache (Nexus Sampling and baselines) and the persistent session built on it.

The public API is re-exported here and imported on first use (PEP 562), so `import kvstore.errors` or
`import kvstore.defaults` does not pull in torch and transformers.

Parts: `cache/` (the evicting cache, its settings and one eviction step), `policies/` (one file per policy, with its
settings, and the selectors), `attention/` (the attention maths: torch references, Triton kernels and the dispatch
between them), `session/` (the persistent session: turns, rendering, saving), `profiles/` (memory profiles and their
calibration), `models/` (the registry, GGUF parts, tiny test models).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EvictingCache": "kvstore.cache.evicting",
    "make_cache": "kvstore.cache.evicting",
    "CacheConfig": "kvstore.cache.config",
    "KVStoreError": "kvstore.errors",
    "DEFAULT_MODEL": "kvstore.defaults",
    "ModelInfo": "kvstore.models.registry",
    "load_model": "kvstore.models.registry",
    "POLICIES": "kvstore.policies",
    "register_policy": "kvstore.cache.config",
    "cache_kwarg": "kvstore.cache.forwarding",
    "forward": "kvstore.cache.forwarding",
    "prefill": "kvstore.cache.forwarding",
    "Reply": "kvstore.session.turn_stats",
    "Session": "kvstore.session.session",
    "SessionConfig": "kvstore.session.config",
    "TurnStats": "kvstore.session.turn_stats",
    "export_state": "kvstore.cache.snapshot",
    "restore_cache": "kvstore.cache.snapshot",
}
__all__ = [
    "CacheConfig",
    "DEFAULT_MODEL",
    "EvictingCache",
    "KVStoreError",
    "ModelInfo",
    "POLICIES",
    "Reply",
    "Session",
    "SessionConfig",
    "TurnStats",
    "cache_kwarg",
    "export_state",
    "forward",
    "load_model",
    "make_cache",
    "prefill",
    "register_policy",
    "restore_cache",
]

if TYPE_CHECKING:
    from kvstore.cache.config import CacheConfig, register_policy
    from kvstore.cache.evicting import EvictingCache, make_cache
    from kvstore.cache.forwarding import cache_kwarg, forward, prefill
    from kvstore.cache.snapshot import export_state, restore_cache
    from kvstore.defaults import DEFAULT_MODEL
    from kvstore.errors import KVStoreError
    from kvstore.models.registry import ModelInfo, load_model
    from kvstore.policies import POLICIES
    from kvstore.session.config import SessionConfig
    from kvstore.session.session import Session
    from kvstore.session.turn_stats import Reply, TurnStats


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # resolved once; no export shares a submodule's name (tests/kvstore/test_exports.py)
    return value
