"""Budget-relative recency (CacheConfig.recent_share): a share of the budget always holds the most recent tokens."""

from __future__ import annotations

import pytest
import torch
from sessionlib import tiny_chat_model

import kvstore
from kvstore.errors import KVStoreError


@pytest.mark.parametrize("policy", ["nexus", "nexus-agent", "snapkv"])  # blocks, and tokens
def test_the_most_recent_share_of_the_budget_is_always_held(policy: str) -> None:
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, policy, budget=256, block=16, recent_share=0.5)
    ids = torch.randint(0, 1000, (1, 900), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    recent = cache.policy.recent_tokens(cache.layer_budget_tokens(0))
    assert recent == 128  # half of the budget
    blocks = cache.policy.granularity == "block"  # whole blocks: the 8 most recent complete ones and the tail
    tail = 900 - (900 % 16 if blocks else 0) - recent
    for layer in cache.layers:
        held = set(layer.positions[0, 0].tolist())
        assert set(range(tail, 900)) <= held
        assert len(held) <= 256 + 16


def test_recent_share_never_leaves_too_small_a_budget_and_is_checked() -> None:
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, "nexus", budget=64, block=16, recent_share=0.9)
    assert cache.policy.recent_tokens(64) == 2 * 16  # 4 blocks: sink + tail + 2 recent, not 3
    with pytest.raises(KVStoreError, match="recent_share"):
        kvstore.make_cache(model, "nexus-agent", budget=64, recent_share=1.0)
