"""A profile-free prior for the opening, keyed on token identity (issue 64, part 2): a memory profile says, per layer
and kv head, what replies read of each token of one harness's fixed text; averaged per token id, it says what
replies read of a token of that kind in any opening. A harness nobody calibrated gets, for every token of its
opening, the mean weight its token id had in another harness's profile (1, the profile's mean, for ids it never
held), as a prior that ranks the opening until the first reply.

    table = token_table(MemoryProfile.load("harness.pt"))   # {token id: [L, Hkv]}
    weights = opening_prior(table, opening_ids)              # [L, Hkv, P], for EvictingCache.signals.set_prior

Policy `nexus-agent-tokprior` (research/policies.py) is the default memory with `tok_blend`: the opening's score
is (1 - tok_blend) x its accumulated attention + tok_blend x the prior (rescaled as a profile's is), and the Nexus
term stays off until the first reply, as with no profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.policies.base import ScoreContext, mean_received
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean, with_prior
from kvstore.profiles.profile import MemoryProfile


def token_table(profile: MemoryProfile) -> dict[int, torch.Tensor]:
    """Per token id of the profile's template, its mean weight over its occurrences: {id: [L, Hkv]}."""
    ids = list(profile.prefix) + list(profile.suffix)
    weights = torch.cat([profile.prefix_weight, profile.suffix_weight], -1)  # [L, Hkv, n]
    sums: dict[int, torch.Tensor] = {}
    counts: dict[int, int] = {}
    for i, t in enumerate(ids):
        sums[t] = sums.get(t, 0) + weights[..., i]
        counts[t] = counts.get(t, 0) + 1
    return {t: sums[t] / counts[t] for t in sums}


def opening_prior(table: dict[int, torch.Tensor], ids: list[int], power: float = 1.0) -> torch.Tensor:
    """[L, Hkv, len(ids)]: each token's table weight, 1 where the table has none (> 0 everywhere)."""
    shape = next(iter(table.values())).shape
    ones = torch.ones(shape)
    w = torch.stack([table.get(t, ones) for t in ids], -1).clamp_min(1e-3)
    return w**power


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
