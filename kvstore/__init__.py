"""kvstore: the evicting KV cache (Nexus Sampling and baselines) and the persistent session built on it."""

from kvstore.cache import EvictingCache, make_cache
from kvstore.config import CacheConfig
from kvstore.errors import KVStoreError
from kvstore.models import DEFAULT_MODEL, ModelInfo, load_model
from kvstore.policies import POLICIES
from kvstore.prefill import cache_kwarg, forward, prefill
from kvstore.session import Reply, Session, SessionConfig, TurnStats
from kvstore.state import export_state, restore_cache

__all__ = [
    "POLICIES",
    "CacheConfig",
    "EvictingCache",
    "KVStoreError",
    "cache_kwarg",
    "forward",
    "make_cache",
    "prefill",
    "export_state",
    "restore_cache",
    "DEFAULT_MODEL",
    "ModelInfo",
    "load_model",
    "Reply",
    "Session",
    "SessionConfig",
    "TurnStats",
]
