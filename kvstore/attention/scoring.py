"""Nexus scoring (docs/algorithm.md, "Scoring"): window attention -> block distribution -> direct score + walk.

Based on "Nexus Sampling" (seeds/nexus-sampling-paper.txt, section 2.2, Eqs. 1-5). The torch code here is the
reference (and the CPU path); `kvstore.attention.triton_scores` is the fused Triton version of `window_block_scores`
and `kv_head_block_scores`, run on CUDA by `kvstore.attention.dispatch` (`fused_window_block_scores`,
`fused_kv_head_block_scores`).
"""

from __future__ import annotations

import math

import torch


def window_attention(q_win: torch.Tensor, keys: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal softmax attention of the window queries over the held keys, per query head.

    Parameters
    ----------
    q_win : [Hq, W, D] the last W queries of the layer (after RoPE / q-norm, as attention used them).
        Window query i sits at key index T - W + i and sees keys 0 .. T - W + i.
    keys : [Hkv, T, D] held keys (already rotated); GQA repeats each kv head for Hq // Hkv query heads.

    Returns
    -------
    [Hq, W, T] float32 probabilities, each row summing to 1.
    """
    hq, w, d = q_win.shape
    hkv, t, _ = keys.shape
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    # GQA without repeating the keys: query head h = kv * G + g, so group the queries by their kv head
    q = q_win.float().reshape(hkv, (hq // hkv) * w, d)  # [Hkv, G*W, D]
    logits = torch.matmul(q, keys.float().transpose(1, 2)).view(hq, w, t) * scale  # [Hq, W, T]
    # query i (0-based in the window) may see keys j <= t - w + i: only the last w columns can be masked
    tail = min(w, t)
    j = torch.arange(t - tail, t, device=keys.device)
    limit = torch.arange(w, device=keys.device) + (t - w)
    logits[..., t - tail :] = logits[..., t - tail :].masked_fill(j[None, :] > limit[:, None], float("-inf"))
    return torch.softmax(logits, dim=-1)


def block_sum(p: torch.Tensor, block: int) -> torch.Tensor:
    """Sum the last dimension over consecutive blocks of `block` entries: [..., T] -> [..., ceil(T / block)]."""
    t = p.shape[-1]
    n = -(-t // block)
    pad = n * block - t
    if pad:
        p = torch.nn.functional.pad(p, (0, pad))
    return p.reshape(*p.shape[:-1], n, block).sum(-1)


def block_spread(s: torch.Tensor, block: int, t: int) -> torch.Tensor:
    """Each block's value on every one of its tokens: [..., ceil(t / block)] -> [..., t] (block_sum's shape, back)."""
    return s.repeat_interleave(block, -1)[..., :t]


def rownorm(s: torch.Tensor) -> torch.Tensor:
    """Normalize each row to sum 1 (rows of zeros stay zero)."""
    return s / s.sum(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)


def window_block_scores(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float | None = None
) -> torch.Tensor:
    """S-hat = rownorm(BlockSum_b(head-mean(softmax(Q K^T / sqrt(D))))): [Hq, W, D] x [Hkv, T, D] -> [W, N_k]."""
    p = window_attention(q_win, keys, scale).mean(0)  # [W, T] head-averaged
    return rownorm(block_sum(p, block))


def kv_head_block_scores(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float | None = None
) -> torch.Tensor:
    """S-hat per kv head: the query heads of each kv head's group averaged, not all heads:
    [Hq, W, D] x [Hkv, T, D] -> [Hkv, W, N_k], each row summing to 1."""
    p = window_attention(q_win, keys, scale)  # [Hq, W, T]
    hq, w, t = p.shape
    p = p.view(keys.shape[0], hq // keys.shape[0], w, t).mean(1)  # [Hkv, W, T]
    return rownorm(block_sum(p, block))


def direct_score(s_hat: torch.Tensor) -> torch.Tensor:
    """a = mean of the W rows of S-hat (Eq. 1/3): [..., W, N_k] -> [..., N_k], summing to 1."""
    return s_hat.mean(-2)


def walk(s_hat: torch.Tensor, steps: int) -> torch.Tensor:
    """Bridge score c~ (Eq. 4): C = 0; for the `steps` most recent rows, oldest first, gamma = 1 + <a_q, C>,
    C += gamma * a_q; return C / ||C||_1. [..., W, N_k] -> [..., N_k]: leading dimensions are independent walks (one
    per kv head: one set of launches for all heads). With steps == 0 it returns zeros (no walk)."""
    c = torch.zeros(s_hat.shape[:-2] + s_hat.shape[-1:], dtype=s_hat.dtype, device=s_hat.device)
    if steps <= 0:
        return c
    w = s_hat.shape[-2]
    for i in range(max(0, w - steps), w):
        row = s_hat[..., i, :]
        gamma = 1.0 + (row * c).sum(-1, keepdim=True)
        c = c + gamma * row
    return c / c.sum(-1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)


def recency_ramp(n: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """r_j = j / (N_k - 1): 0 for the oldest block, 1 for the newest ([N_k]; a single block gets 0)."""
    if n <= 1:
        return torch.zeros(n, device=device, dtype=dtype)
    return torch.arange(n, device=device, dtype=dtype) / (n - 1)


def nexus_weights(s_hat: torch.Tensor, walk_steps: int = 3, lam: float = 0.5, eps_tie: float = 1e-6) -> torch.Tensor:
    """w_j = a_j + lam * c~_j + eps_tie * r_j (Eqs. 2 and 5): [..., W, N_k] -> [..., N_k]."""
    s = direct_score(s_hat)
    if lam:
        s = s + lam * walk(s_hat, walk_steps)
    return s + eps_tie * recency_ramp(s.shape[-1], s.device, s.dtype)
