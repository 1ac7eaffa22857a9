"""Budget accounting (docs/baselines.md): every registered policy holds the same number of tokens at the same
budget, within one block, after prefill and after decode steps; the tail block counts by its real size; densities
are round(d * prompt tokens); per-layer and per-head held counts are reported."""

import pytest
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore import POLICIES

BLOCK = 32
EVICTING = [name for name, (cls, _) in POLICIES.items() if cls.evicts]


def _exact(policy) -> bool:
    """Token policies hold their budget exactly; block policies up to b - 1 tokens less."""
    return policy.granularity == "token"


def _held_after(model, name, budget, prompt, decode, chunk=256):
    cache = kvstore.make_cache(model, name, budget=budget, seed=0)
    kvstore.prefill(model, cache, random_ids(prompt, seed=3), chunk_size=chunk)
    after_prefill = cache.stats()
    for i in range(decode):
        kvstore.forward(model, cache, random_ids(1, seed=100 + i))
    return cache, after_prefill, cache.stats()


@pytest.mark.parametrize("budget,prompt", [(256, 1000), (300, 777)])
def test_all_policies_hold_the_budget_after_prefill_and_decode(budget, prompt):
    model = tiny_model("qwen3", "sdpa", layers=2)
    decode = BLOCK // 2  # fewer than the decode slack: no policy evicts in between, all grow alike
    means = {}
    for name in EVICTING:
        cache, pre, post = _held_after(model, name, budget, prompt, decode)
        budgets = pre["layer_budget_tokens"]
        assert sum(budgets) == budget * len(budgets), name  # PyramidKV redistributes, the total is exact
        for held, n in zip(pre["tokens_held_per_layer"], budgets, strict=True):
            assert (held == n) if _exact(cache.policy) else (n - BLOCK < held <= n), (name, held, n)
        for held, before in zip(post["tokens_held_per_layer"], pre["tokens_held_per_layer"], strict=True):
            assert held == before + decode, name
        means[name] = (pre["tokens_held"] / len(budgets), post["tokens_held"] / len(budgets))
    for phase in (0, 1):  # every policy holds the same count within one block
        values = [m[phase] for m in means.values()]
        assert max(values) - min(values) < BLOCK, (phase, means)
        assert all(abs(v - budget - phase * decode) < BLOCK for v in values), means


def test_held_counts_per_layer_and_head_and_density_rounding():
    model = tiny_model()
    cache = kvstore.make_cache(model, "ada-snapkv", budget=0.25, seed=0)
    kvstore.prefill(model, cache, random_ids(1001, seed=4), chunk_size=1001)
    st = cache.stats()
    assert st["budget_tokens"] == round(0.25 * 1001) == 250
    per_head = st["tokens_held_per_head"]
    assert len(per_head) == 2
    assert all(len(h) == model.config.num_key_value_heads for h in per_head)
    assert [sum(h) / len(h) for h in per_head] == st["tokens_held_per_layer"] == [250.0, 250.0]
    assert "prefill" in st["evicts_when"]
    assert "decode tokens accumulate" in st["evicts_when"]


def test_tail_block_counts_by_its_real_size():
    model = tiny_model()
    for prompt in (1000, 1001, 1016, 1023, 1024):
        cache, pre, _ = _held_after(model, "nexus", 300, prompt, 0)
        layer = cache.layers[0]
        tail = (prompt - BLOCK) % BLOCK
        assert 300 - BLOCK < layer.held() <= 300
        assert set(range(prompt - tail - BLOCK, prompt)) <= set(layer.positions[0, 0].tolist())


def test_decode_evicts_once_past_the_slack_and_back_to_the_budget():
    model = tiny_model(layers=1)
    cache = kvstore.make_cache(model, "h2o", budget=200, seed=0)
    kvstore.prefill(model, cache, random_ids(500, seed=2))
    sizes = [cache.layers[0].held()]
    for i in range(80):
        kvstore.forward(model, cache, random_ids(1, seed=i))
        sizes.append(cache.layers[0].held())
    assert max(sizes) == 200 + BLOCK
    assert min(sizes) == 200
    exact = kvstore.make_cache(model, "h2o", budget=200, seed=0, decode_slack=0)  # the paper: every step
    kvstore.prefill(model, exact, random_ids(500, seed=2))
    for i in range(10):
        kvstore.forward(model, exact, random_ids(1, seed=i))
        assert exact.layers[0].held() == 200


def test_compress_once_compresses_only_after_the_first_prefill():
    model = tiny_model()
    every = kvstore.make_cache(model, "snapkv", budget=256, seed=0)
    once = kvstore.make_cache(model, "snapkv", budget=256, seed=0, compress_once=True)
    for cache in (every, once):
        kvstore.prefill(model, cache, random_ids(1000, seed=8), chunk_size=256)
        assert cache.stats()["tokens_held_per_layer"] == [256.0, 256.0]
        kvstore.prefill(model, cache, random_ids(300, seed=9), chunk_size=256)  # a new turn
    assert every.stats()["tokens_held_per_layer"] == [256.0, 256.0]
    assert once.stats()["tokens_held_per_layer"] == [556.0, 556.0]
    assert once.stats()["eviction_steps"] == 2  # one step per layer, ever
    assert "once" in once.stats()["evicts_when"]
