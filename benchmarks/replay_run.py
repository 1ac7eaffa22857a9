"""The replay engine of `bench replay`: one conversation, teacher-forced through a Session in true-eviction mode,
its assistant tokens' next-token distributions compared with the full cache's.

Each message is appended on top of the cache as the agent would: the opening (system prompt + task) is prefilled,
then every observation is prefilled on its own (eviction as it goes) and every assistant message runs as one
teacher-forced forward (its logits for every token at once, no decoding). The full-cache reference runs once per
conversation; every policy x budget is compared with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from kvstore import Session, SessionConfig
from kvstore.session.teacher import Plan, replay


@dataclass(frozen=True)
class Spec:
    """One memory configuration to replay: a policy with options, and what of the opening it protects."""

    policy: str  # registered policy name
    options: tuple[tuple[str, object], ...] = ()  # CacheConfig options (block, window, selector, ...)
    protect: str = "none"  # SessionConfig.protect
    label: str = ""  # the name in tables (the spec string)
    protocol: str = "true-eviction"  # SessionConfig.protocol ("re-prefill": the whole history again each turn)
    profiled: bool = True  # takes the run's memory profile (--profile, --cross-fit, --learn); `@profile=none`: never

    @property
    def name(self) -> str:
        return self.label or self.policy


@dataclass
class TurnResult:
    """Fidelity sums over one assistant message's tokens (divide by `tokens` for means)."""

    turn: int  # index of the assistant message (1-based)
    start: int  # position of its first token (tokens seen before it)
    tokens: int  # scored tokens (the reply's content and its end-of-turn token)
    kl: float  # sum over tokens of KL(full || policy) in nats
    nll: float  # sum of -log p_policy(y) + log p_full(y) over the recorded tokens
    top1: int  # tokens whose argmax agrees with the full cache's
    held: float  # tokens the cache held per layer before the reply

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Reference:
    """The full cache's log-probabilities at the scored positions, per assistant message."""

    logp: list[torch.Tensor] = field(default_factory=list)  # [n_i, V] float32
    targets: list[torch.Tensor] = field(default_factory=list)  # [n_i] recorded token ids


def budget_tokens(budget: float | int, replayed: int) -> int:
    """A share of the replayed length (float <= 1) as tokens per layer, or a token count as given."""
    return math.ceil(budget * replayed) if isinstance(budget, float) else int(budget)


def reference(session: Session, p: Plan, record=None) -> Reference:
    """Replay on a full cache and keep its log-probabilities and targets; `record` (a
    benchmarks.replay_oracle.ReplyAttention, recording) is told where each reply starts and stops."""
    ref = Reference()

    def keep(turn, start, logits, ids, held):
        ref.logp.append(torch.log_softmax(logits.float(), -1))
        ref.targets.append(ids)
        if record is not None:
            record.stop()

    replay(session, p, keep, None if record is None else record.start)
    return ref


def compare(session: Session, p: Plan, ref: Reference) -> list[TurnResult]:
    """Replay on an evicting cache and score each assistant message against the reference."""
    out: list[TurnResult] = []

    def score(turn, start, logits, ids, held):
        full, y = ref.logp[turn - 1], ref.targets[turn - 1]
        assert torch.equal(y, ids), "the replayed tokens differ from the reference's"
        out.append(turn_result(turn, start, full, torch.log_softmax(logits.float(), -1), y, held))

    replay(session, p, score)
    return out


def turn_result(turn: int, start: int, full: torch.Tensor, pol: torch.Tensor, y: torch.Tensor, held: float):
    """full, pol: [n, V] log-probabilities; y: [n] the recorded tokens."""
    kl = (full.exp() * (full - pol)).sum(-1).clamp_min(0)  # [n]
    nll = full.gather(-1, y[:, None]) - pol.gather(-1, y[:, None])  # [n, 1]
    top1 = full.argmax(-1) == pol.argmax(-1)  # [n]
    return TurnResult(turn, start, len(y), float(kl.sum()), float(nll.sum()), int(top1.sum()), held)


def session_for(
    model, tokenizer, spec: Spec, budget: int | None, seed: int, profile: str | None = None, renderer=None
) -> Session:
    """A fresh session for one replay (budget None: the full cache; profile: a memory profile file; renderer: the
    kvstore.session.render.ChatRenderer it renders with, the tokenizer's plain one by default: a replayed trace's
    carries the tools its template renders, benchmarks.replay_trace)."""
    config = SessionConfig(
        policy=spec.policy,
        budget=budget,
        seed=seed,
        cache_options=dict(spec.options),
        protect=spec.protect,
        profile=profile,
        protocol=spec.protocol,
    )
    session = Session(model, tokenizer, config)
    if renderer is not None:
        session.renderer = renderer
    return session
