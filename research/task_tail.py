"""The opening's recent window counted back from the task text's end (issue 64): `nexus-agent-tail`.

Before the first reply, in an opening a memory profile matched, the default forces the opening's last quarter of the
budget (`opening_recent_share`, research/opening-issue64.md section 10). That quarter counts back from the opening's
end, where the instance prompt's closing text (the template's suffix, 189-208 tokens) lies; the profile ranks that
text anyway. What is left of the window for the task's last lines is a few dozen tokens, and on a statement that
ends in the traceback the first reply starts from (pylint-dev/astroid-1866, section 12) the traceback's last frame
is evicted. This variant gives the last `tail_share` x budget tokens of the task's text `tail_weight` on top of the
default's score until the first reply query has been seen (a weight far above the other terms forces them), and
forces `opening_recent_share` of the opening's end as the default does (0: none, the profile ranks the suffix).

Measured (section 13): it fixes astroid-1866's first reply (22.09 -> 0.47 KL-tokens on SmolLM2) and makes the first
reply worse on 27 of the 40 conversations of `deepseek-chat-swebench-test` (2.37x -> 2.81x the oracle's); not taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import ScoreContext
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _replied, task_tokens


@dataclass
class TaskTailSettings(NexusAgentSettings):
    tail_share: float = 0.25  # the task text's last this share of the budget, before the first reply
    tail_weight: float = 100.0  # their bonus (far above the other terms: forced)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.tail_share < 1.0 or self.tail_weight < 0:
            raise KVStoreError(
                f"tail_share must be in [0, 1) and tail_weight >= 0, got {self.tail_share}, {self.tail_weight}"
            )


class TaskTailPolicy(NexusAgentPolicy):
    name = "nexus-agent-tail"
    settings_type = TaskTailSettings

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        task = task_tokens(ctx)
        if task is None or self.settings.tail_share == 0 or "reply_seen" not in ctx.state:
            return score
        tail = task & (ctx.positions >= ctx.task_span[1] - int(self.settings.tail_share * self.config.budget))
        waiting = ~_replied(ctx)
        return score + self.settings.tail_weight * (tail & waiting[:, None, None]).to(score.dtype)
