"""StreamingLLM (Xiao et al. 2023): the attention-sink block plus the most recent blocks."""

import torch

from kvstore.policies.base import Policy, ScoreContext
from kvstore.scoring import recency_ramp


class StreamingPolicy(Policy):
    name = "streaming"

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        n = -(-ctx.keys.shape[-2] // self.config.block)
        return recency_ramp(n, ctx.keys.device).expand(ctx.keys.shape[0], 1, n)
