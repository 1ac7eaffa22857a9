"""The settings of a session's model and memory, declared and validated once.

`MemorySettings` is what every entry point shares: a run (`pipeline.config.RunConfig.memory`), a server
(`server.config.ServeConfig.memory`) and a kvstore session (`SessionConfig` extends it with what only a session
needs, and builds from it, once, the cache's typed config: `SessionConfig.cache`, a `CacheConfig` with its policy
class resolved). The one route of a setting: the edge (CLI or Python) builds MemorySettings, validated here; the
entry point wraps it into a SessionConfig (`SessionConfig.of`); the session opens its caches from `.cache`
(kvstore.cache.evicting.open_cache). No torch import here: the command line reads it for --help (the cache's config,
which imports the policies, is imported when a SessionConfig is built).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvstore.defaults import (
    DEFAULT_MODEL,
    DEFAULT_POLICY,
    DEFAULT_PROTECT,
    DEFAULT_PROTOCOL,
    DEFAULT_SESSION_BUDGET,
    PROTECT_MODES,
    check_budget,
    describe_memory,
    parse_budget,
)
from kvstore.errors import SettingError

if TYPE_CHECKING:
    from kvstore.cache.config import CacheConfig

PROTOCOLS = ("true-eviction", "re-prefill")


@dataclass
class MemorySettings:
    """A session's model and how its KV memory is managed (solve, eval, chat, serve and a kvstore Session)."""

    model: str = DEFAULT_MODEL  # registry name, Hugging Face id or local model directory
    policy: str = DEFAULT_POLICY  # eviction policy (kvstore.POLICIES); "full" = dense reference, never evicts
    budget: int | float | str | None = DEFAULT_SESSION_BUDGET  # tokens per layer, or a density of the first prompt
    # in (0, 1]; None = never evict; text is parsed (kvstore.defaults.parse_budget: "2048", "25%", "none")
    protocol: str = DEFAULT_PROTOCOL  # "true-eviction" (one cache for the session) or "re-prefill" (new cache per turn)
    protect: str = DEFAULT_PROTECT  # never evicted, counted in the budget: "system+task" (system prompt + first user
    # message), "system" or "none"
    profile: str | Path | None = None  # memory profile file or directory (nexus-agent calibrate): the weights of the
    # profile whose template the opening carries; None: none ("auto", the profile store, is resolved by the pipeline)
    seed: int = 0  # seed of the cache's generator and of sampling
    device: str | None = None  # torch device; None: a CUDA GPU when there is one, else the CPU

    def __post_init__(self) -> None:
        self.budget = parse_budget(self.budget) if isinstance(self.budget, str) else check_budget(self.budget)
        if self.protect not in PROTECT_MODES:
            raise SettingError("protect", f"{self.protect!r}: use one of {', '.join(PROTECT_MODES)}")
        if self.protocol not in PROTOCOLS:
            raise SettingError("protocol", f"{self.protocol!r} is unknown: use one of {', '.join(PROTOCOLS)}")

    def describe(self) -> str:
        """For people: policy, budget, protocol, protect and memory profile (kvstore.defaults.describe_memory)."""
        return describe_memory(self.policy, self.budget, self.protocol, self.protect, self.profile)

    def settings(self) -> dict[str, Any]:
        """These fields alone, by name (a SessionConfig's too): what a config that nests them writes flat."""
        return {f.name: getattr(self, f.name) for f in fields(MemorySettings)}


@dataclass
class SessionConfig(MemorySettings):
    """How a session loads its model and manages its cache: the memory settings and what only a session needs."""

    chunk_size: int = 512  # prefill chunk in tokens (eviction runs between chunks)
    dtype: str | None = None  # "bf16" | "fp16" | "fp32"; None: bf16 where the hardware supports it, else fp32
    cache_options: dict = field(default_factory=dict)  # further CacheConfig knobs (block, window, lam, ...)
    skip_unreadable_profiles: bool = False  # an unreadable file in a `profile` directory is skipped, said once on
    # stderr: the server's sessions, where a file that turns up damaged while it serves (a copy under way) must not
    # fail every new session; elsewhere it stops the run, which checked the directory at its start
    tool_fallback: bool = False  # render tools, tool calls and tool results through the fallback tool template where
    # the model's template has none (kvstore.session.tools_fallback): the server's sessions; elsewhere the template's
    # own text (runs refuse native tools on such a template, and replays and benchmarks compare on its own text)
    cache: CacheConfig = field(init=False, repr=False, compare=False)  # every cache of the session runs with this:
    # policy, budget, seed, chunk_size and cache_options built into one typed, checked config (never saved: rebuilt
    # from the fields above, as `dataclasses.replace` does)

    def __post_init__(self) -> None:
        from kvstore.cache.config import CacheConfig  # imports the policies and torch: a session is about to run

        super().__post_init__()
        if isinstance(self.profile, Path):  # saved as text (kvstore.session.persist, chat.json)
            self.profile = str(self.profile)
        options = {"chunk_size": self.chunk_size} | dict(self.cache_options)
        self.cache = CacheConfig.of(self.policy, budget=self.budget, seed=self.seed, **options)
        self.chunk_size = self.cache.chunk_size  # a `chunk_size` cache option sets the session's prefill chunk too

    @classmethod
    def of(cls, memory: MemorySettings, **more: Any) -> SessionConfig:
        """The session config of a run's or a server's memory settings; `more`: chunk_size, dtype, cache_options."""
        return cls(**memory.settings(), **more)

    def to_dict(self) -> dict[str, Any]:
        """The fields a SessionConfig is made of, as saved (session files, chat.json); `cache` is rebuilt from them."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.init}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionConfig:
        known = {f.name for f in fields(cls) if f.init}
        return cls(**{k: v for k, v in data.items() if k in known})
