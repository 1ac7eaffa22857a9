"""The query-specific bound of `bench replay --bound`: each query head's own top-B past keys on the full cache."""

from __future__ import annotations

import pytest
import torch
from clilib import GOLD_DIR
from sessionlib import qwen_tokenizer, tiny_chat_model
from transformers import AttentionInterface

from benchmarks.plans import BOUND
from benchmarks.replay import ReplayConfig, parse_spec, run
from benchmarks.replay_bound import query_top_b, top_b_mask
from kvstore.errors import KVStoreError
from kvstore.models.tiny import tiny_model


def test_each_row_keeps_its_own_best_past_keys_and_every_new_key_up_to_itself() -> None:
    g = torch.Generator().manual_seed(0)
    query, key = torch.randn(1, 4, 3, 8, generator=g), torch.randn(1, 2, 13, 8, generator=g)  # 10 past + 3 new
    allowed = top_b_mask(query, key, None, budget=4, scaling=0.5)
    assert allowed.shape == (1, 4, 3, 13)
    scores = query @ key.repeat_interleave(2, dim=1).transpose(-1, -2)  # [1, 4, 3, 13]
    for h in range(4):
        for i in range(3):
            past = set(scores[0, h, i, :10].topk(4).indices.tolist())
            assert set(allowed[0, h, i, :10].nonzero().flatten().tolist()) == past  # this row's own best four
            assert allowed[0, h, i, 10:].tolist() == [j <= i for j in range(3)]  # causal over the new keys
    assert len({tuple(allowed[0, h, 0, :10].tolist()) for h in range(4)}) > 1  # the heads choose differently


def test_a_budget_that_holds_the_past_masks_nothing_but_the_future() -> None:
    query, key = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 7, 8)
    allowed = top_b_mask(query, key, None, budget=4, scaling=1.0)
    expected = torch.arange(7)[None, :] <= 4 + torch.arange(3)[:, None]
    assert torch.equal(allowed[0, 0], expected)
    assert torch.equal(allowed[0, 1], expected)


def test_the_bound_equals_the_full_cache_when_the_budget_holds_everything_and_differs_below_it() -> None:
    model, tokenizer = tiny_chat_model(), qwen_tokenizer()
    base = AttentionInterface._global_mapping["sdpa"]
    trajectory = GOLD_DIR / "nexus-demo__invoicer-1.gold.jsonl"
    cfg = ReplayConfig((parse_spec("streaming"),), (1.0, 150), 1800, traces=[trajectory], bound=True)
    result = run(cfg, model, tokenizer)
    bound = {r["budget"]: r["turns"] for r in result["runs"] if r["spec"] == BOUND}
    assert set(bound) == {1.0, 150}
    assert all(t["kl"] < 1e-4 for t in bound[1.0])
    assert all(t["top1"] == t["tokens"] for t in bound[1.0])
    assert sum(t["kl"] for t in bound[150]) > 1e-3  # 150 past keys per query change the distributions
    assert AttentionInterface._global_mapping["sdpa"] is base  # the model's attention is restored afterwards


def test_the_bound_needs_sdpa_attention() -> None:
    with pytest.raises(KVStoreError, match="sdpa"), query_top_b(tiny_model(impl="eager"), 16):
        pass
