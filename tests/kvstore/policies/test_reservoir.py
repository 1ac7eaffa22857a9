"""The reservoir: log space (no underflow), follows the weights, n = 1 is A-Res, large n tends to top-K."""

import itertools

import torch

from kvstore.policies.selection import log_reservoir_priority, select


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_no_underflow_with_5000_tiny_weights():
    n_blocks = 5000
    # the heavy half is the OLDER half, so a reservoir that underflowed to the recency tie-break would keep the newer
    w = torch.cat([torch.full((n_blocks // 2,), 3e-4), torch.full((n_blocks // 2,), 1e-4)])
    w = w + 1e-6 * torch.arange(n_blocks) / (n_blocks - 1)
    naive = torch.rand(n_blocks, dtype=torch.float64, generator=_gen()) ** (1 / w.double())
    assert (naive == 0).float().mean() > 0.8  # what the spec warns about: the naive form is (mostly) zeros
    logp = log_reservoir_priority(w, 5, _gen())
    assert torch.isfinite(logp).all()
    kept = select(w, 1000, "reservoir", 5, _gen())
    # an underflowed reservoir keeps the 1000 newest (all light); with 3x weight the heavy half dominates
    assert (kept < n_blocks // 2).float().mean() > 0.6


def test_inclusion_frequency_increases_with_weight():
    w = torch.arange(1, 11, dtype=torch.float64) / 55
    counts = torch.zeros(10)
    g = _gen(1)
    for _ in range(3000):
        counts[select(w, 3, "reservoir", 5, g)] += 1
    freq = counts / 3000
    assert torch.all(freq[2:] > freq[:-2])  # monotone up to Monte Carlo noise between neighbours
    assert freq[-1] > 2 * freq[0]


def test_n1_is_weighted_sampling_without_replacement():
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    total = w.sum()
    exact = {}
    for i, j in itertools.permutations(range(4), 2):  # sequential draws without replacement
        pair = frozenset((i, j))
        exact[pair] = exact.get(pair, 0.0) + float(w[i] / total * w[j] / (total - w[i]))
    g = _gen(2)
    trials = 20000
    seen: dict[frozenset, int] = {}
    for _ in range(trials):
        pair = frozenset(select(w, 2, "reservoir", 1, g).tolist())
        seen[pair] = seen.get(pair, 0) + 1
    for pair, p in exact.items():
        assert abs(seen.get(pair, 0) / trials - p) < 0.015, (pair, p)


def test_large_n_tends_to_top_k():
    w = torch.tensor([0.05, 0.3, 0.1, 0.25, 0.15, 0.2], dtype=torch.float64)
    topk = set(torch.topk(w, 3).indices.tolist())
    g = _gen(3)
    hits_large = sum(set(select(w, 3, "reservoir", 5000, g).tolist()) == topk for _ in range(200))
    hits_small = sum(set(select(w, 3, "reservoir", 1, g).tolist()) == topk for _ in range(200))
    assert hits_large > 150
    assert hits_small < hits_large
    assert set(select(w, 3, "topk", 1, None).tolist()) == topk


def test_selected_indices_are_sorted_and_k_is_clamped():
    w = torch.rand(2, 3, 50, generator=_gen(4))
    idx = select(w, 10, "reservoir", 5, _gen())
    assert idx.shape == (2, 3, 10)
    assert torch.all(idx[..., 1:] > idx[..., :-1])
    assert select(w, 80, "topk", 5, None).shape[-1] == 50
