"""What an eviction policy is: a score (and a default selector). The cache owns budgets, forced blocks, gather
and write-back; a policy never touches them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.config import CacheConfig
from kvstore.scoring import window_attention


@dataclass
class ScoreContext:
    """What a policy sees at one eviction step of one layer."""

    keys: torch.Tensor  # [B, Hkv, T, D] held keys (already rotated), new chunk included
    queries: torch.Tensor  # [B, Hq, W', D] the most recent W' <= W queries of this layer
    positions: torch.Tensor  # [B, Hkv, T] original positions of the held tokens
    state: dict[str, torch.Tensor]  # per-token policy state, each [B, Hkv, T]
    scaling: float | None  # the attention scale the model used (None: 1/sqrt(D))
    layer_idx: int


class Policy:
    """Base class. Subclasses set the class attributes below and implement `score`."""

    name = "base"
    granularity = "block"  # "block": units are b-token key blocks; "token": single tokens
    per_head = False  # True: one score row per kv head (each head keeps its own tokens)
    default_selector = "topk"
    prefill_only = False  # True: evict only on multi-token forwards (prefill chunks, new turns), never in decode
    evicts = True
    masks_heads = False  # True: heads keep different counts, padded slots are masked (Ada-KV)
    token_state: tuple[str, ...] = ()  # names of per-token state tensors the cache keeps aligned with the keys

    def __init__(self, config: CacheConfig) -> None:
        self.config = config

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        """[B, 1 or Hkv, N] non-negative scores over ALL held units (N blocks or T tokens); higher = keep."""
        raise NotImplementedError

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        """Called after every attention call with that call's queries [B, Hq, q, D] (H2O accumulates here)."""

    def layer_budget(self, layer_idx: int, n_layers: int, budget_blocks: int) -> int:
        """Blocks this layer may hold (PyramidKV varies it with depth)."""
        return budget_blocks

    def allocate(self, cand_scores: torch.Tensor, k: int) -> torch.Tensor:
        """Per-head kept counts [B, Hkv] for `masks_heads` policies (Ada-KV); others keep k per head."""
        return torch.full(cand_scores.shape[:-1], k, dtype=torch.long, device=cand_scores.device)


def head_token_attention(ctx: ScoreContext, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Attention each held token receives from `queries` (default: the window), summed over those queries and
    averaged over the query heads of each kv head: [B, Hkv, T]. Queries sit at the last positions (causal)."""
    q = ctx.queries if queries is None else queries
    b, hkv, t, _ = ctx.keys.shape
    out = []
    for i in range(b):
        p = window_attention(q[i], ctx.keys[i], ctx.scaling)  # [Hq, Wq, T]
        out.append(p.sum(1).view(hkv, -1, t).mean(1))
    return torch.stack(out)
