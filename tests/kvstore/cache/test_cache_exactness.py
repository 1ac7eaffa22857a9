"""Exactness: with `full`, or a budget larger than the sequence, prefill + 200 decode steps give the same
logits as the stock DynamicCache (fp32, atol 1e-5), for each architecture and for eager and sdpa."""

import pytest
import torch
from tinymodels import random_ids, tiny_model
from transformers import DynamicCache

import kvstore


def _run(model, cache, ids, steps):
    logits = [kvstore.prefill(model, cache, ids, chunk_size=64)]
    for _ in range(steps):
        nxt = logits[-1].argmax(-1).view(1, 1)
        logits.append(kvstore.forward(model, cache, nxt)[:, -1])
    return torch.stack(logits)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("policy,budget", [("full", None), ("nexus", 4096), ("h2o", 4096), ("snapkv", 4096)])
def test_matches_dynamic_cache(arch, impl, policy, budget):
    ref_model = tiny_model(arch, impl)
    model = tiny_model(arch, impl)
    ids = random_ids(100)
    ref = _run(ref_model, DynamicCache(config=ref_model.config), ids, 200)
    cache = kvstore.make_cache(model, policy, budget=budget)
    got = _run(model, cache, ids, 200)
    assert cache.stats()["tokens_evicted"] == 0
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def test_stock_generate_accepts_the_cache():
    model = tiny_model()
    ids = random_ids(40)
    ref = model.generate(ids, max_new_tokens=30, do_sample=False)
    out = model.generate(ids, max_new_tokens=30, do_sample=False, cache=kvstore.make_cache(model, "full"))
    assert torch.equal(out, ref)
    evicting = kvstore.make_cache(model, "nexus", budget=128)
    out = model.generate(random_ids(300), max_new_tokens=80, do_sample=False, cache=evicting)
    assert out.shape[-1] == 380
    assert evicting.stats()["tokens_evicted"] > 0
    assert max(evicting.stats()["tokens_held_per_layer"]) <= 128 + 32
