from memocache import LRUStore


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_lru_eviction():
    store = LRUStore(maxsize=2)
    store.set("a", 1)
    store.set("b", 2)
    store.get("a")
    store.set("c", 3)
    assert "b" not in store
    assert store.get("a") == 1 and store.get("c") == 3
    assert store.evictions == 1


def test_ttl_expiry():
    clock = FakeClock()
    store = LRUStore(maxsize=None, ttl=10, clock=clock)
    store.set("a", 1)
    clock.now = 9.9
    assert store.get("a") == 1
    clock.now = 10
    assert store.get("a") is None
    assert len(store) == 0


def test_delete():
    store = LRUStore()
    store.set("a", 1)
    assert store.delete("a") is True
    assert store.delete("a") is False
