"""memocache: in-process memoization with LRU bounds, TTLs and invalidation."""

from memocache.decorator import CacheInfo, memoize
from memocache.keys import make_key
from memocache.store import LRUStore

__all__ = ["CacheInfo", "LRUStore", "make_key", "memoize"]
__version__ = "0.6.0"
