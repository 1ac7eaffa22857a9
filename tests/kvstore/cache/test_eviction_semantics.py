"""What "evicted" means: after evictions, next-token logits equal a stock forward over the full history with an
attention mask hiding exactly the evicted tokens (same positions). One layer, so keys depend only on tokens."""

import copy

import pytest
import torch
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore import POLICIES

EVICTING = [name for name, (cls, _) in POLICIES.items() if cls.evicts]


def _allowed(layer, t: int, hq: int) -> torch.Tensor:
    """[Hq, t] which keys the next query may see: the held (unmasked) positions of its kv head, and itself."""
    held_pos = layer.positions[0]  # [Hkv, T_held]
    valid = layer.valid[0] if layer.valid is not None else torch.ones_like(held_pos, dtype=torch.bool)
    allowed = torch.zeros(held_pos.shape[0], t, dtype=torch.bool)
    for h in range(held_pos.shape[0]):
        allowed[h, held_pos[h][valid[h]]] = True
    allowed[:, t - 1] = True
    return allowed.repeat_interleave(hq // held_pos.shape[0], dim=0)


def _reference_logits(ref_model, ids, allowed):
    """Stock forward over all of `ids`; the last query sees exactly `allowed` [Hq, T] (bool), earlier rows causal."""
    t = ids.shape[-1]
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None].repeat(1, allowed.shape[0], 1, 1)
    mask[0, :, -1, :] = allowed
    return ref_model(input_ids=ids, attention_mask=mask).logits[:, -1].float()


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("policy", EVICTING)
def test_logits_equal_masked_full_forward(impl, policy):
    model = tiny_model("qwen3", impl, layers=1)
    ref_model = copy.deepcopy(model)
    ref_model.set_attn_implementation("sdpa")  # a 4D boolean mask, per head
    ids = random_ids(700, seed=1)
    cache = kvstore.make_cache(model, policy, budget=192, seed=0)
    kvstore.prefill(model, cache, ids[:, :-1], chunk_size=128)
    assert cache.stats()["tokens_evicted"] > 0
    allowed = _allowed(cache.layers[0], ids.shape[-1], model.config.num_attention_heads)
    logits = kvstore.forward(model, cache, ids[:, -1:])[:, -1]
    torch.testing.assert_close(logits, _reference_logits(ref_model, ids, allowed), atol=1e-5, rtol=0)


@pytest.mark.parametrize("policy", [name for name in EVICTING if not POLICIES[name][0].prefill_only])
def test_semantics_hold_through_decode_evictions(policy):
    model = tiny_model("llama", "sdpa", layers=1)
    ref_model = copy.deepcopy(model)
    ids = random_ids(500, seed=2)
    cache = kvstore.make_cache(model, policy, budget=128, seed=0)
    kvstore.prefill(model, cache, ids[:, :200])
    for i in range(200, ids.shape[-1] - 1):  # teacher-forced decode, evicting every 32 tokens
        kvstore.forward(model, cache, ids[:, i : i + 1])
    steps_before = cache.stats()["eviction_steps"]
    assert steps_before >= 4
    allowed = _allowed(cache.layers[0], ids.shape[-1], model.config.num_attention_heads)
    logits = kvstore.forward(model, cache, ids[:, -1:])[:, -1]
    torch.testing.assert_close(logits, _reference_logits(ref_model, ids, allowed), atol=1e-5, rtol=0)
