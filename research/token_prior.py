"""A profile-free prior for the opening, keyed on token identity (issue 64, part 2): a memory profile says, per layer
and kv head, what replies read of each token of one harness's fixed text; averaged per token id, it says what
replies read of a token of that kind in any opening. A harness nobody calibrated gets, for every token of its
opening, the mean weight its token id had in another harness's profile (1, the profile's mean, for ids it never
held), as a prior that ranks the opening until the first reply.

    weights = TokenPrior.of(MemoryProfile.load("harness.pt")).prior_for(opening_ids)  # kvstore.profiles.tokens
    # [L, Hkv, P], for EvictingCache.signals.set_prior

Policy `nexus-agent-tokprior` (research/policies.py) is the default memory with `tok_blend`: the opening's score
is (1 - tok_blend) x its accumulated attention + tok_blend x the prior (rescaled as a profile's is), and the Nexus
term stays off until the first reply, as with no profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.policies.base import ScoreContext, mean_received
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean, with_prior


@dataclass
class TokenPriorSettings(NexusAgentSettings):
    tok_blend: float = 1.0  # share of the prior in the opening's score (0: the default, 1: the prior alone)


class TokenPriorPolicy(NexusAgentPolicy):
    name = "nexus-agent-tokprior"
    settings_type = TokenPriorSettings

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        if ctx.prior is None:
            return super().score(ctx)
        prior, ctx.prior = ctx.prior, None  # the parent scores as with no profile: Nexus off until a reply
        try:
            score = super().score(ctx)
        finally:
            ctx.prior = prior
        acc = mean_received(ctx.state["acc"], ctx)
        a = self.settings.tok_blend
        blended = torch.where(prior > 0, (1 - a) * acc + a * with_prior(acc, prior), acc)
        return score + self.settings.acc_weight * (_unit_mean(blended) - _unit_mean(acc))
