"""Attention of a multi-token forward on the CPU that also sums the attention each held key receives, in one pass.

H2O and the default memory (`nexus-agent`) accumulate, on every forward, what each held token receives from the
new queries. Computed apart (kvstore.attention.received.received_sums) those sums cost a second pass over the held keys
as long as attention itself: q k^T, a softmax, a reduction. Here the pass attention makes produces them: per chunk
of query rows, the fp32 logits q k^T * scale (causally masked: the queries are the last positions), their
unnormalised exponentials exp(l - row max), the output as exponentials @ values / row sums, and the sums as
(coefs / row sums) @ exponentials, one small matmul per weighting of the queries. The logits are fp32 and the
exponentials meet the values in the values' dtype, as torch's CPU flash-attention kernel does, so the output
matches sdpa's to rounding; the sums match `received_sums` to fp32 rounding.

Where it runs (`applies`): one sequence, several queries, the plain causal mask (or none), on the CPU, for a cache
layer whose policy asked for sums (kvstore.cache.layer.EvictingLayer.fused_weightings). Measured beside the full
cache with `nexus-agent bench overhead` (docs/benchmarks.md, "Prefill statistics in the attention pass").
"""

from __future__ import annotations

import math
import threading

import torch

from kvstore.attention.decode import plain

CHUNK_ELEMS = 1 << 22  # fp32 logits alive at once ([Hq, rows, T]: 16 MiB, reused chunk after chunk)
_buffers = threading.local()


def causal_mask(q: int, kv: int, device: torch.device) -> torch.Tensor:
    """The mask sdpa implies for q new queries after kv - q held keys: [1, 1, q, kv] bool, every held key and the
    new keys up to each query."""
    j = torch.arange(kv, device=device)
    i = torch.arange(q, device=device)
    return (j[None, :] <= kv - q + i[:, None])[None, None]


def applies(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> bool:
    """Whether `attention_with_sums` stands for the model's attention here: one sequence of several queries on the
    CPU, no dropout or variant (sliding window, soft-capping, sinks), and the causal mask of queries at the last
    positions (or no mask, which transformers passes when queries and keys are the same tokens)."""
    if query.device.type != "cpu" or query.shape[0] != 1 or query.shape[-2] < 2 or query.shape[-2] > key.shape[-2]:
        return False
    if not plain(kwargs):
        return False
    if attention_mask is None:
        return query.shape[-2] == key.shape[-2]
    if attention_mask.dtype != torch.bool or attention_mask.dim() != 4 or attention_mask.shape[0] != 1:
        return False
    q, t = query.shape[-2], key.shape[-2]
    if attention_mask.shape[-2:] != (q, t):
        return False
    return bool((attention_mask == causal_mask(q, t, query.device)).all())


def _buffer(elems: int) -> torch.Tensor:
    """A thread's fp32 scratch of at least `elems` (a fresh buffer per call costs more in page faults than its
    matmul; one per thread: the server's request threads never share it; one made in inference mode and one not)."""
    name = "inference" if torch.is_inference_mode_enabled() else "normal"  # an inference tensor is read-only outside
    buf = getattr(_buffers, name, None)
    if buf is None or buf.numel() < elems:
        buf = torch.empty(elems)
        setattr(_buffers, name, buf)
    return buf[:elems]


def attention_with_sums(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
    coefs: torch.Tensor,
    chunk_elems: int = CHUNK_ELEMS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """query [1, Hq, q, D] at the last q of key/value's [1, Hkv, T, D] positions; coefs [k, q] (one weighting of
    the queries per row). Returns the attention output [1, q, Hq, D] in value's dtype (transformers' layout of an
    attention function's output) and the sums [k, 1, Hkv, T] fp32: row r, the sum over the queries i of
    coefs[r, i] x softmax(q_i k^T * scale), averaged over the query heads of each kv head (what
    kvstore.attention.received.head_token_sums returns)."""
    _, hq, q, d = query.shape
    hkv, t = key.shape[1], key.shape[2]
    g, k = hq // hkv, coefs.shape[0]
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    kt = key[0].float().transpose(1, 2)  # [Hkv, D, T]
    v = value[0]  # the exponentials meet the values in their dtype (bf16: as the CPU flash kernel does)
    grouped = query[0].view(hkv, g, q, d)  # query head h reads kv head h // g
    rows = max(1, min(q, chunk_elems // max(1, hq * t)))
    buf = _buffer(hq * rows * t)
    out = torch.empty(hkv, g, q, d, dtype=value.dtype)
    sums = torch.zeros(hkv, k, t)
    coefs = coefs.float()
    for c0 in range(0, q, rows):
        c = min(rows, q - c0)
        qc = (grouped[:, :, c0 : c0 + c].float() * scale).reshape(
            hkv, g * c, d
        )  # never in place: .float() of fp32 is query
        e = torch.matmul(qc, kt, out=buf[: hq * c * t].view(hkv, g * c, t)).view(hkv, g, c, t)
        sees = t - q + c0 + 1  # query i of the chunk sees keys j < sees + i: only columns >= sees are masked
        if sees < t:
            future = torch.arange(sees, t)[None, :] >= (sees + torch.arange(c))[:, None]  # [c, t - sees]
            e[..., sees:].masked_fill_(future, float("-inf"))
        e.sub_(e.amax(-1, keepdim=True)).exp_()
        row_sums = e.sum(-1)  # [Hkv, g, c]
        flat = e.view(hkv, g * c, t)
        o = torch.matmul(flat if v.dtype == flat.dtype else flat.to(v.dtype), v)  # [Hkv, g*c, D]
        out[:, :, c0 : c0 + c] = (o.view(hkv, g, c, d).float() / row_sums[..., None]).to(value.dtype)
        w = coefs[None, :, None, c0 : c0 + c] / row_sums[:, None]  # [Hkv, k, g, c]
        sums.baddbmm_(w.reshape(hkv, k, g * c), flat)
    return out.view(hq, q, d).transpose(0, 1)[None].contiguous(), (sums / g).transpose(0, 1)[:, None]
