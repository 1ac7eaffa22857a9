"""Fused Triton kernel for the window block scores of Nexus scoring (docs/algorithm.md, "Scoring", steps 1-3).

Based on "Nexus Sampling" (seeds/nexus-sampling-paper.txt, section 2.2): S-hat = rownorm(BlockSum_b(head-mean(
softmax(Q K^T / sqrt(D))))). The torch reference is `kvstore.attention.scoring.window_block_scores`; this module needs
triton.

Two passes over the held keys, flash-attention style, never writing the [Hq, W, T] probabilities to memory:
1. `_lse_kernel`: each program takes a chunk of keys and, for every query head, the window rows' online max and
   denominator over its chunk -> partial log-sum-exp [P, Hq, WP]; torch folds the chunks into one lse per row.
2. `_block_kernel`: each program takes a tile of keys (whole blocks), recomputes the logits, turns them into
   probabilities with the lse, sums them over the query heads (all of them, or each kv head's group: one output
   per kv head, the per-kv-head score of the default memory) and then over each block's tokens -> [(Hkv,) WP, N_k].
GQA: `GB` query heads that share a kv head are stacked as GB * WP rows of one `tl.dot`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MAX_ROWS = 64  # query rows (heads x padded window) per tl.dot; more window rows are scored in chunks
LSE_TILE = 64  # keys per inner step of the lse pass
TARGET_PROGRAMS = 264  # enough programs for 2 waves on a 132-SM H200


@triton.jit
def _load_q(q_ptr, hb, sqh, sqw, sqd, W, D: tl.constexpr, DP: tl.constexpr, WP: tl.constexpr, GB: tl.constexpr):
    """Window queries of heads hb*GB .. hb*GB+GB-1 stacked as rows [GB * WP, DP] (padding rows and dims are 0)."""
    rows = tl.arange(0, GB * WP)
    r_i = rows % WP
    d = tl.arange(0, DP)
    ptrs = q_ptr + (hb * GB + rows // WP)[:, None] * sqh + r_i[:, None] * sqw + d[None, :] * sqd
    return tl.load(ptrs, mask=(r_i < W)[:, None] & (d < D)[None, :], other=0.0)


@triton.jit
def _logits(
    q, k_ptr, t, skt, skd, T, last, scale, D: tl.constexpr, DP: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr
):
    """Scaled logits [rows, len(t)] of q against keys t of one kv head; -inf where key t > last[row] (causal)."""
    d = tl.arange(0, DP)
    k_mask = (d < D)[:, None] & (t < T)[None, :]
    k_t = tl.load(k_ptr + d[:, None] * skd + t[None, :] * skt, mask=k_mask, other=0.0)  # [DP, TILE]
    if UPCAST:
        q = q.to(tl.float32)
        k_t = k_t.to(tl.float32)
    if IEEE:
        s = tl.dot(q, k_t, input_precision="ieee")
    else:
        s = tl.dot(q, k_t)
    return tl.where(t[None, :] <= last[:, None], s * scale, float("-inf"))


@triton.jit
def _last_key(first_pos, W, WP: tl.constexpr, GB: tl.constexpr):
    """Last key each stacked row may see: window row i sits at key first_pos + i; padding rows see none (-1)."""
    r_i = tl.arange(0, GB * WP) % WP
    return tl.where(r_i < W, first_pos + r_i, -1)


# lengths change at every eviction step: do not compile a variant per value class (== 1, % 16) of them
@triton.jit(do_not_specialize=["T", "first_pos", "tiles_per_prog"])
def _lse_kernel(
    q_ptr,
    k_ptr,
    lse_ptr,
    sqh,
    sqw,
    sqd,
    skh,
    skt,
    skd,
    T,
    W,
    first_pos,
    n_hb,
    group,
    scale,
    tiles_per_prog,
    D: tl.constexpr,
    DP: tl.constexpr,
    WP: tl.constexpr,
    GB: tl.constexpr,
    TILE: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Partial log-sum-exp of each (head, window row) over this program's chunk of keys -> lse_ptr[pid, Hq, WP]."""
    pid = tl.program_id(0)
    rows = tl.arange(0, GB * WP)
    last = _last_key(first_pos, W, WP, GB)
    start = pid * tiles_per_prog * TILE
    for hb in range(0, n_hb):
        q = _load_q(q_ptr, hb, sqh, sqw, sqd, W, D, DP, WP, GB)
        k_head = k_ptr + ((hb * GB) // group) * skh
        m = tl.full([GB * WP], float("-inf"), tl.float32)
        acc = tl.zeros([GB * WP], tl.float32)
        for it in range(0, tiles_per_prog):
            t = start + it * TILE + tl.arange(0, TILE)
            s = _logits(q, k_head, t, skt, skd, T, last, scale, D, DP, IEEE, UPCAST)
            m_new = tl.maximum(m, tl.max(s, 1))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet keep acc 0, m -inf
            acc = acc * tl.exp(m - m_ref) + tl.sum(tl.exp(s - m_ref[:, None]), 1)
            m = m_new
        # acc >= 1 wherever m is finite, so the clamp only keeps log(0) away from rows that saw nothing (-inf)
        tl.store(lse_ptr + (pid * n_hb + hb) * GB * WP + rows, m + tl.log(tl.maximum(acc, 1e-30)))


@triton.jit(do_not_specialize=["T", "first_pos", "n_blocks"])
def _block_kernel(
    q_ptr,
    k_ptr,
    lse_ptr,
    out_ptr,
    sqh,
    sqw,
    sqd,
    skh,
    skt,
    skd,
    T,
    W,
    first_pos,
    hb_per_out,
    group,
    scale,
    n_blocks,
    inv_heads,
    D: tl.constexpr,
    DP: tl.constexpr,
    WP: tl.constexpr,
    GB: tl.constexpr,
    BLOCK: tl.constexpr,
    TILE: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Head-averaged probability mass of each block of this program's key tile -> out_ptr[o, W, n_blocks], where
    output o (program axis 1) averages the `hb_per_out` stacks of query heads from o * hb_per_out on: all heads (one
    output), or one kv head's group (one output per kv head)."""
    pid = tl.program_id(0)
    o = tl.program_id(1)
    rows = tl.arange(0, GB * WP)
    last = _last_key(first_pos, W, WP, GB)
    t = pid * TILE + tl.arange(0, TILE)
    acc = tl.zeros([WP, TILE], tl.float32)
    for hb in range(o * hb_per_out, (o + 1) * hb_per_out):
        q = _load_q(q_ptr, hb, sqh, sqw, sqd, W, D, DP, WP, GB)
        k_head = k_ptr + ((hb * GB) // group) * skh
        s = _logits(q, k_head, t, skt, skd, T, last, scale, D, DP, IEEE, UPCAST)
        lse = tl.load(lse_ptr + hb * GB * WP + rows)  # +inf for rows that see no key: probability 0
        p = tl.exp(s - lse[:, None])  # [GB * WP, TILE]
        acc += tl.sum(tl.reshape(p, [GB, WP, TILE]), 0)
    blocks = tl.sum(tl.reshape(acc * inv_heads, [WP, TILE // BLOCK, BLOCK]), 2)  # [WP, TILE // BLOCK]
    r_i = tl.arange(0, WP)
    j = pid * (TILE // BLOCK) + tl.arange(0, TILE // BLOCK)
    mask = (r_i < W)[:, None] & (j < n_blocks)[None, :]
    tl.store(out_ptr + (o * W + r_i[:, None]) * n_blocks + j[None, :], blocks, mask=mask)


INTERPRETED = type(_lse_kernel).__name__ == "InterpretedFunction"  # TRITON_INTERPRET=1 when this module loaded


def _heads_per_dot(group: int, wp: int) -> int:
    """Largest power of two dividing the GQA group size with GB * WP <= MAX_ROWS (at least 1)."""
    gb = 1
    while group % (gb * 2) == 0 and gb * 2 * wp <= MAX_ROWS:
        gb *= 2
    return gb


def _warps(dp: int, rows: int, tile: int) -> int:
    """8 warps for head_dim 128 or large tiles: with 4, ptxas (sm_90) spills registers (checked AOT, triton 3.9)."""
    return 8 if dp >= 128 or rows * tile >= 8192 else 4


def _check(q_win: torch.Tensor, keys: torch.Tensor, block: int) -> None:
    if q_win.dim() != 3 or keys.dim() != 3:
        raise ValueError(f"expected q_win [Hq, W, D], keys [Hkv, T, D]; got {tuple(q_win.shape)}, {tuple(keys.shape)}")
    if q_win.shape[0] % keys.shape[0] or q_win.shape[2] != keys.shape[2]:
        raise ValueError(f"incompatible heads or head_dim: q_win {tuple(q_win.shape)}, keys {tuple(keys.shape)}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    if q_win.dtype != keys.dtype or q_win.device != keys.device:
        raise ValueError(f"q_win and keys differ: {q_win.dtype}/{q_win.device} vs {keys.dtype}/{keys.device}")


def _block_mass(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float, first_pos: int, per_kv: bool
) -> torch.Tensor:
    """Head-averaged block mass (fp32, not normalized) of at most MAX_ROWS window rows at first_pos..: [w, N_k]
    averaged over all query heads, or with `per_kv` [Hkv, w, N_k] over each kv head's group."""
    hq, w, d = q_win.shape
    hkv, t, _ = keys.shape
    wp, dp = max(16, triton.next_power_of_2(w)), max(16, triton.next_power_of_2(d))
    group = hq // hkv
    gb = _heads_per_dot(group, wp)
    # triton's interpreter (3.9) computes bf16 tl.dot wrongly: upcast there (exact: a bf16 product fits fp32)
    upcast = INTERPRETED and q_win.dtype == torch.bfloat16
    common = dict(D=d, DP=dp, WP=wp, GB=gb, IEEE=upcast or q_win.dtype == torch.float32, UPCAST=upcast)
    strides = (*q_win.stride(), *keys.stride())
    n_tiles = triton.cdiv(t, LSE_TILE)
    per_prog = triton.cdiv(n_tiles, TARGET_PROGRAMS)
    n_prog = triton.cdiv(n_tiles, per_prog)
    part = torch.empty(n_prog, hq, wp, device=keys.device, dtype=torch.float32)  # [P, Hq, WP] partial lse
    _lse_kernel[(n_prog,)](
        q_win, keys, part, *strides, t, w, first_pos, hq // gb, group, scale, per_prog, TILE=LSE_TILE,
        num_warps=_warps(dp, gb * wp, LSE_TILE), **common,
    )  # fmt: skip
    lse = torch.logsumexp(part, dim=0)  # [Hq, WP]
    lse = lse.masked_fill(lse == float("-inf"), float("inf"))  # a row that sees no key gets probability 0
    n_blocks = triton.cdiv(t, block)
    tile = max(block, 64)
    outs = hkv if per_kv else 1
    out = torch.empty(outs, w, n_blocks, device=keys.device, dtype=torch.float32)
    _block_kernel[(triton.cdiv(t, tile), outs)](
        q_win,
        keys,
        lse,
        out,
        *strides,
        t,
        w,
        first_pos,
        hq // gb // outs,
        group,
        scale,
        n_blocks,
        outs / hq,
        BLOCK=block,
        TILE=tile,
        num_warps=_warps(dp, gb * wp, tile),
        **common,
    )
    return out if per_kv else out[0]


def triton_window_block_scores(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float | None = None, per_kv: bool = False
) -> torch.Tensor:
    """S-hat of the window queries over the held keys, fused: same contract as
    `kvstore.attention.scoring.window_block_scores`.

    Parameters
    ----------
    q_win : [Hq, W, D] window queries (bf16, fp16 or fp32; any strides). Row i sits at key index T - W + i.
    keys : [Hkv, T, D] held keys, same dtype and device; Hq must be a multiple of Hkv (GQA).
    block : tokens per block b (a power of two); the last block may be partial.
    scale : logit scale, 1 / sqrt(D) by default.
    per_kv : average each kv head's group of query heads, not all heads
        (`kvstore.attention.scoring.kv_head_block_scores`).

    Returns
    -------
    [W, ceil(T / b)] float32 ([Hkv, W, ceil(T / b)] with `per_kv`), each row summing to 1 (a row that sees no key,
    possible only when T < W, is 0).
    """
    _check(q_win, keys, block)
    hq, w, d = q_win.shape
    t = keys.shape[1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    parts = [
        _block_mass(q_win[:, w0 : w0 + MAX_ROWS], keys, block, scale, t - w + w0, per_kv)
        for w0 in range(0, w, MAX_ROWS)
    ]
    s = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)  # [(Hkv,) W, N_k]
    return s / s.sum(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
