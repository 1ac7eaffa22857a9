"""The set oracles of `bench replay --oracle`: how close to the full cache an evicting memory could come if it knew
what the agent's replies will attend.

At every eviction step an oracle keeps, per kv head, the held tokens that replies still to come attend most on the
full cache (the attention each token receives, summed over those replies' queries and averaged over the query heads
of the kv head), top-K, with no forced sink or recent tokens. Two horizons:
- `next`: the next reply only (the reply the cache is heading for);
- `future`: every reply still to come, each query counted once (H2O's accumulated attention, read from the future).
Each is a real evicting cache, one kept set per kv head for every query, chosen before the queries run, that only
reads its ranking from the future. So they measure what a ranking of this kind could give with perfect knowledge.
Neither is the best set there is (that search is intractable), so they are reference points, not a strict ceiling;
on the shared conversations the `future` oracle comes closer to the full cache than the query-specific bound
(benchmarks.replay_bound) more often than not.

Two steps per conversation: the full-cache reference replay records each reply's attention (`ReplyAttention`,
with the model's sdpa attention wrapped while it runs); each budget then replays a session whose cache ranks by that
record (`OraclePolicy`). Eviction inside a reply that spans several prefill chunks counts that reply as still to
come.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface

from benchmarks.replay_bound import IMPL, check_model
from kvstore import Session, SessionConfig
from kvstore.attention.received import attention_received, per_kv_head
from kvstore.cache.config import CacheConfig
from kvstore.policies.base import Policy, ScoreContext

HORIZONS = {"next": "oracle:next-reply-top-K", "future": "oracle:future-replies-top-K"}  # names in tables and JSON


class ReplyAttention:
    """What each reply of a full-cache replay attends: per reply (1-based) and layer, [Hkv, end] float32, the
    attention every earlier token and the reply's own received from the reply's queries; `starts[turn]` and
    `ends[turn]` are where the reply begins and ends. `start(turn)` before a reply runs and `stop()` after it
    (replay's before_reply and on_reply)."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.turn: int | None = None
        self.tables: dict[int, list[torch.Tensor | None]] = {}
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}

    def start(self, turn: int) -> None:
        self.turn = turn
        self.tables[turn] = [None] * self.num_layers

    def stop(self) -> None:
        self.turn = None

    def add(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, scaling: float | None) -> None:
        """One attention call of the running reply: query [1, Hq, q, D], key [1, Hkv, kv, D] (the full cache)."""
        kv = key.shape[-2]
        received = per_kv_head(attention_received(query[0], key[0], scaling), key.shape[1]).cpu()  # [Hkv, kv]
        table = self.tables[self.turn]
        old = table[layer_idx]
        if old is not None:  # a reply over several prefill chunks: sum its queries' attention
            received[:, : old.shape[-1]] += old
        table[layer_idx] = received
        self.starts.setdefault(self.turn, kv - query.shape[-2])
        self.ends[self.turn] = kv

    @contextmanager
    def recording(self, model: torch.nn.Module) -> Iterator[ReplyAttention]:
        """While inside, every sdpa attention call of a running reply is added to the record."""
        check_model(model)
        base = AttentionInterface._global_mapping[IMPL]

        def attention(module, query, key, value, attention_mask, **kwargs):
            if self.turn is not None:
                self.add(module.layer_idx, query, key, kwargs.get("scaling"))
            return base(module, query, key, value, attention_mask, **kwargs)

        AttentionInterface._global_mapping[IMPL] = attention
        try:
            yield self
        finally:
            AttentionInterface._global_mapping[IMPL] = base

    def ahead(self, seen: int) -> list[int]:
        """The replies still to come after `seen` tokens: those that end later, in order."""
        return [t for t in sorted(self.ends) if self.ends[t] > seen]


class OraclePolicy(Policy):
    """Per kv head, top-K by the attention the replies still to come give each held token on the full cache (the
    next one, or all of them: `horizon`)."""

    name = "oracle"
    granularity = "token"
    per_head = True
    default_sink = 0

    def __init__(self, config: CacheConfig, record: ReplyAttention, horizon: str = "next") -> None:
        super().__init__(config)
        if horizon not in HORIZONS:
            raise ValueError(f"unknown oracle horizon {horizon!r}; known: {', '.join(HORIZONS)}")
        self.record, self.horizon = record, horizon

    def default_recent(self) -> int:
        return 0

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        turns = self.record.ahead(ctx.seen)
        if not turns:  # past the last reply nothing is scored any more: keep the most recent
            return ctx.positions.float()
        total = torch.zeros(ctx.positions.shape, dtype=torch.float32, device=ctx.positions.device)
        for turn in turns[:1] if self.horizon == "next" else turns:
            table = self.record.tables[turn][ctx.layer_idx].to(ctx.positions.device)  # [Hkv, end]
            total += table.expand(ctx.positions.shape[0], -1, -1).gather(-1, ctx.positions)
        return total


class OracleSession(Session):
    """A replay session whose every cache (a new one after a failed forward too) ranks by the record."""

    def __init__(self, model, tokenizer, config: SessionConfig, record: ReplyAttention, horizon: str) -> None:
        self.record, self.horizon = record, horizon
        super().__init__(model, tokenizer, config)

    def new_cache(self):
        cache = super().new_cache()
        cache.policy = OraclePolicy(cache.config, self.record, self.horizon)
        return cache


def oracle_session(
    model, tokenizer, budget: int, record: ReplyAttention, horizon: str, prefill_slack: int = 0
) -> OracleSession:
    """A fresh replay session for the oracle of `horizon` at `budget` tokens per layer. Its cache is built as H2O's
    with no recent tokens (a token-level, per-head policy with the same budget checks), then ranks by `record`.
    `prefill_slack` as the cache option: 0 evicts after every prefill chunk, as the baselines do; the default
    memory's 4,096 evicts each message once, so its later chunks are computed beside the whole message."""
    options = {"recent": 0, "prefill_slack": prefill_slack}
    config = SessionConfig(policy="h2o", budget=budget, cache_options=options, protect="none")
    return OracleSession(model, tokenizer, config, record, horizon)


def oracle_label(horizon: str, prefill_slack: int = 0) -> str:
    """The name of an oracle's runs in tables and JSON; with a prefill slack, the option as a spec writes it."""
    return HORIZONS[horizon] + (f"@prefill_slack={prefill_slack}" if prefill_slack else "")


def parse_horizons(text: str | None) -> tuple[str, ...]:
    """`--oracle next,future` as horizons; ValueError naming the known ones for anything else."""
    chosen = tuple(dict.fromkeys(h.strip() for h in (text or "").split(",") if h.strip()))
    bad = [h for h in chosen if h not in HORIZONS]
    if bad:
        raise ValueError(f"--oracle {text}: unknown horizon {bad[0]!r}; give next, future or next,future")
    return chosen
