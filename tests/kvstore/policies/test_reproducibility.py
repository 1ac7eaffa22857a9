"""One seed -> identical kept sets and outputs; different seeds -> different kept sets for nexus. Plus the
errors a user can cause."""

import pytest
import torch
from tinymodels import random_ids, tiny_model
from transformers import AutoModelForCausalLM, GPT2Config

import kvstore
from kvstore import KVStoreError


def _run(seed, policy="nexus"):
    model = tiny_model()
    cache = kvstore.make_cache(model, policy, budget=256, seed=seed)
    logits = kvstore.prefill(model, cache, random_ids(1500, seed=7), chunk_size=256)
    out = []
    for _ in range(64):
        logits = kvstore.forward(model, cache, logits.argmax(-1).view(1, 1))[:, -1]
        out.append(logits)
    return [layer.positions.clone() for layer in cache.layers], torch.stack(out), cache


def test_same_seed_same_kept_sets_and_outputs():
    pos_a, out_a, _ = _run(0)
    pos_b, out_b, _ = _run(0)
    assert all(torch.equal(a, b) for a, b in zip(pos_a, pos_b, strict=True))
    assert torch.equal(out_a, out_b)


def test_different_seeds_different_kept_sets():
    pos_a, _, _ = _run(0)
    pos_b, _, _ = _run(1)
    assert any(not torch.equal(a, b) for a, b in zip(pos_a, pos_b, strict=True))


def test_generator_state_is_inspectable_and_restorable():
    _, _, cache = _run(0)
    state = cache.generator.get_state()
    draw = torch.rand(3, generator=cache.generator)
    cache.generator.set_state(state)
    assert torch.equal(draw, torch.rand(3, generator=cache.generator))


def test_budget_that_cannot_hold_forced_blocks_is_rejected():
    with pytest.raises(KVStoreError, match="forced blocks"):
        kvstore.make_cache(tiny_model(), "nexus", budget=64)
    cache = kvstore.make_cache(tiny_model(), "nexus", budget=0.01)  # a density never goes below the forced set
    kvstore.prefill(tiny_model(), cache, random_ids(200))
    assert cache.budget_tokens == cache.least_budget() > round(0.01 * 200)
    with pytest.raises(KVStoreError, match="forced blocks"):  # one token less is the budget the message refuses
        kvstore.make_cache(tiny_model(), "nexus", budget=cache.least_budget() - 1)


def test_unknown_policy_option_and_architecture():
    with pytest.raises(KVStoreError, match="unknown policy 'nexsu'"):
        kvstore.make_cache(tiny_model(), "nexsu", budget=256)
    with pytest.raises(KVStoreError, match="unknown cache option"):
        kvstore.make_cache(tiny_model(), "nexus", budget=256, windw=8)
    with pytest.raises(KVStoreError, match=r"budget 1.5: give .*a density in \(0, 1\]"):
        kvstore.make_cache(tiny_model(), "nexus", budget=1.5)
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    with pytest.raises(KVStoreError, match="architecture 'gpt2' is not supported"):
        kvstore.make_cache(gpt2, "nexus", budget=256)


def test_every_knob_is_an_option():
    cache = kvstore.make_cache(
        tiny_model(),
        "nexus",
        budget=512,
        block=16,
        window=8,
        walk_steps=2,
        lam=0.25,
        eps_tie=1e-5,
        n=3,
        recent_blocks=2,
        chunk_size=128,
        selector="topk",
    )
    cfg, own = cache.config, cache.config.settings
    assert (cfg.block, own.window, own.walk_steps, own.lam, own.n, cfg.recent_blocks, own.selector) == (
        16,
        8,
        2,
        0.25,
        3,
        2,
        "topk",
    )


def test_an_option_the_policy_does_not_declare_is_refused_by_name():
    with pytest.raises(KVStoreError, match="unknown cache option.*lam for policy 'h2o'; its options: h2o_normalize"):
        kvstore.make_cache(tiny_model(), "h2o", budget=256, lam=0.5)
    cfg = kvstore.make_cache(tiny_model(), "ada-snapkv", budget=256, ada_floor=0.5, window=8).config
    assert (cfg.settings.floor, cfg.settings.scorer.window) == (0.5, 8)  # the wrapper's and its scorer's options
    assert kvstore.CacheConfig.from_options(**cfg.to_dict()) == cfg  # flat options, both ways
