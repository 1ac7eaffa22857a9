"""One eviction step as pure tensor logic: forced blocks, candidates, selection -> which held slots to keep.

Forced (never candidates, docs/algorithm.md, "Setting"): the attention-sink block (the first b held tokens), the
incomplete tail block (held % b tokens) and the `recent_blocks` most recent complete blocks. Block policies keep
whole candidate blocks, K = B - B_forced of them; token policies keep B*b - forced tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.config import CacheConfig
from kvstore.policies.base import Policy
from kvstore.selection import select


@dataclass
class Layout:
    """Where the forced regions lie in held-index space for T held tokens."""

    sink_end: int  # tokens [0, sink_end) are the sink block
    recent_start: int  # tokens [recent_start, T) are the recent blocks and the tail
    forced_blocks: int  # B_forced

    @classmethod
    def of(cls, t: int, block: int, recent_blocks: int) -> Layout:
        sink_end = min(block, t)
        tail = t % block
        recent_start = max(sink_end, t - tail - recent_blocks * block)
        return cls(sink_end, recent_start, 1 + recent_blocks + (1 if tail else 0))


def max_forced_blocks(config: CacheConfig) -> int:
    """The most blocks the forced set can take (sink + recent + an incomplete tail)."""
    return 2 + config.recent_blocks


@dataclass
class Plan:
    keep: torch.Tensor  # [B, Hkv, K] held indices to keep, ascending
    valid: torch.Tensor | None  # [B, Hkv, K] bool, only for head-masking policies


def plan_eviction(
    scores: torch.Tensor,
    t: int,
    budget_blocks: int,
    n_kv_heads: int,
    config: CacheConfig,
    policy: Policy,
    generator: torch.Generator,
    valid: torch.Tensor | None = None,
) -> Plan | None:
    """scores: [B, 1 or Hkv, N] over all held units. Returns None when nothing needs to go."""
    b = config.block
    lay = Layout.of(t, b, config.recent_blocks)
    if policy.granularity == "block":
        cand = scores[..., 1 : lay.recent_start // b]
        k = budget_blocks - lay.forced_blocks
    else:
        cand = scores[..., lay.sink_end : lay.recent_start]
        k = budget_blocks * b - lay.sink_end - (t - lay.recent_start)
    if k >= cand.shape[-1]:
        return None
    cand = cand.clamp_min(0)
    if config.renorm_candidates:
        cand = cand / cand.sum(-1, keepdim=True).clamp_min(1e-30)
    new_valid = None
    if policy.masks_heads:
        chosen, new_valid = _select_per_head_counts(cand, k, policy, lay, valid)
    else:
        chosen = select(cand, k, config.selector or policy.default_selector, config.n, generator)
    if policy.granularity == "block":
        chosen = (chosen[..., None] * b + b + torch.arange(b, device=chosen.device)).flatten(-2)
    else:
        chosen = chosen + lay.sink_end
    return _assemble(chosen, lay, t, n_kv_heads, new_valid)


def _select_per_head_counts(cand, k, policy, lay, valid):
    """Head-masking policies (Ada-KV): each head keeps its own count; pad to the largest, mark pads invalid."""
    if valid is not None:
        cand = cand.masked_fill(~valid[..., lay.sink_end : lay.recent_start], 0.0)
    counts = policy.allocate(cand, k)  # [B, Hkv]
    m = int(counts.max())
    order = cand.argsort(dim=-1, descending=True, stable=True)[..., :m]
    ok = torch.arange(m, device=cand.device) < counts[..., None]
    if valid is not None:
        ok &= valid[..., lay.sink_end : lay.recent_start].gather(-1, order)
    idx, perm = order.sort(dim=-1)
    return idx, ok.gather(-1, perm)


def _assemble(chosen, lay, t, n_kv_heads, new_valid) -> Plan:
    bsz, hs = chosen.shape[:2]
    dev = chosen.device
    head = torch.arange(lay.sink_end, device=dev).expand(bsz, hs, -1)
    tail = torch.arange(lay.recent_start, t, device=dev).expand(bsz, hs, -1)
    keep = torch.cat([head, chosen, tail], dim=-1).expand(bsz, n_kv_heads, -1)
    if new_valid is None:
        return Plan(keep.contiguous(), None)
    ones = lambda n: torch.ones(bsz, n_kv_heads, n, dtype=torch.bool, device=dev)  # forced slots are always real
    valid = torch.cat([ones(head.shape[-1]), new_valid, ones(tail.shape[-1])], dim=-1)
    return Plan(keep.contiguous(), valid)
