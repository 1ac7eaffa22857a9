"""What an eviction policy is: a score, its settings (a dataclass in its own file), and the forced set its paper
keeps (sink tokens and recent tokens). The cache owns budgets, forced regions, gather and write-back; a policy never
touches them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from kvstore.cache.selection import select
from kvstore.kernels import received_triton
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
    reply_queries: torch.Tensor | None = None  # [q] bool on the CPU: which of this call's new queries are the reply's
    triton: bool = True  # False: the torch paths even where the fused kernels run (CacheConfig.use_triton=False)
    own: torch.Tensor | None = None  # [B, Hkv, T] bool: held tokens the agent's replies wrote (policies reading it)
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
        attention pass may compute on the way (kvstore.cache.prefill_attention, decode_attention)."""
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

    def recent_tokens(self, layer_budget: int) -> int:
        """The most recent tokens that are never evicted at this layer budget (block policies: `recent_blocks`
        whole blocks; the layout adds the incomplete tail block by its real size)."""
        if self.granularity == "block":
            b = self.config.block
            blocks = self.config.recent_blocks
            if self.config.recent_share:  # a share of the budget, never more than fits beside the sink and tail
                blocks = max(blocks, min(int(self.config.recent_share * layer_budget) // b, layer_budget // b - 2))
            return blocks * b
        r = self.config.recent if self.config.recent is not None else self.default_recent()
        tokens = round(r * layer_budget) if isinstance(r, float) else int(r)
        if self.config.recent_share:  # never more than fits beside the sink
            share = min(int(self.config.recent_share * layer_budget), layer_budget - self.sink_tokens())
            tokens = max(tokens, share)
        return tokens

    def default_recent(self) -> int | float:
        return 0

    def forced_max(self, layer_budget: int) -> int:
        """The most tokens the forced set can take (block policies: plus an incomplete tail of b - 1 tokens)."""
        tail = self.config.block - 1 if self.granularity == "block" else 0
        return self.sink_tokens() + self.recent_tokens(layer_budget) + tail

    def layer_budgets(self, tokens: int, n_layers: int) -> list[int]:
        """Tokens each layer may hold (PyramidKV varies it with depth; the mean is `tokens`)."""
        return [tokens] * n_layers


def attention_received(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    max_elems: int = 1 << 24,
    reduce: str = "sum",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention each key receives from `queries`, per query head, computed over chunks of queries.

    queries: [Hq, q, D], the queries at the last q key positions (causal: query i sees keys j <= T - q + i).
    keys: [Hkv, T, D] (GQA: query head h reads kv head h // (Hq / Hkv)). key_valid: [Hkv, T] bool or None.
    Returns [Hq, T] float32: the sum (or max) over the queries of softmax(q k^T * scale), each query's row scaled
    by `weights` [q] when given (a sum only). At most `max_elems` logits ([Hq, chunk, T]) exist at once, in one
    buffer reused chunk after chunk, so memory stays O(Hq * T) however many queries come.
    """
    if reduce == "sum":
        coefs = torch.ones(1, queries.shape[1]) if weights is None else weights[None]
        return received_sums(queries, keys, scale, key_valid, max_elems, coefs)[0]
    out = torch.zeros(queries.shape[0], keys.shape[1], device=keys.device)
    for _, logits in _masked_logits(queries, keys, scale, key_valid, max_elems):
        torch.maximum(out, torch.softmax(logits, dim=-1).amax(1), out=out)
    return out


def received_sums(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None,
    key_valid: torch.Tensor | None,
    max_elems: int,
    coefs: torch.Tensor,
) -> torch.Tensor:
    """attention_received's sums for k weightings of the queries in one pass: coefs [k, q] -> [k, Hq, T], row r
    the sum over the queries i of coefs[r, i] x softmax(q_i k^T * scale). Each chunk's probabilities are left
    unnormalised in the logits' buffer (exp(l - max)) and summed by one matmul with coefs / (each row's sum)."""
    hq, t = queries.shape[0], keys.shape[1]
    out = torch.zeros(hq, coefs.shape[0], t, device=keys.device)  # [Hq, k, T]
    for c0, logits in _masked_logits(queries, keys, scale, key_valid, max_elems):  # [Hq, c, T]
        logits.sub_(logits.amax(-1, keepdim=True)).exp_()
        w = coefs[:, c0 : c0 + logits.shape[1]].to(logits)[None] / logits.sum(-1)[:, None, :]  # [Hq, k, c]
        out.baddbmm_(w, logits)
    return out.transpose(0, 1)


def _masked_logits(
    queries: torch.Tensor, keys: torch.Tensor, scale: float | None, key_valid: torch.Tensor | None, max_elems: int
):
    """(c0, logits [Hq, c, T]) for the consecutive chunks of queries starting at c0: q k^T * scale, -inf where a
    query may not look (its future keys, invalid keys). Every chunk is written into the same buffer (a fresh
    buffer this large costs more in page faults than its matmul): use each before asking for the next."""
    hq, q, d = queries.shape
    hkv, t, _ = keys.shape
    g, dev = hq // hkv, keys.device
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    rows = max(1, min(q, max_elems // max(1, hq * t)))
    kt = keys.float().transpose(1, 2)  # [Hkv, D, T]
    buf = torch.empty(hq * rows * t, device=dev)
    bad_key = None if key_valid is None else ~key_valid.repeat_interleave(g, 0)[:, None, :]  # [Hq, 1, T]
    for c0 in range(0, q, rows):
        c = min(rows, q - c0)
        qc = queries[:, c0 : c0 + c].float() * scale  # [Hq, c, D] (scaled here: the [Hq, c, T] buffer stays one)
        logits = torch.matmul(qc.reshape(hkv, g * c, d), kt, out=buf[: hq * c * t].view(hkv, g * c, t))
        logits = logits.view(hq, c, t)
        sees = t - q + c0 + 1  # query i of the chunk sees keys j < sees + i: only columns >= sees are masked
        first = max(sees, 0)  # (more queries than keys: the first ones see none, their rows come out NaN)
        if first < t:
            future = torch.arange(first, t, device=dev)[None, :] >= (sees + torch.arange(c, device=dev))[:, None]
            logits[..., first:].masked_fill_(future, float("-inf"))
        if bad_key is not None:
            logits.masked_fill_(bad_key, float("-inf"))
        yield c0, logits


def per_kv_head(s: torch.Tensor, hkv: int, how: str = "mean") -> torch.Tensor:
    """[Hq, T] -> [Hkv, T]: reduce each kv head's group of query heads (mean, as kvpress; or max)."""
    grouped = s.view(hkv, -1, s.shape[-1])
    return grouped.mean(1) if how == "mean" else grouped.amax(1)


def head_token_attention(
    ctx: ScoreContext, queries: torch.Tensor | None = None, reduce: str = "sum", weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention each held token receives from `queries` (default: the window), summed (or maxed) over those
    queries and averaged over the query heads of each kv head: [B, Hkv, T]. Queries sit at the last positions;
    `weights` [q] weighs each query's share of a sum (e.g. 0/1: only some queries count)."""
    q = ctx.queries if queries is None else queries
    if reduce == "sum":
        return head_token_sums(ctx, q, [weights])[0]
    hkv = ctx.keys.shape[1]
    rows = []
    for i in range(ctx.keys.shape[0]):  # the max: the torch path only
        valid = None if ctx.valid is None else ctx.valid[i]
        rows.append(per_kv_head(attention_received(q[i], ctx.keys[i], ctx.scaling, valid, ctx.max_elems, reduce), hkv))
    return torch.stack(rows)


def weighting_coefs(weightings: list[torch.Tensor | None], q: int) -> torch.Tensor:
    """[k, q] float32 on the CPU: the weightings of q queries as rows (None: every query once)."""
    return torch.stack([torch.ones(q) if w is None else w.float().cpu() for w in weightings])


def head_token_sums(ctx: ScoreContext, queries: torch.Tensor, weightings: list[torch.Tensor | None]) -> torch.Tensor:
    """head_token_attention's sums for k weightings of the same `queries` [B, Hq, q, D] (each [q], or None: every
    query once; e.g. every query and the reply's only): [k, B, Hkv, T], from one pass over the logits on the torch
    path (the fused Triton kernel, where it runs, once per weighting)."""
    b, hkv, t = ctx.keys.shape[:3]
    q = queries.shape[2]
    coefs = weighting_coefs(weightings, q)  # [k, q]
    rows = []
    for i in range(b):
        valid = None if ctx.valid is None else ctx.valid[i]
        fused = (
            [received_triton(queries[i], ctx.keys[i], ctx.scaling, valid, w) for w in weightings] if ctx.triton else []
        )
        if fused and all(s is not None for s in fused):
            rows.append(torch.stack(fused))
            continue
        s = received_sums(queries[i], ctx.keys[i], ctx.scaling, valid, ctx.max_elems, coefs)  # [k, Hq, T]
        rows.append(s.view(len(coefs), hkv, -1, t).mean(2))
    return torch.stack(rows, 1)


def observed_sums(ctx: ScoreContext, queries: torch.Tensor, weightings: list[torch.Tensor | None]) -> torch.Tensor:
    """`head_token_sums` of the observed queries for `weightings` (a policy's observe_weightings): the ones the
    attention pass computed (ctx.sums, kvstore.cache.prefill_attention) or a pass of their own."""
    if ctx.sums is not None:
        if ctx.sums.shape[0] != len(weightings):
            raise ValueError(f"{ctx.sums.shape[0]} sums were computed for {len(weightings)} weightings")
        return ctx.sums
    return head_token_sums(ctx, queries, weightings)


def mean_received(acc: torch.Tensor, ctx: ScoreContext) -> torch.Tensor:
    """Accumulated attention [B, Hkv, T] divided by the number of queries that could attend each held token (its
    mean per query, kvpress's ObservedAttentionPress normalisation), so early tokens are not favoured for age."""
    return acc / (ctx.seen - ctx.positions).clamp_min(1).to(acc.dtype)
