"""The arithmetic of docs/algorithm.md, "Scoring", on small hand-made inputs."""

import torch

from kvstore.attention import scoring


def test_window_attention_is_causal_and_head_shared_over_gqa():
    q = torch.zeros(4, 2, 8)  # zero queries: uniform attention over what each query may see
    k = torch.randn(2, 4, 8)
    p = scoring.window_attention(q, k)
    assert p.shape == (4, 2, 4)
    torch.testing.assert_close(p[:, 0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]).expand(4, 4))
    torch.testing.assert_close(p[:, 1], torch.full((4, 4), 0.25))


def test_block_sum_pads_the_partial_tail_block():
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]])
    torch.testing.assert_close(scoring.block_sum(p, 2), torch.tensor([[0.3, 0.7, 0.0]]))


def test_rownorm_and_direct_score():
    torch.testing.assert_close(scoring.rownorm(torch.tensor([[1.0, 3.0]])), torch.tensor([[0.25, 0.75]]))
    s_hat = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    torch.testing.assert_close(scoring.direct_score(s_hat), torch.tensor([0.25, 0.5, 0.25]))


def test_walk_gamma_c_and_normalisation():
    s_hat = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    # gamma_1 = 1, C = [.5, .5, 0]; gamma_2 = 1 + <[0, .5, .5], C> = 1.25, C = [.5, 1.125, .625]; sum 2.25
    torch.testing.assert_close(scoring.walk(s_hat, 3), torch.tensor([0.5, 1.125, 0.625]) / 2.25)
    # H = 1 walks only the most recent row
    torch.testing.assert_close(scoring.walk(s_hat, 1), torch.tensor([0.0, 0.5, 0.5]))
    assert torch.count_nonzero(scoring.walk(s_hat, 0)) == 0


def test_walk_uses_the_most_recent_rows_oldest_first():
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    # H = 2 on 3 rows: rows 1 then 2 -> same as the two-row case above
    torch.testing.assert_close(scoring.walk(rows, 2), torch.tensor([0.5, 1.125, 0.625]) / 2.25)


def test_weights_add_lambda_walk_and_recency_tie_break():
    s_hat = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    a = torch.tensor([0.25, 0.5, 0.25])
    c = torch.tensor([0.5, 1.125, 0.625]) / 2.25
    r = torch.tensor([0.0, 0.5, 1.0])
    w = scoring.nexus_weights(s_hat, walk_steps=3, lam=0.5, eps_tie=1e-6)
    torch.testing.assert_close(w, a + 0.5 * c + 1e-6 * r)
    # equal scores: the tie-break favours the newer block, and never flips a real difference
    flat = scoring.nexus_weights(torch.full((2, 4), 0.25), walk_steps=0, lam=0.0)
    assert torch.all(flat[1:] > flat[:-1])
    assert scoring.recency_ramp(1).tolist() == [0.0]


def test_one_batched_walk_per_kv_head_equals_walking_each_head():
    """The per-kv-head score walks all heads in one set of ops (a leading dimension), with the same result as
    walking each head alone, to the bit (what the cache keeps does not change)."""
    s_hat = scoring.rownorm(torch.rand(8, 16, 300, generator=torch.Generator().manual_seed(0)) ** 4)  # [Hkv, W, N_k]
    for steps in (0, 3, 20):  # 20 > W: every row
        alone = torch.stack([scoring.nexus_weights(s, steps, 0.5, 1e-6) for s in s_hat])
        assert torch.equal(scoring.nexus_weights(s_hat, steps, 0.5, 1e-6), alone)


def test_window_block_scores_rows_sum_to_one():
    s_hat = scoring.window_block_scores(torch.randn(4, 16, 8), torch.randn(2, 100, 8), 32)
    assert s_hat.shape == (16, 4)
    torch.testing.assert_close(s_hat.sum(-1), torch.ones(16))
