"""kvstore: the evicting KV cache (Nexus Sampling and baselines) and the persistent session built on it.

The public API is re-exported here and imported on first use (PEP 562), so `import kvstore.errors` or
`import kvstore.models` does not pull in torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EvictingCache": "kvstore.cache",
    "make_cache": "kvstore.cache",
    "CacheConfig": "kvstore.config",
    "KVStoreError": "kvstore.errors",
    "DEFAULT_MODEL": "kvstore.defaults",
    "ModelInfo": "kvstore.models",
    "load_model": "kvstore.models",
    "POLICIES": "kvstore.policies",
    "cache_kwarg": "kvstore.forwarding",
    "forward": "kvstore.forwarding",
    "prefill": "kvstore.forwarding",
    "Reply": "kvstore.turn_stats",
    "Session": "kvstore.session",
    "SessionConfig": "kvstore.session_config",
    "TurnStats": "kvstore.turn_stats",
    "export_state": "kvstore.state",
    "restore_cache": "kvstore.state",
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
    "restore_cache",
]

if TYPE_CHECKING:
    from kvstore.cache import EvictingCache, make_cache
    from kvstore.config import CacheConfig
    from kvstore.defaults import DEFAULT_MODEL
    from kvstore.errors import KVStoreError
    from kvstore.forwarding import cache_kwarg, forward, prefill
    from kvstore.models import ModelInfo, load_model
    from kvstore.policies import POLICIES
    from kvstore.session import Session
    from kvstore.session_config import SessionConfig
    from kvstore.state import export_state, restore_cache
    from kvstore.turn_stats import Reply, TurnStats


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # resolved once; no export shares a submodule's name (tests/kvstore/test_exports.py)
    return value
