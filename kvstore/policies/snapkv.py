"""SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"): the attention the
observation window (the last `window` prompt tokens) pays each earlier token, summed over the window, pooled with
a 1-D kernel, averaged over the query heads of each kv head; top-K of the earlier tokens per kv head plus the
window itself. Compresses on multi-token forwards only (decode tokens accumulate).

Defaults and their sources:
- window = 32, pool_kernel = 5, pool = "avg": the authors' code (FasterDecoding/SnapKV, snapkv_utils.py
  init_snapkv: window_size=32, kernel_size=5, pooling='avgpool'); kvpress SnapKVPress uses window 64, kernel 5.
- Pooling runs over the scores of the tokens before the window, zero-padded by kernel // 2 at both ends and the
  padding counted in the average (torch's avg_pool1d default, as both implementations call it).
- GQA: query heads of a kv head averaged (kvpress; SnapKV issue #22). No attention sink (sink = 0).
- The window is always kept (counted in the budget, as kvpress pads it with the maximum score).
- Every multi-token forward compresses again (each prefill chunk, each new turn); `compress_once=True` compresses
  at the end of the first prefill only, as the paper (one compression after the prompt).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kvstore.attention.received import head_token_attention
from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext


@dataclass
class SnapKVSettings:
    window: int = 32  # observation window: the last queries that score the earlier tokens (kept, as recent tokens)
    pool: str = "avg"  # "avg" | "max" pooling of the window's scores over neighbouring tokens
    pool_kernel: int = 5  # width of that pooling

    def __post_init__(self) -> None:
        if self.window < 1 or self.pool_kernel < 1:
            raise KVStoreError(f"window and pool_kernel must be >= 1, got {self.window}, {self.pool_kernel}")
        if self.pool not in ("avg", "max"):
            raise KVStoreError(f"pool must be 'avg' or 'max', got {self.pool!r}")


class SnapKVPolicy(Policy):
    name = "snapkv"
    granularity = "token"
    per_head = True
    prefill_only = True
    default_sink = 0
    settings_type = SnapKVSettings

    def default_recent(self) -> int:
        return self.settings.window

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        s = head_token_attention(ctx)  # [B, Hkv, T] summed over the window
        b, h, t = s.shape
        w = min(ctx.queries.shape[-2], t)
        prefix = s[..., : t - w].reshape(b * h, 1, t - w)
        if t - w == 0:
            return s
        k = self.settings.pool_kernel
        pool = F.avg_pool1d if self.settings.pool == "avg" else F.max_pool1d
        pooled = pool(prefix, k, stride=1, padding=k // 2)[..., : t - w].view(b, h, t - w)
        top = pooled.amax(-1, keepdim=True).expand(b, h, w)  # the window: kept anyway (forced recent)
        return torch.cat([pooled, top], dim=-1)
