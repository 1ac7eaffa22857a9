"""The one typed configuration of an evicting cache: every knob of docs/algorithm.md, with its default."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from kvstore.defaults import DEFAULT_POLICY
from kvstore.errors import KVStoreError


@dataclass
class CacheConfig:
    """Eviction settings shared by every policy (a policy reads only the fields it uses)."""

    policy: str = DEFAULT_POLICY  # registered policy name (kvstore.policies.POLICIES)
    budget: int | float | None = (
        None  # int: tokens per layer; float in (0, 1]: density of the prompt; None: never evict
    )
    block: int = 32  # b: tokens per key block (eviction granularity of block policies, and of forced blocks)
    window: int = 16  # W: observation window of recent queries used for scoring
    walk_steps: int = 3  # H: steps of the Nexus walk over the most recent window rows
    lam: float = 0.5  # lambda: weight of the walk (bridge) score in the Nexus score
    eps_tie: float = 1e-6  # recency tie-break added to the weights
    n: int = 5  # uniforms averaged per candidate in the reservoir priority (n -> inf tends to top-K)
    recent_blocks: int = 1  # most recent complete blocks that are always kept
    chunk_size: int = 512  # prefill chunk (tokens) for kvstore.prefill
    selector: str | None = None  # "reservoir" | "topk"; None: the policy's own default
    renorm_candidates: bool = False  # renormalize weights over the candidate blocks only (ablation; spec: over all)
    pool_kernel: int = 5  # SnapKV / PyramidKV average-pooling kernel over token scores
    pyramid_spread: float = 0.5  # PyramidKV: layer 0 gets (1 + spread) x budget, the last layer (1 - spread) x budget
    ada_floor: float = 0.2  # Ada-KV: share of each head's uniform budget it is guaranteed
    use_triton: bool | None = None  # fused Triton scorer: None = on CUDA when installed; False = torch path
    seed: int = 0  # seed of the cache's torch.Generator (reservoir draws)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        b = self.budget
        if b is not None and not isinstance(b, bool):
            if isinstance(b, float) and not 0.0 < b <= 1.0:
                raise KVStoreError(f"budget density must be in (0, 1], got {b}")
            if isinstance(b, int) and b <= 0:
                raise KVStoreError(f"budget must be a positive number of tokens, got {b}")
        for name in ("block", "window", "n", "chunk_size", "pool_kernel"):
            if getattr(self, name) < 1:
                raise KVStoreError(f"option {name} must be >= 1, got {getattr(self, name)}")
        if self.walk_steps < 0 or self.recent_blocks < 0 or self.lam < 0 or self.eps_tie < 0:
            raise KVStoreError("walk_steps, recent_blocks, lam and eps_tie must be >= 0")
        if self.selector not in (None, "reservoir", "topk"):
            raise KVStoreError(f"unknown selector {self.selector!r}; use 'reservoir' or 'topk'")

    @classmethod
    def from_options(cls, **options: Any) -> CacheConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise KVStoreError(f"unknown cache option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
