"""A candidate ranking of the opening for agents with no memory profile (issue 64, part 2): until the first reply
query, the default's accumulated attention is blended with the attention from the last `open_window` queries of each
prefill chunk (a SnapKV-style observation window at every eviction step of the opening).

    open_window   W: the last W queries of each observed chunk form the window
    open_weight   the window term's weight next to the accumulated attention (each scaled to mean 1)
    open_latest   True: only the latest chunk's window counts (SnapKV at each step); False: every chunk's window
                  so far, each query once, divided by the window queries that could attend (a mean per query)

After the first reply query the policy is the default (`nexus-agent`): the window term is dropped, as the default
drops its opening-only ranking. Registered by research/policies.py as `nexus-agent-openwin`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import ScoreContext, observed_sums
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean


@dataclass
class OpeningWindowSettings(NexusAgentSettings):
    open_window: int = 64
    open_weight: float = 1.0
    open_latest: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.open_window < 1 or self.open_weight < 0:
            raise KVStoreError(
                f"open_window must be >= 1 and open_weight >= 0, got {self.open_window}, {self.open_weight}"
            )


class OpeningWindowPolicy(NexusAgentPolicy):
    name = "nexus-agent-openwin"
    settings_type = OpeningWindowSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        self.token_state = tuple(self.token_state) + ("win_acc", "win_seen")

    def _opening(self, ctx: ScoreContext) -> bool:
        """Before any reply query, with no profile: the phase the window term ranks."""
        if ctx.prior is not None or "reply_seen" not in ctx.state:
            return False
        if ctx.reply_queries is not None and bool(ctx.reply_queries.any()):
            return False
        return bool(ctx.state["reply_seen"].amax() == 0)

    def _window(self, q: int) -> torch.Tensor:
        w = torch.zeros(q)
        w[-min(self.settings.open_window, q) :] = 1.0
        return w

    @property
    def observes_sums(self) -> bool:
        """The window's weighting needs the chunk's length, which the attention pass does not pass to
        observe_weightings: this variant observes in its own pass (slower; research only)."""
        return False

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        if not self._opening(ctx):
            return super().observe(ctx, new_queries)
        q = new_queries.shape[-2]
        weightings = [None, self._window(q).to(new_queries.device)]
        sums = observed_sums(ctx, new_queries, weightings)
        ctx.state["acc"] += sums[0]
        w = min(self.settings.open_window, q)
        first = ctx.seen - w  # position of the window's first query
        could = (ctx.seen - torch.maximum(ctx.positions, torch.full_like(ctx.positions, first))).clamp_min(0)
        if self.settings.open_latest:
            ctx.state["win_acc"].copy_(sums[-1])
            ctx.state["win_seen"].copy_(could.to(ctx.state["win_seen"]))
        else:
            ctx.state["win_acc"] += sums[-1]
            ctx.state["win_seen"] += could.to(ctx.state["win_seen"])

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        if not self._opening(ctx):
            return score
        win = ctx.state["win_acc"] / ctx.state["win_seen"].clamp_min(1)
        return score + self.settings.open_weight * _unit_mean(win)
