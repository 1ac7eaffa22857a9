"""MorphKV (Ghadia et al. 2025): tokens scored by the attention the recent window of queries pays them
(correlation-aware: what the recent context keeps looking at), per kv head; top-K plus the recent window,
re-evaluated at every eviction step (prefill and decode)."""

import torch

from kvstore.policies.base import Policy, ScoreContext, head_token_attention


class MorphKVPolicy(Policy):
    name = "morphkv"
    granularity = "token"
    per_head = True

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        return head_token_attention(ctx)
