"""Ada-KV (Feng et al. 2024) around any scorer, as kvpress's AdaKVPress holds another press: the scorer's scores
decide, and a layer's budget is redistributed across kv heads by attention concentration (joint top-K of all
heads' candidate scores, with a guaranteed floor per head). `ada-snapkv` is `AdaKV.around(SnapKVPolicy)`.

MASKING, NOT MEMORY: heads keep different numbers of tokens, but the cache stores one dense tensor per layer, so
each head is padded to the largest head's count and the padded slots are masked out of attention (a per-head mask,
so flash-attention is not supported). `stats()` reports `masked_heads=True`, the effective (unmasked) tokens held
and the physical bytes, which are those of the largest head, not of the average one.

Defaults and their sources: floor = 0.2 (option `ada_floor`; the paper's safeguard alpha = 0.2; kvpress AdaKVPress
alpha_safeguard=0.20), over the scorer's own defaults (SnapKV: window 32, kernel 5, see kvstore.policies.snapkv).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.settings import named, nested, take_settings

# what the wrapper is as its scorer is (class attributes the cache and the registry read)
_SCORER_TRAITS = ("granularity", "per_head", "prefill_only", "evicts", "default_sink", "uses_profile", "observe")


@dataclass
class AdaKVSettings:
    scorer: Any = nested()  # the wrapped scorer's settings (its options are Ada-KV's too)
    floor: float = named("ada_floor", 0.2)  # share of each head's uniform budget it is guaranteed

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= 1.0:
            raise KVStoreError(f"ada_floor must be in [0, 1], got {self.floor}")


class AdaKV(Policy):
    """The Ada-KV wrapper; `AdaKV.around(scorer)` is the registrable policy class around one scorer class."""

    scorer: type[Policy] = Policy  # the wrapped scorer's class
    masks_heads = True
    settings_type = AdaKVSettings

    @classmethod
    def around(cls, scorer: type[Policy]) -> type[AdaKV]:
        traits = {name: getattr(scorer, name) for name in _SCORER_TRAITS}
        return type(f"AdaKV_{scorer.__name__}", (cls,), traits | {"scorer": scorer, "name": f"ada-{scorer.name}"})

    def __init__(self, config, settings: Any = None) -> None:
        super().__init__(config, settings)
        self.inner = self.scorer(config, self.settings.scorer)
        self.window, self.token_state, self.reads_own = self.inner.window, self.inner.token_state, self.inner.reads_own
        self.reads_names = self.inner.reads_names
        self.observe = self.inner.observe  # the class attribute mirrors the scorer's (Policy.observes reads it)

    @classmethod
    def settings_from(cls, options: dict[str, Any]) -> AdaKVSettings:
        """Its own options and its scorer's, taken out of `options`."""
        return take_settings(AdaKVSettings, options, scorer=cls.scorer.settings_from(options))

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        return self.inner.score(ctx)

    def weights(self, cand: torch.Tensor) -> torch.Tensor:
        return self.inner.weights(cand)

    def default_recent(self) -> int | float:
        return self.inner.default_recent()

    def layer_budgets(self, tokens: int, n_layers: int) -> list[int]:
        return self.inner.layer_budgets(tokens, n_layers)

    def select(
        self, cand: torch.Tensor, k: int, generator: torch.Generator, valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head keeps its own count (`allocate`); pad to the largest, mark the pads invalid."""
        if valid is not None:
            cand = cand.masked_fill(~valid, 0.0)
        counts = self.allocate(cand, k)  # [B, Hkv]
        m = int(counts.max())
        order = cand.argsort(dim=-1, descending=True, stable=True)[..., :m]
        ok = torch.arange(m, device=cand.device) < counts[..., None]
        if valid is not None:
            ok &= valid.gather(-1, order)
        idx, perm = order.sort(dim=-1)
        return idx, ok.gather(-1, perm)

    def allocate(self, cand_scores: torch.Tensor, k: int) -> torch.Tensor:
        """[B, Hkv, Nc] candidate scores -> [B, Hkv] kept counts summing to Hkv * k (capped at Nc per head)."""
        b, h, nc = cand_scores.shape
        k = min(k, nc)
        floor = min(int(self.settings.floor * k), k)
        normed = cand_scores / cand_scores.sum(-1, keepdim=True).clamp_min(1e-12)  # concentration per head
        ranked = normed.sort(dim=-1, descending=True).values[..., floor:]  # [B, H, Nc - floor]
        extra = (k - floor) * h
        flat = ranked.reshape(b, -1)
        top = torch.topk(flat, min(extra, flat.shape[-1]), dim=-1).indices // ranked.shape[-1]  # head of each pick
        counts = torch.zeros(b, h, dtype=torch.long, device=cand_scores.device)
        counts.scatter_add_(1, top, torch.ones_like(top))
        return counts + floor
