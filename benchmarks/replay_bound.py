"""The query-specific bound of `bench replay --bound`: how close to the full cache each query gets when it may attend
only to its own best B past tokens.

An evicting cache with a budget of B tokens per layer lets every query of a forward attend to at most B tokens of
the past (what the cache held before that forward) plus the forward's own tokens. The bound gives each query head of
each query its *own* best B tokens of the past, the B with the highest attention scores on the full cache, plus the
forward's own tokens (causal). No eviction can do that: an evicting cache keeps one set for all queries of a kv head,
and has to choose it before the queries exist. It was taken for a ceiling for every memory at that budget, but it is
not one: the most-attended keys of each query are not the set with the least effect on the output, and the set
oracle that ranks by every later reply's attention (benchmarks.replay_oracle), a true evicting cache, has a lower KL
on most of the shared conversations (research/replay-notebook.md, "The set oracles"). It is a reference point.

It runs on the full cache with the model's sdpa attention swapped for a masked one while the bound is replayed
(`query_top_b`), so the queries see exactly the held keys of a full-cache replay, masked per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface

from kvstore.attention.prefill import causal_mask
from kvstore.errors import KVStoreError

IMPL = "sdpa"  # the attention implementation the bound masks


def top_b_mask(
    query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, budget: int, scaling: float
) -> torch.Tensor:
    """Boolean mask [B, Hq, q, kv]: per query head and query row, the `budget` past keys with the highest scores
    and every new key up to the query (causal). query [B, Hq, q, D]; key [B, Hkv, kv, D]; mask: the mask the model
    passed (boolean, or additive with 0 for allowed), or None for plain causal attention."""
    bsz, hq, q, _ = query.shape
    kv = key.shape[-2]
    past = kv - q
    allowed = causal_mask(q, kv, query.device).expand(bsz, hq, q, kv)
    if mask is not None:
        allowed = allowed & (mask if mask.dtype == torch.bool else mask == 0)
    allowed = allowed.clone()
    if past <= budget:
        return allowed
    keys = key[:, :, :past].repeat_interleave(hq // key.shape[1], dim=1)  # [B, Hq, past, D]
    scores = torch.matmul(query.float(), keys.float().transpose(-1, -2)) * scaling  # [B, Hq, q, past]
    scores = scores.masked_fill(~allowed[..., :past], float("-inf"))
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, scores.topk(budget, dim=-1).indices, True)
    allowed[..., :past] &= keep
    return allowed


def check_model(model: torch.nn.Module) -> None:
    """KVStoreError unless the model runs sdpa attention, the one implementation the bound masks."""
    impl = model.config._attn_implementation.removeprefix("nexus_")
    if impl != IMPL:
        raise KVStoreError(f"the query-specific bound (--bound) needs sdpa attention, not {impl!r}")


@contextmanager
def query_top_b(model: torch.nn.Module, budget: int) -> Iterator[None]:
    """While inside, every sdpa attention call masks each query row to its top-`budget` past keys (top_b_mask)."""
    check_model(model)
    base = AttentionInterface._global_mapping[IMPL]

    def attention(module, query, key, value, attention_mask, **kwargs):
        scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
        allowed = top_b_mask(query, key, attention_mask, budget, scaling)
        return base(module, query, key, value, allowed, **kwargs)

    AttentionInterface._global_mapping[IMPL] = attention
    try:
        yield
    finally:
        AttentionInterface._global_mapping[IMPL] = base
