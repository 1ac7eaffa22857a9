"""The default memory `nexus-agent` (kvstore.policies.nexus.NexusAccPolicy): per kv head and per token, the attention
each token received from every query so far plus its block's remembered per-head Nexus score."""

from __future__ import annotations

import pytest
import torch
from sessionlib import tiny_chat_model

import kvstore
from kvstore.errors import KVStoreError
from kvstore.state import export_state, restore_cache


def _prefilled(policy: str, budget: int = 192, **options):
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, policy, budget=budget, block=16, **options)
    ids = torch.randint(0, 1000, (1, 700), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    return model, cache


def test_it_accumulates_the_attention_h2o_accumulates() -> None:
    _, ours = _prefilled("nexus-agent", budget=4096)  # nothing evicted: both saw every query over every token
    _, h2o = _prefilled("h2o", budget=4096)
    for a, b in zip(ours.layers, h2o.layers, strict=True):
        torch.testing.assert_close(a.state["acc"], b.state["h2o_acc"])
        assert a.state["nexus_steps"].max() == 0  # no eviction step yet: the Nexus score was never remembered


def test_both_parts_decide_what_is_kept_per_kv_head() -> None:
    _, ours = _prefilled("nexus-agent")
    _, attention_only = _prefilled("nexus-agent", acc_weight=1e9)
    _, nexus_only = _prefilled("nexus-agent", acc_weight=0.0)
    layer = ours.layers[1]
    assert layer.state["nexus_steps"].max() >= 2 and all(x.held() <= 192 for x in ours.layers)
    pos = layer.positions[0]  # [Hkv, T]: each kv head keeps its own tokens
    assert any(not torch.equal(pos[0], pos[h]) for h in range(1, pos.shape[0]))
    for other in (attention_only, nexus_only):
        assert any(not torch.equal(a.positions, b.positions) for a, b in zip(ours.layers, other.layers, strict=True))


def test_a_session_saved_under_an_earlier_definition_is_refused_clearly() -> None:
    model, earlier = _prefilled("nexus-agent-mean")  # what `nexus-agent` was before this hybrid
    tensors, meta = export_state(earlier)
    meta["config"]["policy"] = "nexus-agent"
    with pytest.raises(KVStoreError, match="earlier definition of policy 'nexus-agent'"):
        restore_cache(model, tensors, meta)
    restored = restore_cache(model, *export_state(_prefilled("nexus-agent")[1]))  # today's definition: fine
    assert restored.policy.token_state == ("acc", "nexus_score", "nexus_steps")


def test_a_negative_acc_weight_is_refused() -> None:
    with pytest.raises(KVStoreError, match="acc_weight"):
        kvstore.CacheConfig(acc_weight=-1.0)
