"""What an eviction policy is: a score, its settings (a dataclass in its own file), and the forced set its paper
keeps (sink tokens and recent tokens). The cache owns budgets, forced regions, gather and write-back; a policy never
touches them. The attention maths a score reads lives in kvstore.attention (torch references and the Triton
dispatch); here only the interface the cache calls (`Policy`, `ScoreContext`) and the two helpers that read a
ScoreContext's observation fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvstore.attention.received import head_token_sums
from kvstore.policies.selection import select
from kvstore.policies.settings import SharedSettings, take_settings


@dataclass(kw_only=True)
class ScoreContext:
    """What a policy sees at one eviction step of one layer."""

    keys: torch.Tensor  # [B, Hkv, T, D] held keys (already rotated), new chunk included
    queries: torch.Tensor  # [B, Hq, W', D] the most recent W' <= W queries of this layer (W: Policy.window)
    positions: torch.Tensor  # [B, Hkv, T] original positions of the held tokens
    state: dict[str, torch.Tensor]  # per-token policy state, each [B, Hkv, T]
    scaling: float | None  # the attention scale the model used (None: 1/sqrt(D))
    layer_idx: int
    valid: torch.Tensor | None = None  # [B, Hkv, T] bool, head-masking policies: False = padded slot
    seen: int = 0  # tokens this layer has seen (the next token's position)
    max_elems: int = 1 << 24  # attention statistics: most fp32 probabilities alive at once (CacheConfig.score_chunk)
    commit: bool = False  # True only for a real eviction step: a policy may update its per-token state in `score`
    prior: torch.Tensor | None = None  # [B, Hkv, T] memory-profile weights of the held tokens (0: none), or None
    prior_kind: str = "profile"  # what gave `prior`: a matched "profile", or a profile's "tokens" prior (an opening
    # no profile matched, kvstore.profiles.tokens)
    task_span: tuple[int, int] | None = None  # [start, end) of a matched opening's task text (SessionSignals)
    reply_queries: torch.Tensor | None = None  # [q] bool on the CPU: which of this call's new queries are the reply's
    triton: bool = True  # False: the torch paths even where the fused kernels run (CacheConfig.use_triton=False)
    own: torch.Tensor | None = None  # [B, Hkv, T] bool: held tokens the agent's replies wrote (policies reading it)
    last_own: torch.Tensor | None = None  # [B, Hkv, T] bool: those of its latest finished reply (None: none yet)
    names: torch.Tensor | None = None  # [B, Hkv, T] bool: held code names of a matched opening's task text (None: none)
    sums: torch.Tensor | None = None  # [k, B, Hkv, T]: the observed sums the attention pass computed (observe only)


@dataclass
class NoSettings:
    """The settings of a policy without options of its own (full, streaming)."""


class Policy:
    """Base class. Subclasses set the class attributes below and implement `score`."""

    name = "base"
    granularity = "block"  # "block": units are b-token key blocks; "token": single tokens
    per_head = False  # True: one score row per kv head (each head keeps its own tokens)
    prefill_only = False  # True: evict only on multi-token forwards (prefill chunks, new turns), never in decode
    evicts = True
    masks_heads = False  # True: heads keep different counts, padded slots are masked (the Ada-KV wrapper)
    token_state: tuple[str, ...] = ()  # names of per-token state tensors the cache keeps aligned with the keys
    default_sink: int | None = 0  # attention-sink tokens always kept when the `sink` option is None (None: one block)
    uses_profile = False  # True: the score reads a memory profile's weights (ScoreContext.prior); others ignore it
    reads_own = False  # True: the score reads which held tokens the agent's replies wrote (ScoreContext.own)
    reads_names = False  # True: the score reads which held tokens are the task's code names (ScoreContext.names)
    settings_type: type = NoSettings  # the policy's own settings: a dataclass in its file, defaults from its paper

    def __init__(self, config: SharedSettings, settings: Any = None) -> None:
        self.config = config
        self.settings = config.settings if settings is None else settings
        # recent queries the layer keeps for `score` (ScoreContext.queries): the policy's observation window; a
        # policy that scores without one keeps the last query only
        self.window: int = getattr(self.settings, "window", 1)

    @classmethod
    def settings_from(cls, options: dict[str, Any]) -> Any:
        """This policy's settings from flat options: the ones it declares are taken out of `options`."""
        return take_settings(cls.settings_type, options)

    @property
    def stochastic(self) -> bool:
        """Whether it selects by random draws, so that a result depends on the cache's seed."""
        return False

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        """[B, 1 or Hkv, N] non-negative scores over ALL held units (N blocks or T tokens); higher = keep."""
        raise NotImplementedError

    @property
    def observes(self) -> bool:
        """Whether the policy gathers statistics after every attention call (overrides `observe`, as H2O does)."""
        return type(self).observe is not Policy.observe

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        """Called after every attention call with that call's queries [B, Hq, q, D] (H2O accumulates here)."""

    @property
    def observes_sums(self) -> bool:
        """Whether `observe` reads only attention sums of the new queries (overrides `observe_weightings`), which an
        attention pass may compute on the way (kvstore.attention.prefill, kvstore.attention.decode)."""
        return type(self).observe_weightings is not Policy.observe_weightings

    def observe_weightings(self, ctx: ScoreContext) -> list[torch.Tensor | None] | None:
        """The weightings ([q] each, or None: every query once) of the new queries whose `head_token_sums` observe
        reads (`observed_sums`), so that the attention pass can compute them on the way (ScoreContext.sums). A
        policy that observes by sums overrides this and always returns the list; the base's None: it does not."""
        return None

    def weights(self, cand: torch.Tensor) -> torch.Tensor:
        """The candidates' scores [..., N_cand] as the selector weighs them (before protected ones are pinned)."""
        return cand

    def select(
        self, cand: torch.Tensor, k: int, generator: torch.Generator, valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The kept candidates: indices [B, H, k] ascending (top-K by weight; Nexus draws), and for head-masking
        policies which of them are real ([B, Hkv, K] bool; `valid` [B, Hkv, N_cand] says which candidates are)."""
        return select(cand, k, "topk", 1, generator), None

    # --- the forced set and the budgets -------------------------------------------------------------------------
    def sink_tokens(self) -> int:
        """The first tokens that are never evicted (StreamingLLM's attention sink)."""
        sink = self.config.sink if self.config.sink is not None else self.default_sink
        return self.config.block if sink is None else int(sink)

    def recent_tokens(self, layer_budget: int, ctx: ScoreContext | None = None) -> int:
        """The most recent tokens that are never evicted at this layer budget (block policies: `recent_blocks`
        whole blocks; the layout adds the incomplete tail block by its real size). `ctx`: the eviction step's, for
        a policy whose share depends on it (`recent_share`); None: the most it can be (budget checks)."""
        recent_share = self.recent_share(ctx)
        if self.granularity == "block":
            b = self.config.block
            blocks = self.config.recent_blocks
            if recent_share:  # a share of the budget, never more than fits beside the sink and tail
                blocks = max(blocks, min(int(recent_share * layer_budget) // b, layer_budget // b - 2))
            return blocks * b
        r = self.config.recent if self.config.recent is not None else self.default_recent()
        tokens = round(r * layer_budget) if isinstance(r, float) else int(r)
        if recent_share:  # never more than fits beside the sink
            share = min(int(recent_share * layer_budget), layer_budget - self.sink_tokens())
            tokens = max(tokens, share)
        return tokens

    def recent_share(self, ctx: ScoreContext | None) -> float:
        """The share of the layer budget kept as recent tokens at this eviction step (`CacheConfig.recent_share`;
        a policy may keep less at some steps, never more)."""
        return self.config.recent_share

    def default_recent(self) -> int | float:
        return 0

    def forced_max(self, layer_budget: int) -> int:
        """The most tokens the forced set can take (block policies: plus an incomplete tail of b - 1 tokens)."""
        tail = self.config.block - 1 if self.granularity == "block" else 0
        return self.sink_tokens() + self.recent_tokens(layer_budget) + tail

    def layer_budgets(self, tokens: int, n_layers: int) -> list[int]:
        """Tokens each layer may hold (PyramidKV varies it with depth; the mean is `tokens`)."""
        return [tokens] * n_layers


def observed_sums(ctx: ScoreContext, queries: torch.Tensor, weightings: list[torch.Tensor | None]) -> torch.Tensor:
    """`head_token_sums` of the observed queries for `weightings` (a policy's observe_weightings): the ones the
    attention pass computed (ctx.sums, kvstore.attention.prefill) or a pass of their own."""
    if ctx.sums is not None:
        if ctx.sums.shape[0] != len(weightings):
            raise ValueError(f"{ctx.sums.shape[0]} sums were computed for {len(weightings)} weightings")
        return ctx.sums
    return head_token_sums(ctx, queries, weightings)


def mean_received(acc: torch.Tensor, ctx: ScoreContext) -> torch.Tensor:
    """Accumulated attention [B, Hkv, T] divided by the number of queries that could attend each held token (its
    mean per query, kvpress's ObservedAttentionPress normalisation), so early tokens are not favoured for age."""
    return acc / (ctx.seen - ctx.positions).clamp_min(1).to(acc.dtype)
