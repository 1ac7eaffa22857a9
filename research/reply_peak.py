"""A memory of what earlier replies read (issue 64, Qwen's KL ratio on the check half): `nexus-agent-peak`.

The default's reply term is the attention the agent's replies paid a token, pooled over every reply query that
could attend it. A function one reply read closely and the next five did not thins out to a sixth, and the flood of
tool output evicts it before the reply that restates it (django-12983's 11th reply restates `slugify`, viewed turns
before: 174 KL-tokens for the default and the next-reply oracle, 94 for H2O). This variant keeps, per held token,
the most attention one reply paid it per query (each finished reply's sum over its queries, divided by its query
count) and adds `peak_weight` x that, scaled to mean 1 over the held tokens as the other terms are.

A reply ends when a query that is not the agent's arrives (the tool output after it); replies inside one re-prefill
chunk count as one. Measured in research/opening-issue64.md, section 11.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import ScoreContext
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean


@dataclass
class ReplyPeakSettings(NexusAgentSettings):
    peak_weight: float = 1.0  # weight of the most one earlier reply attended a token, per reply query

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.peak_weight < 0 or self.reply_weight <= 0:
            raise KVStoreError(
                f"peak_weight must be >= 0 and reply_weight > 0, got {self.peak_weight}, {self.reply_weight}"
            )


class ReplyPeakPolicy(NexusAgentPolicy):
    name = "nexus-agent-peak"
    settings_type = ReplyPeakSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        self.token_state = self.token_state + ("peak", "peak_sum", "peak_n")

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        mask, state = ctx.reply_queries, ctx.state
        if mask is None or not bool(mask[0]):  # a query that is not the reply's: the reply before it has ended
            fold(state)
        if mask is None:
            super().observe(ctx, new_queries)
            return
        acc, seen = state["reply_acc"].clone(), state["reply_seen"].clone()
        super().observe(ctx, new_queries)
        state["peak_sum"] += state["reply_acc"] - acc  # the reply running now, on its own
        state["peak_n"] += state["reply_seen"] - seen
        if not bool(mask[-1]):
            fold(state)

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        return super().score(ctx) + self.settings.peak_weight * _unit_mean(peak(ctx.state))


def peak(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per held token, the most attention one reply paid it per query: the finished replies' maximum (`peak`) and
    the running reply's (`peak_sum` over its queries so far: `peak_n`'s largest count)."""
    running = state["peak_sum"] / state["peak_n"].amax(-1, keepdim=True).clamp_min(1)
    return torch.maximum(state["peak"], running)


def fold(state: dict[str, torch.Tensor]) -> None:
    """A reply has ended: its per-query attention joins the finished replies' maximum and the next reply starts
    from zero (nothing changes when no reply query came since the last fold: the sums are zero)."""
    state["peak"].copy_(peak(state))
    state["peak_sum"].zero_()
    state["peak_n"].zero_()
