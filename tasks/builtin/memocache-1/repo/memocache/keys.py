"""Cache keys: hashable, order-independent for keyword arguments."""

_KWARGS_MARK = object()


class _HashedKey(tuple):
    """A tuple that caches its hash (keys are hashed on every lookup)."""

    __slots__ = ()

    def __new__(cls, items):
        self = super().__new__(cls, items)
        return self

    def __hash__(self):
        return tuple.__hash__(self)


def _freeze(value):
    """Make common unhashable argument types usable in a key."""
    if isinstance(value, dict):
        return ("__dict__",) + tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_freeze(v) for v in value)
    if isinstance(value, set):
        return ("__set__",) + tuple(sorted(_freeze(v) for v in value))
    return value


def make_key(args, kwargs, typed=False):
    """A key for positional `args` and keyword `kwargs`.

    With typed=True, 3 and 3.0 give different keys.
    """
    key = tuple(_freeze(a) for a in args)
    if kwargs:
        key += (_KWARGS_MARK,) + tuple(sorted((k, _freeze(v)) for k, v in kwargs.items()))
    if typed:
        key += tuple(type(a) for a in args)
        key += tuple(type(v) for _, v in sorted(kwargs.items()))
    return _HashedKey(key)
