"""The level of a matched profile's template against the task's own text (issue 64, with-profile first reply).

The default memory ranks a matched opening's template tokens by the profile, rescaled so that their sum equals the
accumulated attention the template received from the opening's own queries (kvstore.policies.nexus_agent
.with_prior): the profile decides the order inside the template, the opening's attention how much of the budget
the template gets against the task statement. Policy `nexus-agent-tlevel` multiplies the template's rescaled
weights by `template_scale` (1: the default), to see whether that split is what the first reply loses on openings
much larger than the budget. Measured before the task's head existed (research/opening-issue64.md, section 3); it
inherits today's default, the head included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.policies.base import ScoreContext, mean_received
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean, with_prior


@dataclass
class TemplateLevelSettings(NexusAgentSettings):
    template_scale: float = 1.0  # factor on the template's weights after the default's rescaling


class TemplateLevelPolicy(NexusAgentPolicy):
    name = "nexus-agent-tlevel"
    settings_type = TemplateLevelSettings

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        if ctx.prior is None or ctx.prior_kind != "profile":
            return score
        ranked = with_prior(mean_received(ctx.state["acc"], ctx), ctx.prior)
        scaled = torch.where(ctx.prior > 0, ranked * self.settings.template_scale, ranked)
        return score + self.settings.acc_weight * (_unit_mean(scaled) - _unit_mean(ranked))
