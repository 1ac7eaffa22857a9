"""H2O (Zhang et al. 2023): heavy hitters = tokens with the largest attention received so far (accumulated over
every query, per kv head), plus the recent window (the forced recent blocks). Evicts every step."""

import torch

from kvstore.policies.base import Policy, ScoreContext, head_token_attention


class H2OPolicy(Policy):
    name = "h2o"
    granularity = "token"
    per_head = True
    token_state = ("h2o_acc",)

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        ctx.state["h2o_acc"] += head_token_attention(ctx, new_queries)

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        return ctx.state["h2o_acc"]
