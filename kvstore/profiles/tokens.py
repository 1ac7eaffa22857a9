"""Token priors: what a memory profile says of each token id, for openings it does not match.

A memory profile (kvstore.profiles.profile) holds, per layer and kv head, how much attention an agent's replies gave
each token of one harness's fixed text. Averaged over every place a token id occurs in that text, it says how much a
reply reads a token of that kind: replies of a model read delimiters, tags, keywords and instructions of any agent's
prompt in much the same way. A session given one profile file (the shipped one by default) whose opening does not
carry its template (a chat, another harness, a changed prompt) gets, for every token of its opening, its id's mean
weight (1, a profile's mean, for an id the profile never held). The default memory blends it with the opening's own
attention (kvstore.policies.nexus_agent, `token_blend`) until replies show what the agent reads. A session that
matches the profile keeps the profile's weights for the template and its own attention for the task statement:
completing the profile with the token prior there made the first reply worse on the selection conversations.

Measured in docs/memory.md ("Openings no profile matches").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvstore.profiles.profile import MemoryProfile


@dataclass(frozen=True)
class TokenPrior:
    """Per token id, its mean profile weight: `weights[:, :, i]` for `ids[i]`; [L, Hkv, n] float32, > 0."""

    ids: dict[int, int]  # token id -> column of `weights`
    weights: torch.Tensor  # [L, Hkv, n]

    @classmethod
    def of(cls, profile: MemoryProfile) -> TokenPrior:
        """The token prior a profile's template gives (each id's mean over its occurrences)."""
        ids = torch.tensor(list(profile.prefix) + list(profile.suffix), dtype=torch.int64)
        weights = torch.cat([profile.prefix_weight, profile.suffix_weight], -1).float()  # [L, Hkv, n]
        unique, inverse = torch.unique(ids, return_inverse=True)
        sums = torch.zeros(*weights.shape[:2], len(unique)).index_add_(-1, inverse, weights)
        counts = torch.zeros(len(unique)).index_add_(0, inverse, torch.ones(len(ids)))
        return cls({int(t): i for i, t in enumerate(unique.tolist())}, sums / counts)

    def prior_for(self, opening: list[int]) -> torch.Tensor:
        """[L, Hkv, len(opening)]: each opening token's weight, 1 for an id the profile never held; every weight
        is > 0 (so the whole opening is ranked by it, kvstore.policies.nexus_agent.with_prior)."""
        ones = torch.ones(*self.weights.shape[:2], 1)
        table = torch.cat([self.weights, ones], -1).clamp_min(1e-3)  # the last column: unknown ids
        unknown = self.weights.shape[-1]
        cols = torch.tensor([self.ids.get(t, unknown) for t in opening], dtype=torch.int64)
        return table[..., cols]
