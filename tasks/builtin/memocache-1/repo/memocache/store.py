"""A bounded mapping that evicts the least recently used entry and expires old ones."""

import time
from collections import OrderedDict


class LRUStore:
    def __init__(self, maxsize=128, ttl=None, clock=time.monotonic):
        if maxsize is not None and maxsize <= 0:
            raise ValueError("maxsize must be positive or None")
        self.maxsize = maxsize
        self.ttl = ttl
        self.clock = clock
        self._data = OrderedDict()  # key -> (expires_at, value)
        self.evictions = 0

    def __len__(self):
        self._expire()
        return len(self._data)

    def __contains__(self, key):
        return self.get(key, _ABSENT) is not _ABSENT

    def get(self, key, default=None):
        item = self._data.get(key)
        if item is None:
            return default
        expires_at, value = item
        if expires_at is not None and self.clock() >= expires_at:
            del self._data[key]
            return default
        self._data.move_to_end(key)
        return value

    def set(self, key, value):
        expires_at = None if self.ttl is None else self.clock() + self.ttl
        self._data[key] = (expires_at, value)
        self._data.move_to_end(key)
        while self.maxsize is not None and len(self._data) > self.maxsize:
            self._data.popitem(last=False)
            self.evictions += 1

    def delete(self, key):
        """Remove one entry; returns whether it was present."""
        return self._data.pop(key, None) is not None

    def clear(self):
        self._data.clear()

    def _expire(self):
        if self.ttl is None:
            return
        now = self.clock()
        for key in [k for k, (exp, _) in self._data.items() if exp is not None and now >= exp]:
            del self._data[key]


_ABSENT = object()
