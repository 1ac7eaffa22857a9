"""Side-by-side checks: this project's StreamingLLM and SnapKV keep exactly the positions a straightforward
implementation of each paper's rule keeps at the same budget (tiny model, every layer, every kv head)."""

import pytest
import torch
import torch.nn.functional as F
from tinymodels import random_ids, tiny_model

import kvstore


def _kept(cache, layer_idx):
    pos = cache.layers[layer_idx].positions[0]  # [Hkv, T]
    return [sorted(pos[h].tolist()) for h in range(pos.shape[0])]


def _streaming_reference(seen: int, budget: int, sink: int = 4) -> list[int]:
    """StreamingLLM: the first `sink` tokens and the most recent budget - sink tokens."""
    return list(range(sink)) + list(range(seen - (budget - sink), seen))


@pytest.mark.parametrize("budget", [100, 257])
def test_streaming_keeps_the_sink_and_the_most_recent_tokens(budget):
    model = tiny_model(layers=2)
    cache = kvstore.make_cache(model, "streaming", budget=budget, decode_slack=0)  # the paper evicts every step
    ids = random_ids(900, seed=11)
    kvstore.prefill(model, cache, ids, chunk_size=128)
    for i in range(2):
        assert all(h == _streaming_reference(900, budget) for h in _kept(cache, i))
    for step in range(5):
        kvstore.forward(model, cache, random_ids(1, seed=step))
        assert all(h == _streaming_reference(901 + step, budget) for h in _kept(cache, 0))


def _snapkv_reference(attn: torch.Tensor, n_kv: int, budget: int, window: int = 32, kernel: int = 5) -> list:
    """SnapKV (FasterDecoding/SnapKV snapkv_utils.py, kvpress SnapKVPress): the window's attention to the earlier
    tokens summed over the window, average-pooled (kernel 5, zero padding counted), averaged over each kv head's
    query heads; keep the top budget - window earlier tokens of each kv head and the window.
    attn: [Hq, T, T] softmax probabilities of the whole prompt."""
    t = attn.shape[-1]
    s = attn[:, -window:, : t - window].sum(1)  # [Hq, T - w]
    s = F.avg_pool1d(s[:, None], kernel, stride=1, padding=kernel // 2)[:, 0]
    s = s.view(n_kv, -1, t - window).mean(1)  # [Hkv, T - w]
    top = s.topk(budget - window, dim=-1).indices.sort(-1).values
    return [top[h].tolist() + list(range(t - window, t)) for h in range(n_kv)]


@pytest.mark.parametrize("budget,prompt", [(200, 700), (333, 1000)])
def test_snapkv_keeps_the_papers_top_k_and_window(budget, prompt):
    model = tiny_model("qwen3", "eager", layers=2)
    ids = random_ids(prompt, seed=12)
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions  # per layer [1, Hq, T, T]
    cache = kvstore.make_cache(model, "snapkv", budget=budget, compress_once=True)
    kvstore.prefill(model, cache, ids, chunk_size=256)  # compresses once, at the end: same keys as the stock pass
    n_kv = model.config.num_key_value_heads
    for i, attn in enumerate(attentions):
        assert _kept(cache, i) == _snapkv_reference(attn[0].float(), n_kv, budget), f"layer {i}"
