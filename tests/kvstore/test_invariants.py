"""Forced blocks are always kept and the budget invariant (held <= budget + one block per layer, between
forward calls) holds through a 2,000-token chunked prefill and 500 decode steps."""

import pytest
import torch
from tinymodels import random_ids, tiny_model

import kvstore

BUDGET, BLOCK = 256, 32
EVERY_STEP = ["nexus", "nexus-topk", "direct-reservoir", "streaming", "h2o", "morphkv"]
PREFILL_ONLY = ["snapkv", "pyramidkv", "ada-snapkv"]


def _check(cache, prefill_phase: bool):
    seen = cache.get_seq_length()
    for i, layer in enumerate(cache.layers):
        limit = (cache.layer_budget(i) + 1) * BLOCK
        if prefill_phase or not cache.policy.prefill_only:
            held = layer.effective_held() if cache.policy.masks_heads else layer.held()
            assert held <= limit, (cache.config.policy, i, held, limit)
        pos = layer.positions[0]  # [Hkv, T]
        for h in range(pos.shape[0]):
            kept = set(pos[h].tolist())
            assert set(range(BLOCK)) <= kept, "sink block evicted"
            assert set(range(seen - BLOCK, seen)) <= kept, "recent block evicted"


@pytest.mark.slow
@pytest.mark.parametrize("policy", EVERY_STEP + PREFILL_ONLY)
def test_budget_and_forced_blocks_through_prefill_and_decode(policy):
    model = tiny_model("qwen3", "sdpa")
    cache = kvstore.make_cache(model, policy, budget=BUDGET, seed=0)
    ids = random_ids(2000, seed=5)
    for start in range(0, 2000, 512):
        logits = kvstore.forward(model, cache, ids[:, start : start + 512])[:, -1]
        _check(cache, prefill_phase=True)
    for _ in range(500):
        logits = kvstore.forward(model, cache, logits.argmax(-1).view(1, 1))[:, -1]
        _check(cache, prefill_phase=False)
    stats = cache.stats()
    assert stats["tokens_seen"] == 2500
    assert stats["tokens_evicted"] > 0
    if not cache.policy.prefill_only:  # memory flat in steady decode: bounded by budget + one block
        assert max(stats["tokens_held_physical_per_layer"]) <= (max(stats["layer_budget_blocks"]) + 1) * BLOCK


def test_survival_record_names_evicted_blocks():
    model = tiny_model()
    cache = kvstore.make_cache(model, "nexus", budget=BUDGET, seed=0)
    kvstore.prefill(model, cache, random_ids(1200, seed=6), chunk_size=256)
    events = cache.evictions(0)
    held = set(cache.layers[0].positions[0, 0].tolist())
    assert events.shape[1] == 2 and len(events) > 0
    starts = events[:, 1]
    assert torch.all(starts % BLOCK == 0)  # whole blocks leave
    assert not (set(starts.tolist()) & held)  # an evicted block is gone for good
    assert len(starts) * BLOCK == cache.stats()["tokens_evicted_per_layer"][0]
