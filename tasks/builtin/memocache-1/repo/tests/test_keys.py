from memocache import make_key


def test_kwargs_order_does_not_matter():
    assert make_key((1,), {"a": 1, "b": 2}) == make_key((1,), {"b": 2, "a": 1})


def test_positional_and_keyword_differ():
    assert make_key((1,), {}) != make_key((), {"x": 1})


def test_unhashable_arguments():
    key = make_key(([1, 2], {"k": {1, 2}}), {})
    assert hash(key) == hash(make_key(([1, 2], {"k": {2, 1}}), {}))


def test_typed():
    assert make_key((3,), {}) == make_key((3.0,), {})
    assert make_key((3,), {}, typed=True) != make_key((3.0,), {}, typed=True)
