"""MorphKV (Ghadia et al. 2025, "Dialogue Without Limits: Constant-Sized KV Caches for Extended Responses in
LLMs"): keep the most recent `window` tokens, and of the older ones the top-K by the attention the recent window's
queries pay them (correlation-aware selection), per kv head; re-evaluated at every eviction step.

Defaults and their sources (the authors' repository, ghadiaravi13/MorphKV, README commands):
- window = 32 recent tokens, kept and used as the observation window (its LongBench runs use `-ws 32`;
  long-response runs use 200).
- agg = "sum" (option `morph_agg`): the window's attention summed over its queries (`--morph_type sum_fused` for
  LongBench; "max" = `max_fused`, its long-response setting).
- Query heads of one kv head are reduced by mean (sum) or max, matching the aggregation.
- Evicts at every step in the paper; here a decode step evicts once per `decode_slack` tokens (one block) like
  every policy, `decode_slack=0` evicts every token as the paper does.
"""

from dataclasses import dataclass

import torch

from kvstore.attention.received import attention_received, per_kv_head
from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.settings import named


@dataclass
class MorphKVSettings:
    window: int = 32  # recent tokens kept, whose queries score the older ones
    agg: str = named("morph_agg", "sum")  # "sum" | "max" of the window's attention over its queries

    def __post_init__(self) -> None:
        if self.window < 1:
            raise KVStoreError(f"window must be >= 1, got {self.window}")
        if self.agg not in ("sum", "max"):
            raise KVStoreError(f"morph_agg must be 'sum' or 'max', got {self.agg!r}")


class MorphKVPolicy(Policy):
    name = "morphkv"
    granularity = "token"
    per_head = True
    default_sink = 0
    settings_type = MorphKVSettings

    def default_recent(self) -> int:
        return self.settings.window

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        how = self.settings.agg
        rows = []
        for i in range(ctx.keys.shape[0]):
            valid = None if ctx.valid is None else ctx.valid[i]
            s = attention_received(ctx.queries[i], ctx.keys[i], ctx.scaling, valid, ctx.max_elems, how)
            rows.append(per_kv_head(s, ctx.keys.shape[1], "mean" if how == "sum" else "max"))
        return torch.stack(rows)
