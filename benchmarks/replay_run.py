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
from kvstore.chat import ChatRenderer


@dataclass(frozen=True)
class Spec:
    """One memory configuration to replay: a policy with options, and what of the opening it protects."""

    policy: str  # registered policy name
    options: tuple[tuple[str, object], ...] = ()  # CacheConfig options (block, window, selector, ...)
    protect: str = "none"  # SessionConfig.protect
    label: str = ""  # the name in tables (the spec string)

    @property
    def name(self) -> str:
        return self.label or self.policy


@dataclass
class Plan:
    """The part of a conversation that is replayed."""

    opening: list[dict]  # system + first user message (prefilled first)
    rest: list[dict]  # the following messages, ending with an assistant message
    tokens: int  # tokens of opening + rest


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


def plan(conversation: list[dict], renderer: ChatRenderer, max_tokens: int) -> Plan | None:
    """Opening + as many following messages as fit in `max_tokens`, cut after the last assistant message that
    fits; None when not even the opening and one reply fit."""
    first_user = next((i for i, m in enumerate(conversation) if m["role"] == "user"), None)
    if first_user is None:
        return None
    opening = conversation[: first_user + 1]
    total = len(renderer.encode_messages(opening, first=True))
    rest, kept, kept_tokens = [], [], total
    for m in conversation[first_user + 1 :]:
        n = len(renderer.encode_messages([m], first=False))
        if total + n > max_tokens:
            break
        total += n
        rest.append(m)
        if m["role"] == "assistant":
            kept, kept_tokens = list(rest), total
    if not kept:
        return None
    return Plan(opening, kept, kept_tokens)


def budget_tokens(budget: float | int, replayed: int) -> int:
    """A share of the replayed length (float <= 1) as tokens per layer, or a token count as given."""
    return math.ceil(budget * replayed) if isinstance(budget, float) else int(budget)


def scored_rows(session: Session, content: str, n: int) -> slice:
    """Rows of a teacher-forced assistant message that predict its content and end-of-turn token."""
    start = len(session.renderer.generation_prompt_ids)
    return slice(start, min(n, start + len(session.renderer.encode(content)) + 1))


def replay(session: Session, p: Plan, on_reply) -> None:
    """Drive `session` through the plan; `on_reply(turn, start, logits [n, V], ids [n], held)` per assistant
    message, with only its scored rows."""
    session.append(p.opening)
    session.prefill()
    turn = 0
    for m in p.rest:
        if m["role"] != "assistant":
            session.append([m])
            session.prefill()
            continue
        turn += 1
        start, held = session.num_tokens, _held(session)
        logits, ids = session.teacher_force([m])
        rows = scored_rows(session, m["content"], len(ids))
        on_reply(turn, start, logits[rows], torch.tensor(ids[rows], device=logits.device), held)


def reference(session: Session, p: Plan) -> Reference:
    """Replay on a full cache and keep its log-probabilities and targets."""
    ref = Reference()

    def keep(turn, start, logits, ids, held):
        ref.logp.append(torch.log_softmax(logits.float(), -1))
        ref.targets.append(ids)

    replay(session, p, keep)
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


def _held(session: Session) -> float:
    stats = session.cache.stats()
    return stats["tokens_held"] / max(1, len(stats["tokens_held_per_layer"]))


def session_for(model, tokenizer, spec: Spec, budget: int | None, seed: int) -> Session:
    """A fresh session for one replay (budget None: the full cache)."""
    config = SessionConfig(
        policy=spec.policy, budget=budget, seed=seed, cache_options=dict(spec.options), protect=spec.protect
    )
    return Session(model, tokenizer, config)
