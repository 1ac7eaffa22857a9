"""SnapKV (Li et al. 2024): attention from the observation window, summed over the window, average-pooled,
per kv head; top-K tokens per head; compresses on prefill forwards only (decode tokens accumulate)."""

import torch
import torch.nn.functional as F

from kvstore.policies.base import Policy, ScoreContext, head_token_attention


class SnapKVPolicy(Policy):
    name = "snapkv"
    granularity = "token"
    per_head = True
    prefill_only = True

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        s = head_token_attention(ctx)  # [B, Hkv, T]
        k = self.config.pool_kernel
        b, h, t = s.shape
        return F.avg_pool1d(s.reshape(b * h, 1, t), k, stride=1, padding=k // 2, count_include_pad=False).view(
            b, h, -1
        )[..., :t]
