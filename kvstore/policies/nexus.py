"""Nexus Sampling: the Nexus score (direct window score + bridge walk) per layer, shared across heads, fed to the
n-averaged weighted reservoir. Based on "Nexus Sampling" (seeds/nexus-sampling-paper.txt, section 2).

Defaults and their sources (the paper, section 5.1; docs/algorithm.md): blocks of b = 32 tokens, W = 16, H = 3,
lambda = 0.5, n = 5; forced: the attention-sink block (sink = one block), `recent_blocks` = 1 most recent complete
block and the incomplete tail block (counted by its real size)."""

import torch

from kvstore.kernels import window_block_scores_auto
from kvstore.policies.base import Policy, ScoreContext
from kvstore.scoring import nexus_weights, window_block_scores


class NexusPolicy(Policy):
    name = "nexus"
    default_selector = "reservoir"
    default_sink = None  # one block

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        cfg = self.config
        block_scores = window_block_scores if cfg.use_triton is False else window_block_scores_auto
        rows = []
        for i in range(ctx.keys.shape[0]):
            s_hat = block_scores(ctx.queries[i], ctx.keys[i], cfg.block, ctx.scaling)  # [W, N_k]
            rows.append(nexus_weights(s_hat, cfg.walk_steps, cfg.lam, cfg.eps_tie))  # [N_k]
        return torch.stack(rows)[:, None, :]  # [B, 1, N_k]
