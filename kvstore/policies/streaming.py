"""StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"): the first
`sink` tokens (the attention sinks) plus the most recent tokens, at token granularity.

Defaults and their sources: sink = 4 tokens (the paper keeps "4 initial tokens" as attention sinks; kvpress
StreamingLLMPress n_sink=4). The rest of the budget is the rolling window of the most recent tokens. Like every
policy here, kept keys keep their original positions (no re-rotation into the cache; kvpress does the same unless
combined with its KeyRerotationPress).
"""

import torch

from kvstore.policies.base import Policy, ScoreContext


class StreamingPolicy(Policy):
    name = "streaming"
    granularity = "token"
    default_sink = 4

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        """Recency: the original position (newer = higher), so top-K keeps the most recent tokens."""
        return ctx.positions[:, :1].float() + 1.0  # [B, 1, T]
