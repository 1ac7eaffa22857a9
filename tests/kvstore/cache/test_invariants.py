"""Forced regions are always kept and the budget invariant holds through a 2,000-token chunked prefill and 500
decode steps, for every registered policy: after a multi-token forward a layer holds at most its token budget;
between decode steps at most budget + decode_slack (one block), or, for prefill-only policies, what the last
compression left plus the decoded tokens."""

import pytest
import torch
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore import POLICIES

BUDGET, BLOCK = 256, 32
EVICTING = [name for name, (cls, _) in POLICIES.items() if cls.evicts]


def _check(cache, prefill_phase: bool, after_prefill: list[float] | None = None, decoded: int = 0):
    seen = cache.get_seq_length()
    policy = cache.policy
    for i, layer in enumerate(cache.layers):
        budget = cache.layer_budget_tokens(i)
        held = layer.effective_held()
        if prefill_phase:
            assert held <= budget, (cache.config.policy, i, held, budget)
        elif policy.prefill_only:
            assert held == after_prefill[i] + decoded
        else:
            assert held <= budget + cache.decode_slack(), (cache.config.policy, i, held, budget)
        pos = layer.positions[0]  # [Hkv, T]
        recent = policy.recent_tokens(budget)
        for h in range(pos.shape[0]):
            kept = set(pos[h].tolist())
            assert set(range(policy.sink_tokens())) <= kept, "sink evicted"
            assert set(range(seen - recent, seen)) <= kept, "recent region evicted"


@pytest.mark.slow
@pytest.mark.parametrize("policy", EVICTING)
def test_budget_and_forced_regions_through_prefill_and_decode(policy):
    model = tiny_model("qwen3", "sdpa")
    cache = kvstore.make_cache(model, policy, budget=BUDGET, seed=0)
    ids = random_ids(2000, seed=5)
    for start in range(0, 2000, 512):
        logits = kvstore.forward(model, cache, ids[:, start : start + 512])[:, -1]
        _check(cache, prefill_phase=True)
    after = [layer.effective_held() for layer in cache.layers]
    for step in range(500):
        logits = kvstore.forward(model, cache, logits.argmax(-1).view(1, 1))[:, -1]
        _check(cache, prefill_phase=False, after_prefill=after, decoded=step + 1)
    stats = cache.stats()
    assert stats["tokens_seen"] == 2500
    assert stats["tokens_evicted"] > 0
    if not cache.policy.prefill_only:  # memory flat in steady decode: bounded by budget + one block
        assert max(stats["tokens_held_physical_per_layer"]) <= max(stats["layer_budget_tokens"]) + BLOCK or (
            cache.policy.masks_heads
        )


def test_survival_record_names_evicted_blocks():
    model = tiny_model()
    cache = kvstore.make_cache(model, "nexus", budget=BUDGET, seed=0)
    kvstore.prefill(model, cache, random_ids(1200, seed=6), chunk_size=256)
    events = cache.evictions(0)
    held = set(cache.layers[0].positions[0, 0].tolist())
    assert events.shape[1] == 2
    assert len(events) > 0
    starts = events[:, 1]
    assert torch.all(starts % BLOCK == 0)  # whole blocks leave (Nexus: the sink is one block, so blocks align)
    assert not (set(starts.tolist()) & held)  # an evicted block is gone for good
    assert len(starts) * BLOCK == cache.stats()["tokens_evicted_per_layer"][0]
