"""The attention held tokens receive from a run of queries: the torch reference (and CPU path) of the statistics
H2O, SnapKV, MorphKV and the default memory score with, and of the fused kernel `kvstore.attention.triton_received`
(`fused_received_attention` dispatches to it where it runs).

Shapes: queries [Hq, q, D] sit at the last q key positions (causal); keys [Hkv, T, D] (GQA: query head h reads kv
head h // (Hq / Hkv)). Per kv head, the query heads of its group are averaged (kvpress's convention).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from kvstore.attention.dispatch import fused_received_attention


class HeldKeys(Protocol):
    """What the per-kv-head statistics read of one layer: its held keys and recent queries and how to attend them
    (a policy's kvstore.policies.base.ScoreContext is one)."""

    keys: torch.Tensor  # [B, Hkv, T, D] held keys (already rotated)
    queries: torch.Tensor  # [B, Hq, W', D] the most recent queries of this layer
    valid: torch.Tensor | None  # [B, Hkv, T] bool, head-masking policies: False = padded slot
    scaling: float | None  # the attention scale the model used (None: 1/sqrt(D))
    max_elems: int  # most fp32 probabilities alive at once
    triton: bool  # False: the torch paths even where the fused kernels run


def attention_received(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    max_elems: int = 1 << 24,
    reduce: str = "sum",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention each key receives from `queries`, per query head, computed over chunks of queries.

    queries: [Hq, q, D], the queries at the last q key positions (causal: query i sees keys j <= T - q + i).
    keys: [Hkv, T, D] (GQA: query head h reads kv head h // (Hq / Hkv)). key_valid: [Hkv, T] bool or None.
    Returns [Hq, T] float32: the sum (or max) over the queries of softmax(q k^T * scale), each query's row scaled
    by `weights` [q] when given (a sum only). At most `max_elems` logits ([Hq, chunk, T]) exist at once, in one
    buffer reused chunk after chunk, so memory stays O(Hq * T) however many queries come.
    """
    if reduce == "sum":
        coefs = torch.ones(1, queries.shape[1]) if weights is None else weights[None]
        return received_sums(queries, keys, scale, key_valid, max_elems, coefs)[0]
    out = torch.zeros(queries.shape[0], keys.shape[1], device=keys.device)
    for _, logits in _masked_logits(queries, keys, scale, key_valid, max_elems):
        torch.maximum(out, torch.softmax(logits, dim=-1).amax(1), out=out)
    return out


def received_sums(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None,
    key_valid: torch.Tensor | None,
    max_elems: int,
    coefs: torch.Tensor,
) -> torch.Tensor:
    """attention_received's sums for k weightings of the queries in one pass: coefs [k, q] -> [k, Hq, T], row r
    the sum over the queries i of coefs[r, i] x softmax(q_i k^T * scale). Each chunk's probabilities are left
    unnormalised in the logits' buffer (exp(l - max)) and summed by one matmul with coefs / (each row's sum)."""
    hq, t = queries.shape[0], keys.shape[1]
    out = torch.zeros(hq, coefs.shape[0], t, device=keys.device)  # [Hq, k, T]
    for c0, logits in _masked_logits(queries, keys, scale, key_valid, max_elems):  # [Hq, c, T]
        logits.sub_(logits.amax(-1, keepdim=True)).exp_()
        w = coefs[:, c0 : c0 + logits.shape[1]].to(logits)[None] / logits.sum(-1)[:, None, :]  # [Hq, k, c]
        out.baddbmm_(w, logits)
    return out.transpose(0, 1)


def _masked_logits(
    queries: torch.Tensor, keys: torch.Tensor, scale: float | None, key_valid: torch.Tensor | None, max_elems: int
):
    """(c0, logits [Hq, c, T]) for the consecutive chunks of queries starting at c0: q k^T * scale, -inf where a
    query may not look (its future keys, invalid keys). Every chunk is written into the same buffer (a fresh
    buffer this large costs more in page faults than its matmul): use each before asking for the next."""
    hq, q, d = queries.shape
    hkv, t, _ = keys.shape
    g, dev = hq // hkv, keys.device
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    rows = max(1, min(q, max_elems // max(1, hq * t)))
    kt = keys.float().transpose(1, 2)  # [Hkv, D, T]
    buf = torch.empty(hq * rows * t, device=dev)
    bad_key = None if key_valid is None else ~key_valid.repeat_interleave(g, 0)[:, None, :]  # [Hq, 1, T]
    for c0 in range(0, q, rows):
        c = min(rows, q - c0)
        qc = queries[:, c0 : c0 + c].float() * scale  # [Hq, c, D] (scaled here: the [Hq, c, T] buffer stays one)
        logits = torch.matmul(qc.reshape(hkv, g * c, d), kt, out=buf[: hq * c * t].view(hkv, g * c, t))
        logits = logits.view(hq, c, t)
        sees = t - q + c0 + 1  # query i of the chunk sees keys j < sees + i: only columns >= sees are masked
        first = max(sees, 0)  # (more queries than keys: the first ones see none, their rows come out NaN)
        if first < t:
            future = torch.arange(first, t, device=dev)[None, :] >= (sees + torch.arange(c, device=dev))[:, None]
            logits[..., first:].masked_fill_(future, float("-inf"))
        if bad_key is not None:
            logits.masked_fill_(bad_key, float("-inf"))
        yield c0, logits


def per_kv_head(s: torch.Tensor, hkv: int, how: str = "mean") -> torch.Tensor:
    """[Hq, T] -> [Hkv, T]: reduce each kv head's group of query heads (mean, as kvpress; or max)."""
    grouped = s.view(hkv, -1, s.shape[-1])
    return grouped.mean(1) if how == "mean" else grouped.amax(1)


def head_token_attention(
    ctx: HeldKeys, queries: torch.Tensor | None = None, reduce: str = "sum", weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention each held token receives from `queries` (default: the window), summed (or maxed) over those
    queries and averaged over the query heads of each kv head: [B, Hkv, T]. Queries sit at the last positions;
    `weights` [q] weighs each query's share of a sum (e.g. 0/1: only some queries count)."""
    q = ctx.queries if queries is None else queries
    if reduce == "sum":
        return head_token_sums(ctx, q, [weights])[0]
    hkv = ctx.keys.shape[1]
    rows = []
    for i in range(ctx.keys.shape[0]):  # the max: the torch path only
        valid = None if ctx.valid is None else ctx.valid[i]
        rows.append(per_kv_head(attention_received(q[i], ctx.keys[i], ctx.scaling, valid, ctx.max_elems, reduce), hkv))
    return torch.stack(rows)


def weighting_coefs(weightings: list[torch.Tensor | None], q: int) -> torch.Tensor:
    """[k, q] float32 on the CPU: the weightings of q queries as rows (None: every query once)."""
    return torch.stack([torch.ones(q) if w is None else w.float().cpu() for w in weightings])


def head_token_sums(ctx: HeldKeys, queries: torch.Tensor, weightings: list[torch.Tensor | None]) -> torch.Tensor:
    """head_token_attention's sums for k weightings of the same `queries` [B, Hq, q, D] (each [q], or None: every
    query once; e.g. every query and the reply's only): [k, B, Hkv, T], from one pass over the logits on the torch
    path (the fused Triton kernel, where it runs, once per weighting)."""
    b, hkv, t = ctx.keys.shape[:3]
    q = queries.shape[2]
    coefs = weighting_coefs(weightings, q)  # [k, q]
    rows = []
    for i in range(b):
        valid = None if ctx.valid is None else ctx.valid[i]
        fused = (
            [fused_received_attention(queries[i], ctx.keys[i], ctx.scaling, valid, w) for w in weightings]
            if ctx.triton
            else []
        )
        if fused and all(s is not None for s in fused):
            rows.append(torch.stack(fused))
            continue
        s = received_sums(queries[i], ctx.keys[i], ctx.scaling, valid, ctx.max_elems, coefs)  # [k, Hq, T]
        rows.append(s.view(len(coefs), hkv, -1, t).mean(2))
    return torch.stack(rows, 1)
