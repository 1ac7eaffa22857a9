"""The @memoize decorator."""

import functools
import inspect
import threading
from collections import namedtuple

from memocache.keys import make_key
from memocache.store import LRUStore

CacheInfo = namedtuple("CacheInfo", "hits misses size maxsize")
_MISS = object()


class _Memoized:
    def __init__(self, func, maxsize, ttl, typed, clock):
        functools.update_wrapper(self, func)
        self.func = func
        self.typed = typed
        self.store = LRUStore(maxsize=maxsize, ttl=ttl, clock=clock)
        self.hits = self.misses = 0
        self._lock = threading.RLock()
        try:
            self._signature = inspect.signature(func)
        except (TypeError, ValueError):  # some builtins have no signature
            self._signature = None

    def _key_for(self, args, kwargs):
        """Bind the call to the signature so that equivalent calls share a key."""
        if self._signature is not None:
            try:
                bound = self._signature.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                bound.apply_defaults()
                args, kwargs = bound.args, bound.kwargs
        return make_key(args, kwargs, self.typed)

    def __call__(self, *args, **kwargs):
        key = self._key_for(args, kwargs)
        with self._lock:
            value = self.store.get(key, _MISS)
            if value is not _MISS:
                self.hits += 1
                return value
            self.misses += 1
        value = self.func(*args, **kwargs)
        with self._lock:
            self.store.set(key, value)
        return value

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def invalidate(self, *args, **kwargs):
        """Forget the cached result of one call; returns whether there was one."""
        with self._lock:
            return self.store.delete(make_key(args, kwargs, self.typed))

    def cache_clear(self):
        with self._lock:
            self.store.clear()
            self.hits = self.misses = 0

    def cache_info(self):
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self.store), self.store.maxsize)


def memoize(maxsize=128, ttl=None, typed=False, clock=None):
    """Cache results of the decorated function.

    maxsize: entries kept (least recently used evicted first; None = unbounded).
    ttl: seconds an entry stays valid (None = forever).
    typed: cache 3 and 3.0 separately.
    """
    import time

    def decorate(func):
        return _Memoized(func, maxsize, ttl, typed, clock or time.monotonic)

    if callable(maxsize) and ttl is None and not typed and clock is None:
        func, maxsize = maxsize, 128
        return decorate(func)
    return decorate
