"""Fused Triton kernel of one decode step's attention: for ONE decoded query per sequence, the attention output and
the attention mass each held key receives (what H2O and the default memory accumulate), in one pass over the keys.

The torch reference is `kvstore.attention.decode.decode_attention_with_mass` (out as `decode_attention`'s; mass
as `per_kv_head(attention_received(...))` of the one query: each query head's softmax probability, averaged over the
query heads of each kv head). Split-K ("flash-decoding"), two launches:
1. `_split_kernel`: one program per (sequence x kv head, split of the keys). It loads the kv head's G query heads once
   (G = Hq / Hkv, padded to 16 rows for `tl.dot`) and streams its tiles of keys and values: fp32 logits, online max
   and denominator, unnormalized partial output. It writes the split's partial lse [B, Hq, S] and output
   [B, Hq, S, D], and every key's masked fp32 logit [B, Hq, T] (-inf where a key is not held). The logits are the
   mass's share of the pass: the final lse is not known before every split is done, and a decoded token has one
   query, so its logits are only T floats per query head (4 bytes of a key's 2 * D * 2 bytes read).
2. `_combine_kernel`: one program per (sequence x kv head, tile of keys). It folds the S partial lse of its G heads
   into the lse (a few floats); the programs of the first tile also fold the S partial outputs into the output; every
   program turns its tile of logits into mass = mean over the group of exp(logit - lse). An elementwise pass over the
   [B, Hq, T] fp32 logits, never over K or V. A kernel rather than torch ops: the combine and the mass would take
   ~8 torch launches (logsumexp, exp, weighted sum, division, exp, mean, casts) on every layer of every decoded token.

Products run on the tensor cores in the inputs' dtype with fp32 accumulation (the probabilities are cast to the
values' dtype for P V, as flash attention does); fp32 inputs use IEEE products. A sequence that holds no key gets
output 0 and mass 0.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

TILE = 64  # keys per tl.dot of the first pass
CTILE = 256  # keys per program of the combine (mass) pass
GROUP_ROWS = 16  # query heads of a group are padded to this many rows (tl.dot's least M)
TARGET_PROGRAMS = 264  # enough programs of the first pass for 2 waves on a 132-SM H200
MAX_SPLITS = 64


# lengths change at every decoded token: do not compile a variant per value class of them
@triton.jit(do_not_specialize=["T", "tiles_per_split"])
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    valid_ptr,
    len_ptr,
    logit_ptr,
    part_lse_ptr,
    part_out_ptr,
    sqb,
    sqh,
    sqd,
    skb,
    skh,
    skt,
    skd,
    svb,
    svh,
    svt,
    svd,
    smb,
    smh,
    smt,
    T,
    Hkv,
    n_splits,
    tiles_per_split,
    scale,
    G: tl.constexpr,
    GP: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    TILE: tl.constexpr,
    HAS_VALID: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Online softmax of one kv head's G query heads over this split's keys -> part_lse_ptr[b, Hq, S] (-inf: the
    split holds no key), part_out_ptr[b, Hq, S, D] (normalized within the split; 0 when empty), and each key's
    masked logit -> logit_ptr[b, Hq, T]."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid // Hkv).to(tl.int64)
    kv = pid % Hkv
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    row_ok = g < G
    d_ok = d < D
    heads = kv * G + g  # query head h reads kv head h // G
    rows = b * (Hkv * G) + heads  # flat (sequence, query head) index, int64
    q_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + b * sqb + heads[:, None] * sqh + d[None, :] * sqd, mask=q_mask, other=0.0)  # [GP, DP]
    if UPCAST:
        q = q.to(tl.float32)
    k_base = k_ptr + b * skb + kv * skh
    v_base = v_ptr + b * svb + kv * svh
    n = T
    if HAS_LENGTHS:
        n = tl.minimum(tl.load(len_ptr + b), T)
    start = split * tiles_per_split * TILE
    end = tl.minimum(start + tiles_per_split * TILE, n)  # keys past the sequence's length: not read
    m = tl.full([GP], float("-inf"), tl.float32)
    den = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    for t0 in range(start, end, TILE):
        t = t0 + tl.arange(0, TILE)
        ok = t < end
        if HAS_VALID:
            ok = ok & (tl.load(valid_ptr + b * smb + kv * smh + t * smt, mask=ok, other=0) != 0)
        k_mask = d_ok[:, None] & ok[None, :]
        k_t = tl.load(k_base + d[:, None] * skd + t[None, :] * skt, mask=k_mask, other=0.0)  # [DP, TILE]
        if UPCAST:
            k_t = k_t.to(tl.float32)
        if IEEE:
            s = tl.dot(q, k_t, input_precision="ieee")
        else:
            s = tl.dot(q, k_t)
        s = tl.where(ok[None, :], s * scale, float("-inf"))  # [GP, TILE] fp32
        tl.store(logit_ptr + rows[:, None] * T + t[None, :], s, mask=row_ok[:, None] & (t < end)[None, :])
        m_new = tl.maximum(m, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet keep den 0, acc 0, m -inf
        p = tl.exp(s - m_ref[:, None])
        alpha = tl.exp(m - m_ref)
        # masked (not other=0 only past T): a slot that is not held may hold anything, NaN included, and 0 * NaN
        v = tl.load(v_base + t[:, None] * svt + d[None, :] * svd, mask=ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        if IEEE:
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        den = den * alpha + tl.sum(p, 1)
        m = m_new
    # den >= 1 wherever m is finite: the clamps only keep log(0) and 0 / 0 away from splits that held no key
    lse = tl.where(den > 0, m + tl.log(tl.maximum(den, 1e-30)), float("-inf"))
    part = rows * n_splits + split
    tl.store(part_lse_ptr + part, lse, mask=row_ok)
    out = acc / tl.maximum(den, 1e-30)[:, None]
    tl.store(part_out_ptr + part[:, None] * D + d[None, :], out, mask=row_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=["T"])
def _combine_kernel(
    logit_ptr,
    part_lse_ptr,
    part_out_ptr,
    len_ptr,
    out_ptr,
    mass_ptr,
    T,
    Hkv,
    n_splits,
    inv_group,
    G: tl.constexpr,
    GP: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    SP: tl.constexpr,
    CTILE: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
):
    """lse of the kv head's G query heads from the splits' partial lse; the first tile's programs also write the
    output out_ptr[b, Hq, D]; every program writes its keys' mass (mean over the group) -> mass_ptr[b, Hkv, T]."""
    pid = tl.program_id(0)
    tile = tl.program_id(1)
    b = (pid // Hkv).to(tl.int64)
    kv = pid % Hkv
    g = tl.arange(0, GP)
    row_ok = g < G
    rows = b * (Hkv * G) + kv * G + g
    sp = tl.arange(0, SP)
    part = tl.load(
        part_lse_ptr + rows[:, None] * n_splits + sp[None, :],
        mask=row_ok[:, None] & (sp < n_splits)[None, :],
        other=float("-inf"),
    )  # [GP, SP]
    m = tl.max(part, 1)
    m_ref = tl.where(m == float("-inf"), 0.0, m)  # a head that saw no key in any split: den 0
    den = tl.sum(tl.exp(part - m_ref[:, None]), 1)
    lse = tl.where(den > 0, m_ref + tl.log(tl.maximum(den, 1e-30)), float("inf"))  # +inf: probability 0
    if tile == 0:
        d = tl.arange(0, DP)
        o_mask = row_ok[:, None] & (d < D)[None, :]
        acc = tl.zeros([GP, DP], tl.float32)
        for s in range(0, n_splits):
            w = tl.exp(tl.load(part_lse_ptr + rows * n_splits + s, mask=row_ok, other=float("-inf")) - m_ref)
            o = tl.load(part_out_ptr + (rows * n_splits + s)[:, None] * D + d[None, :], mask=o_mask, other=0.0)
            acc += w[:, None] * o
        acc = acc / tl.maximum(den, 1e-30)[:, None]
        tl.store(out_ptr + rows[:, None] * D + d[None, :], acc.to(out_ptr.dtype.element_ty), mask=o_mask)
    t = tile * CTILE + tl.arange(0, CTILE)
    n = T
    if HAS_LENGTHS:
        n = tl.minimum(tl.load(len_ptr + b), T)
    logits = tl.load(logit_ptr + rows[:, None] * T + t[None, :], mask=row_ok[:, None] & (t < n)[None, :],
                     other=float("-inf"))  # fmt: skip
    mass = tl.sum(tl.exp(logits - lse[:, None]), 0) * inv_group  # unread slots (-inf) and padding rows: 0
    tl.store(mass_ptr + (b * Hkv + kv) * T + t, mass, mask=t < T)


INTERPRETED = type(_split_kernel).__name__ == "InterpretedFunction"  # TRITON_INTERPRET=1 when this module loaded


def _splits(tiles: int, seqs_heads: int, num_splits: int | None) -> tuple[int, int]:
    """(splits, tiles per split): enough programs to fill the GPU (TARGET_PROGRAMS), each split at least one tile."""
    want = num_splits if num_splits is not None else triton.cdiv(TARGET_PROGRAMS, seqs_heads)
    want = max(1, min(want, tiles, MAX_SPLITS))
    per_split = triton.cdiv(tiles, want)
    return triton.cdiv(tiles, per_split), per_split


def triton_decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and per-key attention mass of one decoded query per sequence, fused.

    Parameters
    ----------
    query : [B, Hq, 1, D] (bf16, fp16 or fp32; any strides).
    key, value : [B, Hkv, T, D], same dtype and device (any strides: views of the layer's preallocated buffers);
        Hq a multiple of Hkv (GQA: query head h reads kv head h // (Hq / Hkv)). T >= 1.
    scale : logit scale, 1 / sqrt(D) by default.
    key_valid : [B, Hkv, T] bool, the slots that hold a token (head-masking policies' holes; None: all; any strides).
    lengths : [B] integers, the held length of each sequence (keys from it on are not read; None: T each).
    num_splits : how many splits of the keys (None: enough to fill the GPU); for tests.

    Returns
    -------
    out [B, 1, Hq, D] in the values' dtype, and mass [B, Hkv, T] float32: each key's softmax probability averaged
    over its kv head's query heads (0 for slots that hold no token; each row sums to 1 when it holds any).
    """
    if query.dim() != 4 or key.dim() != 4 or query.shape[2] != 1 or key.shape != value.shape:
        raise ValueError(
            f"expected query [B, Hq, 1, D], key/value [B, Hkv, T, D]; got {tuple(query.shape)}, {tuple(key.shape)}, "
            f"{tuple(value.shape)}"
        )
    b, hq, _, d = query.shape
    _, hkv, t, _ = key.shape
    if key.shape[0] != b or key.shape[3] != d or hq % hkv or t < 1:
        raise ValueError(f"incompatible query {tuple(query.shape)} and key/value {tuple(key.shape)}")
    if not (query.dtype == key.dtype == value.dtype) or not (query.device == key.device == value.device):
        raise ValueError(f"query, key and value differ: {query.dtype}/{key.dtype}/{value.dtype} on {query.device}")
    if key_valid is not None and key_valid.shape != (b, hkv, t):
        raise ValueError(f"expected key_valid [B, Hkv, T] = {(b, hkv, t)}, got {tuple(key_valid.shape)}")
    group = hq // hkv
    if group > GROUP_ROWS:
        raise ValueError(f"at most {GROUP_ROWS} query heads per kv head, got {group}")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    dp = max(16, triton.next_power_of_2(d))
    dev = key.device
    # triton's interpreter (3.9) computes bf16 tl.dot wrongly: upcast there (exact: a bf16 product fits fp32)
    upcast = INTERPRETED and query.dtype == torch.bfloat16
    ieee = upcast or query.dtype == torch.float32
    if key_valid is None:
        valid, mstrides = key, (0, 0, 0)  # any pointer when unused
    else:
        valid = key_valid.to(dev).view(torch.uint8)  # a view (bool and uint8 share a size): no copy, any strides
        mstrides = valid.stride()
    lens = key if lengths is None else lengths.to(device=dev, dtype=torch.int32)
    n_splits, per_split = _splits(triton.cdiv(t, TILE), b * hkv, num_splits)
    logits = torch.empty(b, hq, t, device=dev, dtype=torch.float32)
    part_lse = torch.empty(b, hq, n_splits, device=dev, dtype=torch.float32)
    part_out = torch.empty(b, hq, n_splits, d, device=dev, dtype=torch.float32)
    sq = query.stride()
    _split_kernel[(b * hkv, n_splits)](
        query, key, value, valid, lens, logits, part_lse, part_out, sq[0], sq[1], sq[3], *key.stride(),
        *value.stride(), *mstrides, t, hkv, n_splits, per_split, scale, G=group, GP=GROUP_ROWS, D=d, DP=dp,
        TILE=TILE, HAS_VALID=key_valid is not None, HAS_LENGTHS=lengths is not None, IEEE=ieee, UPCAST=upcast,
        num_warps=4,
    )  # fmt: skip
    out = torch.empty(b, 1, hq, d, device=dev, dtype=value.dtype)
    mass = torch.empty(b, hkv, t, device=dev, dtype=torch.float32)
    _combine_kernel[(b * hkv, triton.cdiv(t, CTILE))](
        logits, part_lse, part_out, lens, out, mass, t, hkv, n_splits, 1.0 / group, G=group, GP=GROUP_ROWS, D=d,
        DP=dp, SP=max(2, triton.next_power_of_2(n_splits)), CTILE=CTILE, HAS_LENGTHS=lengths is not None,
        num_warps=4,
    )  # fmt: skip
    return out, mass
