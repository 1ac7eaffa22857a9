"""H2O (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of LLMs"): the budget is
split between heavy hitters (tokens with the largest attention received so far, per kv head) and the most recent
tokens; evicts at every step (prefill and decode).

Defaults and their sources:
- recent = 0.5 of the layer budget: the paper's main setting keeps 10% heavy hitters + 10% recent tokens of a 20%
  budget (heavy_ratio = recent_ratio), i.e. half and half. No attention sink (sink = 0): the paper has none.
- normalize = True (option `h2o_normalize`): the accumulated attention of a token is divided by the number of
  queries that could attend to it (seen - position), as kvpress's ObservedAttentionPress does, so that early tokens
  are not favoured merely for having been seen by more queries; False is the paper's raw sum.
- Attention is accumulated from every query of every forward, in chunks over the queries (never a [H, T, T]
  matrix); the query heads of a kv head are averaged (this project's GQA choice).
"""

from dataclasses import dataclass

import torch

from kvstore.policies.base import Policy, ScoreContext, mean_received, observed_sums
from kvstore.policies.settings import named


@dataclass
class H2OSettings:
    normalize: bool = named("h2o_normalize", True)  # divide accumulated attention by the queries that could attend


class H2OPolicy(Policy):
    name = "h2o"
    settings_type = H2OSettings
    granularity = "token"
    per_head = True
    token_state = ("h2o_acc",)
    default_sink = 0

    def default_recent(self) -> float:
        return 0.5

    def observe_weightings(self, ctx: ScoreContext) -> list[torch.Tensor | None]:
        return [None]  # every new query once

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        ctx.state["h2o_acc"] += observed_sums(ctx, new_queries, [None])[0]

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        acc = ctx.state["h2o_acc"]
        if not self.settings.normalize:
            return acc
        return mean_received(acc, ctx)
