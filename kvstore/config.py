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
    block: int = 32  # b: tokens per key block (eviction granularity of block policies, and the decode slack)
    window: int = 16  # W: observation window of recent queries used for scoring (SnapKV/MorphKV: their own default)
    walk_steps: int = 3  # H: steps of the Nexus walk over the most recent window rows
    lam: float = 0.5  # lambda: weight of the walk (bridge) score in the Nexus score
    eps_tie: float = 1e-6  # recency tie-break added to the weights
    n: int = 5  # uniforms averaged per candidate in the reservoir priority (n -> inf tends to top-K)
    recent_blocks: int = 1  # block policies: most recent complete blocks always kept (plus the incomplete tail)
    recent_share: float = 0.0  # keep at least this share of the layer budget as recent tokens (whole blocks for blocks)
    sink: int | None = None  # attention-sink tokens always kept; None: the policy's default (docs/baselines.md)
    recent: int | float | None = None  # token policies: recent tokens always kept (float: share of the layer budget)
    decode_slack: int | None = None  # tokens a layer may grow past its budget in decode; None: one block; 0: every step
    observe_batch: int = 64  # decoded tokens whose attention statistics wait for one call (1: every token alone)
    compress_once: bool = False  # prefill-only policies: compress at the end of the first prefill only (benchmarks)
    h2o_normalize: bool = True  # H2O: divide accumulated attention by the number of queries that could attend
    pool: str = "avg"  # SnapKV family: "avg" | "max" pooling of the window scores (SnapKV code: avgpool)
    morph_agg: str = "sum"  # MorphKV: "sum" | "max" of the recent window's attention (its repo: sum_fused / max_fused)
    score_chunk: int = 1 << 24  # attention statistics: at most this many fp32 probabilities live at once
    chunk_size: int = 512  # prefill chunk (tokens) for kvstore.prefill()
    selector: str | None = None  # "reservoir" | "topk"; None: the policy's own default
    score_memory: str = "none"  # Nexus: "none" (spec) | "mean" | "max" of each block's score over the steps it was held
    acc_weight: float = 1.0  # nexus-agent: weight of the accumulated attention next to the Nexus score (weight 1)
    reply_weight: float = 1.0  # nexus-agent: weight of the attention from the agent's own replies (0: not kept)
    own_weight: float = 0.0  # nexus-agent: a bonus to every token the agent's own replies wrote (0: not kept)
    opening_nexus: bool = True  # nexus-agent: Nexus term before the first reply even without a profile (False: off)
    renorm_candidates: bool = False  # renormalize weights over the candidate blocks only (ablation; spec: over all)
    reservoir_mean: float | None = None  # rescale candidate weights to this mean before selection (None: as scored)
    pool_kernel: int = 5  # SnapKV / PyramidKV average-pooling kernel over token scores
    pyramid_beta: float = 20.0  # PyramidKV: the last layer's candidate share is 1/beta of the mean (paper code: 20)
    pyramid_spread: float | None = None  # legacy PyramidKV shape: layer 0 (1 + spread) x budget ... last (1 - spread)
    ada_floor: float = 0.2  # Ada-KV: share of each head's uniform budget it is guaranteed
    use_triton: bool | None = None  # fused Triton kernels: None = on CUDA when installed; False = torch paths
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
        for name in ("block", "window", "n", "chunk_size", "pool_kernel", "score_chunk", "observe_batch"):
            if getattr(self, name) < 1:
                raise KVStoreError(f"option {name} must be >= 1, got {getattr(self, name)}")
        if self.walk_steps < 0 or self.recent_blocks < 0 or self.lam < 0 or self.eps_tie < 0:
            raise KVStoreError("walk_steps, recent_blocks, lam and eps_tie must be >= 0")
        if not 0.0 <= self.recent_share < 1.0:
            raise KVStoreError(f"recent_share must be in [0, 1), got {self.recent_share}")
        if min(self.acc_weight, self.reply_weight, self.own_weight) < 0:
            raise KVStoreError(
                "acc_weight, reply_weight and own_weight must be >= 0, got "
                f"{self.acc_weight}, {self.reply_weight}, {self.own_weight}"
            )
        if self.reservoir_mean is not None and self.reservoir_mean <= 0:
            raise KVStoreError(f"reservoir_mean must be > 0 (or None), got {self.reservoir_mean}")
        if (self.sink or 0) < 0 or (self.decode_slack or 0) < 0 or (self.recent or 0) < 0 or self.pyramid_beta < 1:
            raise KVStoreError("sink, recent and decode_slack must be >= 0 and pyramid_beta >= 1")
        if isinstance(self.recent, float) and self.recent >= 1.0:
            raise KVStoreError(f"recent as a share of the budget must be < 1, got {self.recent}")
        if self.pool not in ("avg", "max") or self.morph_agg not in ("sum", "max"):
            raise KVStoreError(
                f"pool must be 'avg' or 'max' and morph_agg 'sum' or 'max', got {self.pool!r}, {self.morph_agg!r}"
            )
        if self.score_memory not in ("none", "mean", "max"):
            raise KVStoreError(f"score_memory must be 'none', 'mean' or 'max', got {self.score_memory!r}")
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


def option_value(key: str, text: str) -> Any:
    """A cache option written as text (`POLICY@key=value` specs) as its value: an int, float, bool or None where it
    reads as one; an option whose default is text (e.g. score_memory="none") stays text."""
    if isinstance(_TEXT_DEFAULTS.get(key), str):
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_policy_spec(text: str, other: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """`POLICY[@key=value,...]` -> (policy, CacheConfig options), the policy and options checked (a clear error
    when unknown or bad); keys of `other` are not cache options: their text values are written there. The
    benchmarks' way of naming a policy with non-default options."""
    from kvstore.policies import POLICIES  # the policies import this module

    policy, _, rest = text.strip().partition("@")
    if policy not in POLICIES:
        raise KVStoreError(f"unknown policy {policy!r} in spec {text!r}; known: {', '.join(POLICIES)}")
    options = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise KVStoreError(f"spec {text!r}: option {item!r} is not key=value")
        if other is not None and key in other:
            other[key] = value
        else:
            options[key] = option_value(key, value)
    CacheConfig.from_options(policy=policy, **options)
    return policy, options


_TEXT_DEFAULTS = {f.name: f.default for f in fields(CacheConfig)}
