"""Attention statistics for the token policies: computed over chunks of queries (never a full [H, T, T] matrix),
equal to the dense computation, and H2O's accumulation equal to the stock model's attention probabilities."""

import pytest
import torch
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore.attention.received import attention_received, received_sums


def _dense(q, k, scale, valid=None):
    """[Hq, q, D] x [Hkv, T, D] -> [Hq, T]: causal softmax over all keys, summed over the queries."""
    hq, n, _ = q.shape
    hkv, t, _ = k.shape
    logits = torch.einsum("hqd,htd->hqt", q, k.repeat_interleave(hq // hkv, 0)) * scale
    causal = torch.arange(t)[None, :] > (t - n + torch.arange(n))[:, None]
    logits = logits.masked_fill(causal, float("-inf"))
    if valid is not None:
        logits = logits.masked_fill(~valid.repeat_interleave(hq // hkv, 0)[:, None, :], float("-inf"))
    return logits.softmax(-1).sum(1)


@pytest.mark.parametrize("max_elems", [1, 3 * 4 * 50, 1 << 24])  # one query row at a time, 3 rows, all at once
def test_chunked_statistics_equal_the_dense_ones(max_elems):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 37, 8, generator=g), torch.randn(2, 50, 8, generator=g)
    valid = torch.rand(2, 50, generator=g) > 0.2
    valid[:, -37:] = True  # every query sees at least itself
    for v in (None, valid):
        got = attention_received(q, k, 0.3, v, max_elems=max_elems)
        torch.testing.assert_close(got, _dense(q, k, 0.3, v), atol=1e-5, rtol=1e-5)
    top = attention_received(q, k, 0.3, None, max_elems=max_elems, reduce="max")
    assert top.shape == (4, 50)
    assert float(top.max()) <= 1.0


@pytest.mark.parametrize("max_elems", [1, 3 * 4 * 50, 1 << 24])
def test_several_weightings_in_one_pass_equal_each_alone(max_elems):
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(4, 37, 8, generator=g), torch.randn(2, 50, 8, generator=g)
    reply = (torch.rand(37, generator=g) > 0.5).float()
    coefs = torch.stack([torch.ones(37), reply, torch.rand(37, generator=g)])
    got = received_sums(q, k, 0.3, None, max_elems, coefs)  # [3, Hq, T]
    for row, weights in zip(got, coefs, strict=True):
        torch.testing.assert_close(row, _dense_weighted(q, k, 0.3, weights), atol=1e-5, rtol=1e-5)


def _dense_weighted(q, k, scale, weights):
    hq, n, _ = q.shape
    hkv, t, _ = k.shape
    logits = torch.einsum("hqd,htd->hqt", q, k.repeat_interleave(hq // hkv, 0)) * scale
    causal = torch.arange(t)[None, :] > (t - n + torch.arange(n))[:, None]
    return (logits.masked_fill(causal, float("-inf")).softmax(-1) * weights[None, :, None]).sum(1)


def test_h2o_accumulates_the_models_own_attention():
    model = tiny_model("qwen3", "eager", layers=2)
    ids = random_ids(300, seed=21)
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions  # per layer [1, Hq, T, T]
    cache = kvstore.make_cache(model, "h2o", budget=1000, score_chunk=64)  # no eviction; tiny query chunks
    kvstore.prefill(model, cache, ids, chunk_size=96)
    hkv = model.config.num_key_value_heads
    for layer, attn in zip(cache.layers, attentions, strict=True):
        ref = attn[0].sum(1).view(hkv, -1, 300).mean(1)  # [Hkv, T]: summed over queries, mean over each group
        torch.testing.assert_close(layer.state["h2o_acc"][0], ref, atol=1e-4, rtol=1e-4)
        normalized = cache.policy.score(layer.score_context())[0]
        torch.testing.assert_close(normalized, ref / (300 - torch.arange(300)), atol=1e-4, rtol=1e-4)


def test_chunked_statistics_never_hold_the_dense_matrix():
    from benchmarks.memtrack import peak_extra_bytes

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 256, 16, generator=g), torch.randn(2, 1024, 16, generator=g)
    dense_bytes = 4 * 256 * 1024 * 4  # one fp32 [Hq, q, T] matrix: 4 MiB
    chunk = 4 * 16 * 1024  # 16 query rows at a time
    peak = peak_extra_bytes(lambda: attention_received(q, k, None, None, max_elems=chunk))
    assert 0 < peak < dense_bytes / 4
    assert peak_extra_bytes(lambda: attention_received(q, k, None, None, max_elems=1 << 24)) >= dense_bytes
