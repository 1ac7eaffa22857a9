"""The attention passes that also give a policy its statistics (kvstore.attention.prefill for multi-token
forwards, kvstore.attention.decode for decode steps) against sdpa and the policies' own pass, and the static
engine taking them: its statistics then cost no pass of their own."""

import pytest
import torch
import torch.nn.functional as F
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore.attention import prefill, received
from kvstore.attention.prefill import applies, attention_with_sums, causal_mask
from kvstore.policies import base


def _inputs(hq: int, hkv: int, q: int, t: int, d: int = 16, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(1, hq, q, d, generator=g).to(dtype)
    key = torch.randn(1, hkv, t, d, generator=g).mul(2).to(dtype)  # peaked rows: a real test of the max shift
    value = torch.randn(1, hkv, t, d, generator=g).to(dtype)
    return query, key, value


def _sdpa(query, key, value, scale):
    q, t = query.shape[-2], key.shape[-2]
    mask = causal_mask(q, t, query.device)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize(("hq", "hkv", "q", "t"), [(4, 4, 7, 7), (6, 2, 9, 40), (9, 3, 33, 100)])
@pytest.mark.parametrize("chunk_elems", [1, 1 << 22])  # one query row per chunk, and one chunk
def test_output_and_sums_match_sdpa_and_the_policies_own_pass(hq, hkv, q, t, chunk_elems) -> None:
    query, key, value = _inputs(hq, hkv, q, t)
    coefs = torch.stack([torch.ones(q), (torch.arange(q) % 3 == 0).float()])  # every query, and some of them
    before = query.clone()
    out, sums = attention_with_sums(query, key, value, 0.3, coefs, chunk_elems=chunk_elems)
    assert torch.equal(query, before)  # the queries the layer records next are untouched
    torch.testing.assert_close(out, _sdpa(query, key, value, 0.3), atol=1e-5, rtol=1e-5)
    ref = torch.stack([received.attention_received(query[0], key[0], 0.3, weights=w) for w in coefs])  # [k, Hq, T]
    ref = ref.view(2, hkv, hq // hkv, t).mean(2)[:, None]
    assert sums.shape == (2, 1, hkv, t)
    torch.testing.assert_close(sums, ref, atol=1e-5, rtol=1e-5)


def test_bf16_matches_sdpa_to_rounding() -> None:
    query, key, value = _inputs(9, 3, 64, 300, d=64, dtype=torch.bfloat16)
    out, sums = attention_with_sums(query, key, value, None, torch.ones(1, 64))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), _sdpa(query, key, value, None).float(), atol=2e-2, rtol=0)
    ref = received.attention_received(query[0], key[0], None).view(3, 3, 300).mean(1)
    torch.testing.assert_close(sums[0, 0], ref, atol=1e-3, rtol=1e-2)


def test_it_applies_only_to_one_causal_sequence_on_the_cpu() -> None:
    query, key, _ = _inputs(4, 2, 5, 12)
    causal = causal_mask(5, 12, query.device)
    assert applies(query, key, causal)
    assert applies(query, key, causal.expand(1, 4, 5, 12))
    assert not applies(query, key, None)  # transformers passes no mask only when queries and keys are the same
    assert applies(query[..., :5, :], key[..., :5, :], None)
    padded = causal.clone()
    padded[..., 0] = False  # a padded first slot: not the plain causal mask
    assert not applies(query, key, padded)
    assert not applies(query, key, causal.float())
    assert not applies(query.expand(2, -1, -1, -1), key.expand(2, -1, -1, -1), causal.expand(2, 1, 5, 12))
    assert not applies(query[..., :1, :], key, causal[..., :1, :])  # a decode step: decode_attention's
    assert not applies(query, key, causal, sliding_window=4)
    assert not applies(query, key, causal, softcap=30.0)


def _counting(monkeypatch, module, name: str) -> list[int]:
    """Count the calls of module.name (still calling it)."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("policy", ["nexus-agent", "h2o"])
def test_the_static_engine_observes_in_the_attention_pass(policy: str, monkeypatch) -> None:
    """Prefill, decode, a next message and decode again with an observing policy: no statistics pass of its own
    (head_token_sums is never called: the prefill pass gives the sums, each decode step its mass), and the state and
    kept tokens of the eager engine (which observes in a pass of its own)."""
    model = tiny_model()
    ids = random_ids(600, seed=4)
    runs = {}
    for engine in ("eager", "static"):
        cache = kvstore.make_cache(model, policy, budget=200, seed=1, engine=engine)
        calls = _counting(monkeypatch, base, "head_token_sums")
        fused = _counting(monkeypatch, prefill, "attention_with_sums")
        cache.reply_from = 500  # the last 100 tokens are the agent's reply: two weightings in one chunk
        logits = kvstore.prefill(model, cache, ids[:, :500], chunk_size=256)
        tokens = []
        for turn in (ids[:, 500:], None):  # decode, a next message (its update observes the decoded masses), decode
            for _ in range(40):
                tokens.append(int(logits.argmax(-1)))
                logits = kvstore.forward(model, cache, torch.tensor([[tokens[-1]]]))[:, -1]
            if turn is not None:
                cache.reply_from = None
                logits = kvstore.prefill(model, cache, turn, chunk_size=256)
        cache.flush_observations()
        monkeypatch.undo()
        runs[engine] = (tokens, cache, len(calls), len(fused))
    (tok_e, eager, own_e, _), (tok_s, static, own_s, fused_s) = runs["eager"], runs["static"]
    assert own_e > 0
    assert own_s == 0
    assert fused_s == 3 * len(static.layers)  # three prefill chunks per layer
    assert tok_s == tok_e
    for a, b in zip(eager.layers, static.layers, strict=True):
        assert torch.equal(a.positions, b.positions)
        for name, value in a.state.items():
            torch.testing.assert_close(b.state[name], value, atol=1e-5, rtol=1e-5, msg=name)
