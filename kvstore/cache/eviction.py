"""One eviction step as pure tensor logic: forced regions, candidates, selection -> which held slots to keep.

Forced (never candidates): the attention sink (the first `sink` held tokens; the policy's default, e.g. one
block for Nexus, 4 tokens for StreamingLLM, none for H2O/SnapKV), the recent region (block policies: the
incomplete tail block, counted by its real size, plus `recent_blocks` complete blocks; token policies: the
policy's recent tokens) and any `pinned` slot (SessionSignals.protect). Budgets are in tokens: token policies
keep exactly budget - forced candidates; block policies keep floor((budget - forced) / b) whole candidate
blocks, so a layer holds between budget - b + 1 and budget tokens after a step (docs/baselines.md, "Budget
accounting"; docs/algorithm.md, "Setting").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext


@dataclass
class Layout:
    """Where the forced regions lie in held-index space for T held tokens."""

    sink_end: int  # tokens [0, sink_end) are the sink
    recent_start: int  # tokens [recent_start, T) are the recent region (and the incomplete tail block)

    @classmethod
    def of(cls, t: int, sink: int, recent: int, block: int | None = None) -> Layout:
        """block: the block size for block policies (candidate blocks start at the sink's end; the tokens that do
        not fill a block yet are the tail), None for token policies."""
        sink_end = min(sink, t)
        tail = (t - sink_end) % block if block else 0
        return cls(sink_end, max(sink_end, t - tail - recent))

    def forced(self, t: int) -> int:
        return self.sink_end + t - self.recent_start


def layout_for(policy: Policy, t: int, budget_tokens: int, ctx: ScoreContext | None = None) -> Layout:
    block = policy.config.block if policy.granularity == "block" else None
    return Layout.of(t, policy.sink_tokens(), policy.recent_tokens(budget_tokens, ctx), block)


@dataclass
class Plan:
    keep: torch.Tensor  # [B, Hkv, K] held indices to keep, ascending
    valid: torch.Tensor | None  # [B, Hkv, K] bool, only for head-masking policies


def plan_eviction(
    scores: torch.Tensor,
    t: int,
    budget_tokens: int,
    n_kv_heads: int,
    policy: Policy,
    generator: torch.Generator,
    valid: torch.Tensor | None = None,
    pinned: torch.Tensor | None = None,
    ctx: ScoreContext | None = None,
) -> Plan | None:
    """scores: [B, 1 or Hkv, N] over all held units; pinned: [B, 1 or Hkv, T] bool held slots that must stay
    (protected spans: kept first and counted in the budget; a budget that cannot hold them raises KVStoreError);
    ctx: the step's ScoreContext, where the policy's recent share depends on it. Returns None when nothing needs to
    go."""
    b = policy.config.block
    lay = layout_for(policy, t, budget_tokens, ctx)
    room = max(0, budget_tokens - lay.forced(t))
    if policy.granularity == "block":
        cand = _block_candidates(scores, lay, b)
        k = room // b
    else:
        cand = scores[..., lay.sink_end : lay.recent_start]
        k = room
    cand = cand.clamp_min(0)
    units = None if pinned is None else _pinned_units(pinned, lay, b if policy.granularity == "block" else None)
    if units is not None:
        _check_room(units, k, b if policy.granularity == "block" else 1, budget_tokens)
    if k >= cand.shape[-1]:
        return None
    cand = policy.weights(cand)
    if units is not None:
        cand = _pin(cand, units)
    cand_valid = None if valid is None else valid[..., lay.sink_end : lay.recent_start]
    chosen, new_valid = policy.select(cand, k, generator, cand_valid)
    if policy.granularity == "block":
        chosen = (chosen[..., None] * b + lay.sink_end + torch.arange(b, device=chosen.device)).flatten(-2)
    else:
        chosen = chosen + lay.sink_end
    return _assemble(chosen, lay, t, n_kv_heads, new_valid)


def _block_candidates(scores: torch.Tensor, lay: Layout, b: int) -> torch.Tensor:
    """Block scores of the candidate region. Scores come per b-token block of held-index space from 0; with a
    sink that is not a whole block, the candidate blocks straddle two score blocks and take the later one's score
    plus the earlier one's (a policy that needs exact alignment uses sink = one block, as Nexus does)."""
    n = (lay.recent_start - lay.sink_end) // b
    if lay.sink_end % b == 0:
        first = lay.sink_end // b
        return scores[..., first : first + n]
    first = lay.sink_end // b
    return scores[..., first : first + n] + scores[..., first + 1 : first + 1 + n]


def _check_room(units: torch.Tensor, k: int, unit: int, budget_tokens: int) -> None:
    """Raise when the protected units alone exceed the k candidates the budget leaves beside the forced set."""
    need = int(units.sum(-1).max()) if units.numel() else 0
    if need > k:
        raise KVStoreError(
            f"the cache budget ({budget_tokens} tokens per layer here) cannot hold the protected spans "
            f"({need * unit} tokens beyond the forced ones, which leave room for {k * unit}); raise the budget "
            "or turn protection off (protect='none')"
        )


def _pinned_units(pinned: torch.Tensor, lay: Layout, block: int | None) -> torch.Tensor:
    """[..., N_cand] bool: the candidate units (blocks or tokens) that hold a pinned slot. pinned: [..., T]."""
    region = pinned[..., lay.sink_end : lay.recent_start]
    return region.reshape(*region.shape[:-1], -1, block).any(-1) if block else region


def _pin(cand: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    """Candidates holding a pinned slot get a huge score: top-K and the reservoir keep them first (finite, so sums
    over candidates do not overflow)."""
    huge = torch.finfo(cand.dtype).max / (cand.shape[-1] + 1)
    return cand.masked_fill(units.to(cand.device), huge)


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
