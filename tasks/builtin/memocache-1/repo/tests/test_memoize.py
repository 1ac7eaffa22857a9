from memocache import memoize


def test_results_are_cached():
    calls = []

    @memoize(maxsize=10)
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9 and square(3) == 9
    assert calls == [3]
    assert square.cache_info() == (1, 1, 1, 10)


def test_equivalent_calls_share_an_entry():
    calls = []

    @memoize()
    def load(user_id, include_groups=False):
        calls.append((user_id, include_groups))
        return {"id": user_id}

    load(42)
    load(user_id=42)
    load(42, False)
    assert calls == [(42, False)]


def test_bare_decorator():
    @memoize
    def f(x):
        return object()

    assert f(1) is f(1)


def test_ttl_with_clock():
    now = [0.0]

    @memoize(ttl=5, clock=lambda: now[0])
    def stamp(x):
        return now[0]

    assert stamp(1) == 0.0
    now[0] = 6.0
    assert stamp(1) == 6.0


def test_cache_clear():
    @memoize()
    def f(x):
        return object()

    first = f(1)
    f.cache_clear()
    assert f(1) is not first
    assert f.cache_info().hits == 0


def test_methods():
    class Repo:
        def __init__(self):
            self.calls = 0

        @memoize()
        def get(self, key):
            self.calls += 1
            return key.upper()

    repo = Repo()
    assert repo.get("a") == "A" and repo.get("a") == "A"
    assert repo.calls == 1


def test_invalidate_one_entry():
    data = {1: "a", 2: "b"}

    @memoize()
    def get(key):
        return data[key]

    assert get(1) == "a" and get(2) == "b"
    data[1] = "A"
    data[2] = "B"
    assert get.invalidate(1) is True
    assert get(1) == "A"
    assert get(2) == "b"
    assert get.invalidate(3) is False
