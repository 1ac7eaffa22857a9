"""Fused Triton kernel for the attention each held token receives from a run of queries, per kv head: what H2O and
the default memory (`nexus-agent`) accumulate on every forward, and what SnapKV scores with its window.

The torch reference is `kvstore.attention.received.attention_received` followed by `per_kv_head` (mean over the query
heads of each kv head): it materializes fp32 probabilities [Hq, rows, T] chunk by chunk, which on a GPU costs several
times a prefill chunk's own forward (docs/benchmarks.md, "On a GPU"). Here two passes over the held keys,
flash-attention style, never write a probability to memory:
1. `_lse_kernel`: one program per (query head, tile of query rows) streams the keys it may see (causal, valid)
   with an online max and denominator -> the log-sum-exp of each row [Hq, q].
2. `_column_kernel`: one program per (kv head, tile of keys) recomputes the logits of every query row of the kv
   head's group against its keys, turns them into probabilities with the lse, weighs the rows and sums them ->
   [Hkv, T], divided by the group size.
Products run on the tensor cores in the inputs' dtype with fp32 accumulation; fp32 inputs use IEEE products.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kvstore.attention.triton_scores import INTERPRETED, _logits, _warps

ROWS = 64  # query rows per tl.dot
TILE = 64  # keys per tl.dot


@triton.jit
def _valid(valid_ptr, kv_head, t, T, HAS_VALID: tl.constexpr):
    """[len(t)] bool: the key slots that hold a token (all of them without a validity mask)."""
    if HAS_VALID:
        return tl.load(valid_ptr + kv_head * T + t, mask=t < T, other=0) != 0
    return t < T


@triton.jit
def _rows(q_ptr, head, r, sqh, sqr, sqd, Q, D: tl.constexpr, DP: tl.constexpr):
    """Query rows r of one head [ROWS, DP] (rows past Q and dims past D are 0)."""
    d = tl.arange(0, DP)
    ptrs = q_ptr + head * sqh + r[:, None] * sqr + d[None, :] * sqd
    return tl.load(ptrs, mask=(r < Q)[:, None] & (d < D)[None, :], other=0.0)


# lengths change at every forward: do not compile a variant per value class of them
@triton.jit(do_not_specialize=["T", "Q"])
def _lse_kernel(
    q_ptr,
    k_ptr,
    valid_ptr,
    lse_ptr,
    sqh,
    sqr,
    sqd,
    skh,
    skt,
    skd,
    T,
    Q,
    group,
    scale,
    D: tl.constexpr,
    DP: tl.constexpr,
    ROWS: tl.constexpr,
    TILE: tl.constexpr,
    HAS_VALID: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Log-sum-exp of each query row of one head over the keys it sees -> lse_ptr[head, Q] (+inf: sees none)."""
    head = tl.program_id(0)
    r = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    last = tl.where(r < Q, T - Q + r, -1)  # row i sits at key slot T - Q + i; padding rows see nothing
    q = _rows(q_ptr, head, r, sqh, sqr, sqd, Q, D, DP)
    kv = head // group
    m = tl.full([ROWS], float("-inf"), tl.float32)
    acc = tl.zeros([ROWS], tl.float32)
    n_tiles = tl.cdiv(tl.minimum(T, T - Q + tl.program_id(1) * ROWS + ROWS), TILE)  # keys past the last row: none
    for it in range(0, n_tiles):
        t = it * TILE + tl.arange(0, TILE)
        s = _logits(q, k_ptr + kv * skh, t, skt, skd, T, last, scale, D, DP, IEEE, UPCAST)
        s = tl.where(_valid(valid_ptr, kv, t, T, HAS_VALID)[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet keep acc 0, m -inf
        acc = acc * tl.exp(m - m_ref) + tl.sum(tl.exp(s - m_ref[:, None]), 1)
        m = m_new
    lse = tl.where(acc > 0, m + tl.log(tl.maximum(acc, 1e-30)), float("inf"))
    tl.store(lse_ptr + head * Q + r, lse, mask=r < Q)


@triton.jit(do_not_specialize=["T", "Q"])
def _column_kernel(
    q_ptr,
    k_ptr,
    valid_ptr,
    lse_ptr,
    w_ptr,
    out_ptr,
    sqh,
    sqr,
    sqd,
    skh,
    skt,
    skd,
    T,
    Q,
    group,
    scale,
    inv_group,
    D: tl.constexpr,
    DP: tl.constexpr,
    ROWS: tl.constexpr,
    TILE: tl.constexpr,
    HAS_VALID: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Probability mass each key of this tile receives from every row of the kv head's group -> out_ptr[kv, T]."""
    kv = tl.program_id(0)
    t = tl.program_id(1) * TILE + tl.arange(0, TILE)
    valid = _valid(valid_ptr, kv, t, T, HAS_VALID)
    acc = tl.zeros([TILE], tl.float32)
    first = tl.maximum(tl.program_id(1) * TILE - (T - Q), 0) // ROWS  # rows before it see none of these keys
    for g in range(0, group):
        head = kv * group + g
        for rt in range(first, tl.cdiv(Q, ROWS)):
            r = rt * ROWS + tl.arange(0, ROWS)
            last = tl.where(r < Q, T - Q + r, -1)
            q = _rows(q_ptr, head, r, sqh, sqr, sqd, Q, D, DP)
            s = _logits(q, k_ptr + kv * skh, t, skt, skd, T, last, scale, D, DP, IEEE, UPCAST)
            lse = tl.load(lse_ptr + head * Q + r, mask=r < Q, other=float("inf"))
            p = tl.where(valid[None, :], tl.exp(s - lse[:, None]), 0.0)  # [ROWS, TILE]
            if HAS_WEIGHTS:
                p = p * tl.load(w_ptr + r, mask=r < Q, other=0.0)[:, None]
            acc += tl.sum(p, 0)
    tl.store(out_ptr + kv * T + t, acc * inv_group, mask=t < T)


def triton_received_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention each key receives from `queries`, summed over them and averaged over each kv head's query heads.

    Parameters
    ----------
    queries : [Hq, q, D] (bf16, fp16 or fp32; any strides); row i sits at key slot T - q + i (causal).
    keys : [Hkv, T, D], same dtype and device; Hq a multiple of Hkv (GQA: query head h reads kv head h // group).
    scale : logit scale, 1 / sqrt(D) by default.
    key_valid : [Hkv, T] bool, the slots that hold a token (None: all).
    weights : [q], each row's share of the sum (e.g. 0/1: only some queries count); None: 1 each.

    Returns
    -------
    [Hkv, T] float32: per_kv_head(attention_received(queries, keys, scale, key_valid, weights=weights)).
    """
    if queries.dim() != 3 or keys.dim() != 3 or queries.shape[0] % keys.shape[0] or queries.shape[2] != keys.shape[2]:
        raise ValueError(
            f"expected queries [Hq, q, D], keys [Hkv, T, D]; got {tuple(queries.shape)}, {tuple(keys.shape)}"
        )
    if queries.dtype != keys.dtype or queries.device != keys.device:
        raise ValueError(f"queries and keys differ: {queries.dtype}/{queries.device} vs {keys.dtype}/{keys.device}")
    hq, q, d = queries.shape
    hkv, t, _ = keys.shape
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    dp = max(16, triton.next_power_of_2(d))
    # triton's interpreter (3.9) computes bf16 tl.dot wrongly: upcast there (exact: a bf16 product fits fp32)
    upcast = INTERPRETED and queries.dtype == torch.bfloat16
    common = dict(D=d, DP=dp, ROWS=ROWS, TILE=TILE, IEEE=upcast or queries.dtype == torch.float32, UPCAST=upcast)
    common |= dict(HAS_VALID=key_valid is not None, num_warps=_warps(dp, ROWS, TILE))
    valid = keys if key_valid is None else key_valid.to(torch.uint8).contiguous()  # any pointer when unused
    strides = (*queries.stride(), *keys.stride())
    lse = torch.empty(hq, q, device=keys.device, dtype=torch.float32)
    _lse_kernel[(hq, triton.cdiv(q, ROWS))](queries, keys, valid, lse, *strides, t, q, hq // hkv, scale, **common)
    w = lse if weights is None else weights.to(device=keys.device, dtype=torch.float32).contiguous()
    out = torch.empty(hkv, t, device=keys.device, dtype=torch.float32)
    _column_kernel[(hkv, triton.cdiv(t, TILE))](
        queries, keys, valid, lse, w, out, *strides, t, q, hq // hkv, scale, 1.0 / (hq // hkv),
        HAS_WEIGHTS=weights is not None, **common,
    )  # fmt: skip
    return out
