"""The whole task statement a little higher (issue 64): `nexus-agent-task`.

Replies restate the task's literal text all session long: its names (the product's `name_weight`), but also the
error message it quotes (a `grep -rn "..."` for it), the example it gives (copied into a reproduction script) and
the flags it runs with. The default ranks the statement's other tokens by attention alone, and the tool outputs that
follow push them out. This variant adds `task_all_weight` to every token of a matched opening's task text
(ScoreContext.task_span), on top of the task's head and its names; with `task_wait`, only once the first reply
has been seen (the opening's own eviction ranks without it). Measured in research/opening-issue64.md,
section 11.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import ScoreContext
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _replied, task_tokens


@dataclass
class TaskTextSettings(NexusAgentSettings):
    task_all_weight: float = 0.5  # a bonus for every token of the task's text (where a profile matched)
    task_wait: bool = False  # the bonus only once a reply query has been seen (the opening's prefill ranks without)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_all_weight < 0:
            raise KVStoreError(f"task_all_weight must be >= 0, got {self.task_all_weight}")


class TaskTextPolicy(NexusAgentPolicy):
    name = "nexus-agent-task"
    settings_type = TaskTextSettings

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        task = task_tokens(ctx)
        if task is None:
            return score
        inside = task.to(score.dtype)
        if self.settings.task_wait:
            inside = inside * _replied(ctx).to(score.dtype)[:, None, None]
        return score + self.settings.task_all_weight * inside
