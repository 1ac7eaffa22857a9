"""How a session loads its model and manages its cache (kvstore.session.Session takes one)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kvstore.defaults import (
    DEFAULT_MODEL,
    DEFAULT_POLICY,
    DEFAULT_PROTECT,
    DEFAULT_PROTOCOL,
    DEFAULT_SESSION_BUDGET,
    PROTECT_MODES,
)
from kvstore.errors import KVStoreError

PROTOCOLS = ("true-eviction", "re-prefill")
PROTECT = PROTECT_MODES  # what of the opening the cache never evicts (SessionConfig.protect)


@dataclass
class SessionConfig:
    """How a session loads its model and manages its cache."""

    model: str = DEFAULT_MODEL  # registry name, Hugging Face id or local model directory
    policy: str = DEFAULT_POLICY  # eviction policy (kvstore.POLICIES); "full" = dense reference, never evicts
    budget: int | float | None = (
        DEFAULT_SESSION_BUDGET  # tokens per layer, or density of the first prompt; None = never evict
    )
    protocol: str = DEFAULT_PROTOCOL  # "true-eviction" (one cache for the session) or "re-prefill" (new cache per turn)
    seed: int = 0  # seed of the cache's generator and of sampling
    chunk_size: int = 512  # prefill chunk in tokens (eviction runs between chunks)
    device: str | None = None  # None: a CUDA GPU when there is one, else the CPU
    dtype: str | None = None  # "bf16" | "fp16" | "fp32"; None: bf16 where the hardware supports it, else fp32
    cache_options: dict = field(default_factory=dict)  # further CacheConfig knobs (block, window, lam, ...)
    protect: str = DEFAULT_PROTECT  # never evict: "system+task" (system prompt + first user message), "system", "none"
    profile: str | None = None  # memory profile file (nexus-agent calibrate): its weights for the opening's template

    def __post_init__(self) -> None:
        if self.protect not in PROTECT:
            raise KVStoreError(f"unknown protect {self.protect!r}; use one of {', '.join(PROTECT)}")
        if self.protocol not in PROTOCOLS:
            raise KVStoreError(f"unknown protocol {self.protocol!r}; use one of {', '.join(PROTOCOLS)}")
        if self.chunk_size < 1:
            raise KVStoreError(f"chunk_size must be >= 1, got {self.chunk_size}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
