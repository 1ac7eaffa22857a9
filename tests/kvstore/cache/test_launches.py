"""What a decode step costs in tensor operations, counted on the CPU. On a GPU each operation that is not a view is a
kernel launch, and an eager decode step of a large model is bound by its launches, not by the bytes it reads: an
evicting policy's steady step (no eviction, no batch of statistics due) must cost about what the full cache's does.
Also the static store's values written in place (kvstore.cache.buffers: `filled` names) against the concatenating
store, through every kind of change."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
import torch
from tinymodels import random_ids, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

import kvstore
from kvstore.cache.buffers import BufferStore, ConcatStore

VIEWS = {"view", "_unsafe_view", "slice", "select", "expand", "unsqueeze", "squeeze", "reshape", "transpose", "t",
         "permute", "as_strided", "alias", "detach", "unbind", "split", "narrow"}  # fmt: skip


class CountOps(TorchDispatchMode):
    """Counts the tensor operations dispatched inside it that are not views (on a GPU: kernel launches)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in VIEWS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def steady_ops(policy: str, budget: float | None, layers: int) -> float:
    """The median operations of a decode step per layer, over 40 steps after a prefill of 600 tokens."""
    model = tiny_model(layers=layers)
    cache = kvstore.make_cache(model, policy, budget, seed=0)
    token = kvstore.prefill(model, cache, random_ids(600)).argmax(-1).view(1, 1)
    counts = []
    for _ in range(40):
        with CountOps() as count:
            logits = kvstore.forward(model, cache, token)
        token = logits[:, -1].argmax(-1).view(1, 1)
        counts.append(sum(count.ops.values()))
    return statistics.median(counts) / layers


@pytest.mark.parametrize("policy", ["nexus-agent", "h2o"])
def test_an_evicting_decode_step_costs_about_what_the_full_caches_does(policy: str) -> None:
    full = steady_ops("full", None, layers=4)
    evicting = steady_ops(policy, 0.25, layers=4)
    # the mass of each held key from the attention pass (its average over the query group) is the one extra;
    # the new token's position, fresh policy state and head mask are written in place, not made and copied
    assert evicting - full <= 2, f"{policy}: {evicting:.1f} operations per layer and decode step, full {full:.1f}"


def _both(ops) -> tuple[BufferStore, ConcatStore]:
    stores = BufferStore(), ConcatStore()
    for store in stores:
        store.limit = 40
        ops(store)
    return stores


def _same(static: BufferStore, eager: ConcatStore) -> None:
    assert len(static) == len(eager)
    assert static.names() == eager.names()
    for name in eager.names():
        assert torch.equal(static.get(name), eager.get(name)), name


def test_filled_values_read_back_as_written_through_appends_keeps_sets_and_growth() -> None:
    g = torch.Generator().manual_seed(0)
    stores = _both(lambda s: None)
    seen = 0
    for step in range(300):
        q = 5 if step % 37 == 0 else 1  # mostly decode steps, now and then a chunk
        fresh = {"keys": torch.randn(1, 2, q, 4, generator=g)}
        filled = {"positions": (seen, torch.long), "state.acc": (0.0, torch.float32), "valid": (True, torch.bool)}
        for store in stores:
            store.append(fresh, filled)
        seen += q
        _same(*stores)
        for store in stores:  # the policy adds to the state of what it holds, the new token's included
            store.get("state.acc").add_(1.0)
        if len(stores[1]) > 24:  # evict down to 12: random kept tokens, per head
            keep = torch.rand(1, 2, len(stores[1]), generator=g).argsort(-1)[..., :12].sort(-1).values
            for store in stores:
                store.keep(keep)
            _same(*stores)
        if step % 50 == 49:  # a restore (or a policy) replaces a filled name's held tokens
            acc = torch.full((1, 2, len(stores[1])), 7.0)
            for store in stores:
                store.set("state.acc", acc)
    _same(*stores)
    static = stores[0]
    for name in ("state.acc", "valid", "positions"):  # nothing past the held tokens but zeros
        assert not static.tensors[name][:, :, len(static) :].any(), name
    assert static.get("state.acc").min() >= 1.0  # every held token's state was zero when it came, then added to
