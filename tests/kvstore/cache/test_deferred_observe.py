"""Decoded tokens' attention statistics are gathered `observe_batch` tokens at a time (EvictingLayer.
flush_observations): the same per-token state, the same kept tokens and the same saved state as observing every
decoded token alone, in fewer calls. This is the path where the decode attention does not give the statistics itself
(the eager engine here; on a GPU without triton): the static engine's CPU decode step observes what its own pass
computed, every token (tests/kvstore/attention/test_prefill_attention.py)."""

from __future__ import annotations

import pytest
import torch
from sessionlib import tiny_chat_model

import kvstore
from kvstore.cache.snapshot import export_state
from kvstore.errors import KVStoreError


def _decoded(policy: str, observe_batch: int, steps: int, budget: int = 160, reply: bool = True):
    """Prefill 300 tokens, then decode `steps` tokens one at a time (as the agent's reply when `reply`); the cache
    and how many times the policy observed."""
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, policy, budget=budget, block=16, observe_batch=observe_batch, engine="eager")
    g = torch.Generator().manual_seed(3)
    kvstore.prefill(model, cache, torch.randint(0, 1000, (1, 300), generator=g), chunk_size=100)
    calls = []
    observe = cache.policy.observe
    cache.policy.observe = lambda ctx, q: calls.append(q.shape[-2]) or observe(ctx, q)
    if reply:
        cache.signals.reply_from = cache.get_seq_length()
    for tok in torch.randint(0, 1000, (steps,), generator=g).tolist():
        kvstore.forward(model, cache, torch.tensor([[tok]]))
    return cache, calls


@pytest.mark.parametrize("policy", ["nexus-agent", "h2o"])
def test_batched_statistics_keep_what_single_ones_keep(policy: str) -> None:
    alone, alone_calls = _decoded(policy, 1, 100)
    batched, batched_calls = _decoded(policy, 32, 100)
    layers = len(alone.layers)
    assert alone_calls == [1] * 100 * layers  # one call per layer per decoded token
    assert len(batched_calls) < 100 * layers / 8
    assert sum(batched_calls) <= 100 * layers
    batched.flush_observations()
    for a, b in zip(alone.layers, batched.layers, strict=True):
        assert a.stats.eviction_steps == b.stats.eviction_steps > 0  # decode evicted along the way
        assert torch.equal(a.positions, b.positions)  # the same tokens kept by every kv head
        for name in a.state:
            torch.testing.assert_close(a.state[name], b.state[name], atol=1e-5, rtol=1e-4)


def test_pending_queries_wait_for_the_batch_or_the_next_chunk() -> None:
    cache, calls = _decoded("nexus-agent", 32, 40, budget=4096)  # no eviction: only the batch size flushes
    layers = len(cache.layers)
    assert calls == [32] * layers  # one call per layer for the first 32 tokens
    assert sum(q.shape[-2] for q in cache.layers[0].pending_q) == 8
    model = tiny_chat_model("qwen3", 4096)
    kvstore.prefill(model, cache, torch.randint(0, 1000, (1, 20), generator=torch.Generator().manual_seed(4)))
    assert calls[layers:] == [28] * layers
    assert cache.layers[0].pending_q == []  # the 8 waiting went with it


def test_saved_state_includes_the_pending_statistics() -> None:
    alone, _ = _decoded("nexus-agent", 1, 10, budget=4096, reply=False)
    batched, _ = _decoded("nexus-agent", 32, 10, budget=4096, reply=False)
    assert len(batched.layers[0].pending_q) == 10
    (ta, _), (tb, _) = export_state(alone), export_state(batched)
    assert batched.layers[0].pending_q == []
    for name, t in ta.items():
        if ".state." in name:
            torch.testing.assert_close(t, tb[name], atol=1e-5, rtol=1e-4)


def test_observe_batch_must_be_positive() -> None:
    with pytest.raises(KVStoreError, match="observe_batch"):
        kvstore.CacheConfig(observe_batch=0)
