"""Nexus Sampling: the Nexus score (direct window score + bridge walk) per layer, shared across heads, fed to the
n-averaged weighted reservoir. Based on "Nexus Sampling" (seeds/nexus-sampling-paper.txt, section 2).

Defaults and their sources (the paper, section 5.1; docs/algorithm.md): blocks of b = 32 tokens, W = 16, H = 3,
lambda = 0.5, n = 5; forced: the attention-sink block (sink = one block), `recent_blocks` = 1 most recent complete
block and the incomplete tail block (counted by its real size)."""

from dataclasses import dataclass

import torch

from kvstore.attention.dispatch import fused_kv_head_block_scores, fused_window_block_scores
from kvstore.attention.scoring import block_spread, block_sum, kv_head_block_scores, nexus_weights, window_block_scores
from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.selection import select


@dataclass
class NexusSettings:
    window: int = 16  # W: observation window of recent queries the score reads
    walk_steps: int = 3  # H: steps of the walk over the most recent window rows
    lam: float = 0.5  # lambda: weight of the walk (bridge) score
    eps_tie: float = 1e-6  # recency tie-break added to the weights
    n: int = 5  # uniforms averaged per candidate in the reservoir priority (n -> inf tends to top-K)
    selector: str | None = None  # "reservoir" | "topk"; None: the policy's default_selector (the paper's reservoir)
    score_memory: str = "none"  # "none" (the paper) | "mean" | "max" of each block's score over the steps it was held
    reservoir_mean: float | None = None  # rescale candidate weights to this mean before selection (None: as scored)

    def __post_init__(self) -> None:
        if self.window < 1 or self.n < 1:
            raise KVStoreError(f"window and n must be >= 1, got {self.window}, {self.n}")
        if self.walk_steps < 0 or self.lam < 0 or self.eps_tie < 0:
            raise KVStoreError("walk_steps, lam and eps_tie must be >= 0")
        if self.selector not in (None, "reservoir", "topk"):
            raise KVStoreError(f"unknown selector {self.selector!r}; use 'reservoir' or 'topk'")
        if self.score_memory not in ("none", "mean", "max"):
            raise KVStoreError(f"score_memory must be 'none', 'mean' or 'max', got {self.score_memory!r}")
        if self.reservoir_mean is not None and self.reservoir_mean <= 0:
            raise KVStoreError(f"reservoir_mean must be > 0 (or None), got {self.reservoir_mean}")


class NexusPolicy(Policy):
    """`score_memory` (this project's option, docs/memory.md; "none" = the paper): "mean" or "max" combines each
    token's score over every eviction step it was held in (a block's score is then the mean or max of its Nexus
    weights so far, not only the current window's), kept as per-token state that survives eviction and saving."""

    name = "nexus"
    default_selector = "reservoir"
    default_sink = None  # one block
    settings_type = NexusSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        if self.settings.score_memory != "none":
            self.token_state = ("nexus_score", "nexus_steps")

    @property
    def selector(self) -> str:
        return self.settings.selector or self.default_selector

    @property
    def stochastic(self) -> bool:
        return self.selector == "reservoir"

    def weights(self, cand: torch.Tensor) -> torch.Tensor:
        mean = self.settings.reservoir_mean  # the weights sum to ~1 over N_k, so w ~ 1/N_k; see docs/memory.md
        return cand if not mean else cand * (mean * cand.shape[-1] / cand.sum(-1, keepdim=True).clamp_min(1e-30))

    def select(self, cand, k, generator, valid=None):
        return select(cand, k, self.selector, self.settings.n, generator), None

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        current = self.current_scores(ctx)
        return current if self.settings.score_memory == "none" else self.remember(ctx, current)

    def current_scores(self, ctx: ScoreContext) -> torch.Tensor:
        """The Nexus weights of this step's window, one row per layer: [B, 1, N_k]."""
        s, b = self.settings, self.config.block
        rows = []
        for i in range(ctx.keys.shape[0]):
            args = (ctx.queries[i], ctx.keys[i], b, ctx.scaling)
            s_hat = fused_window_block_scores(*args) if ctx.triton else None
            s_hat = window_block_scores(*args) if s_hat is None else s_hat  # [W, N_k]
            rows.append(nexus_weights(s_hat, s.walk_steps, s.lam, s.eps_tie))  # [N_k]
        return torch.stack(rows)[:, None, :]  # [B, 1, N_k]

    def remember(self, ctx: ScoreContext, current: torch.Tensor) -> torch.Tensor:
        """Combine the current block weights [B, H, N_k] (H = 1 shared, or one row per kv head) with the held
        tokens' past ones: [B, H, N_k]. Each token carries its block's weight; a block's score is the mean over its
        tokens of their combined weights."""
        b, t, h = self.config.block, ctx.keys.shape[-2], current.shape[1]
        now = block_spread(current, b, t)  # [B, H, T]
        past, steps = ctx.state["nexus_score"][:, :h], ctx.state["nexus_steps"][:, :h]  # [B, H, T]
        if self.settings.score_memory == "max":
            combined = torch.maximum(past, now)
            value = combined
        else:
            combined = past + now
            value = combined / (steps + 1)
        if ctx.commit:
            ctx.state["nexus_score"].copy_(combined.expand_as(ctx.state["nexus_score"]))
            ctx.state["nexus_steps"].add_(1)
        return block_sum(value, b) / b


class NexusHeadPolicy(NexusPolicy):
    """The Nexus score per kv head: each kv head scores the blocks with its own group of query heads and keeps its
    own blocks (the paper scores once per layer, averaged over all heads; this project's variant, the base of
    `nexus-agent`, kvstore.policies.nexus_agent)."""

    name = "nexus-head"
    per_head = True

    def current_scores(self, ctx: ScoreContext) -> torch.Tensor:
        """The Nexus weights of this step's window, one row per kv head: [B, Hkv, N_k]."""
        s, b = self.settings, self.config.block
        out = []
        for i in range(ctx.keys.shape[0]):
            args = (ctx.queries[i], ctx.keys[i], b, ctx.scaling)
            s_hat = fused_kv_head_block_scores(*args) if ctx.triton else None
            s_hat = kv_head_block_scores(*args) if s_hat is None else s_hat  # [Hkv, W, N_k]
            out.append(nexus_weights(s_hat, s.walk_steps, s.lam, s.eps_tie))  # all kv heads at once
        return torch.stack(out)  # [B, Hkv, N_k]
