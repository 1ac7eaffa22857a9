"""Calibrating a memory profile (kvstore.profiles.profile): each recorded conversation is replayed teacher-forced on
the full cache (kvstore.session.teacher), and the attention every reply token's queries give each opening token is
summed per layer and kv head. The fixed opening text is what every conversation's opening shares (the longest
common token prefix and suffix); its weights are each conversation's, scaled to mean 1 per layer and head, averaged.

Each conversation's weights are those of all its replies and those of its first reply alone, each scaled to mean 1,
blended FIRST_SHARE to the first reply. The opening is ranked before any reply exists, and what it keeps serves
every reply: the first one reads the opening's tool-call format and instructions, later ones read them again from
the agent's own earlier replies, so summed over all replies those tokens drown (docs/memory.md, "The first reply's
share")."""

from __future__ import annotations

from collections.abc import Callable, Generator

import torch

from kvstore.attention.received import head_token_attention
from kvstore.cache.evicting import ARCHITECTURE_KEYS, model_identity
from kvstore.errors import KVStoreError
from kvstore.profiles.profile import MemoryProfile, common_template
from kvstore.session.render import ChatRenderer
from kvstore.session.session import Session, SessionConfig
from kvstore.session.teacher import Plan, plan, replay_steps
from kvstore.steps import run_steps

FIRST_SHARE = 0.5  # the first reply's share of a profile's weights (the rest: all the conversation's replies)


class _ReplyAttention:
    """A cache observer: between `start` and `stop` (one assistant message), adds the attention each held token
    receives from the new queries (averaged over each kv head's query heads) into `sums[layer]` [Hkv, positions];
    `first` is what `sums` held when the first assistant message ended (its attention alone)."""

    def __init__(self, layers: int, kv_heads: int, positions: int) -> None:
        self.sums = torch.zeros(layers, kv_heads, positions)
        self.first = self.sums
        self.active = False

    def start(self, turn: int) -> None:
        self.active = True

    def stop(self, turn: int, *_) -> None:
        self.active = False
        if turn == 1:
            self.first = self.sums.clone()

    def __call__(self, layer) -> None:
        if not self.active or layer.query is None:
            return
        att = head_token_attention(layer.score_context(with_prior=False), layer.query)  # [B, Hkv, T]
        for b in range(att.shape[0]):
            self.sums[layer.layer_idx].index_add_(1, layer.positions[b, 0].to("cpu"), att[b].to("cpu"))


def calibrate(model, tokenizer, conversations: list[list[dict]], *args, **kwargs) -> MemoryProfile:
    """A profile from recorded conversations (each a list of {role, content} messages; at least two sharing the text
    of their openings, or one and `variants`): `calibration_steps` (the same arguments) run to its end."""
    return run_steps(calibration_steps(model, tokenizer, conversations, *args, **kwargs))


def calibration_steps(
    model,
    tokenizer,
    conversations: list[list[dict]],
    max_tokens: int | None = None,
    on_progress: Callable[[int, int, bool], None] | None = None,
    meta: dict | None = None,
    plans: list[Plan | None] | None = None,
    variants: list[list[dict]] = (),
) -> Generator[None, None, MemoryProfile]:
    """Calibrate a profile, yielding after each message it replays (a server runs its sessions in between); returns
    the profile. Each conversation is replayed up to `max_tokens` (default: the model's positions); one without an
    opening and a reply inside that is left out. `on_progress(done, total, used)` after each. `plans`: the
    conversations' `calibration_plans`, when the caller made them already (a server sizes its room by them).
    `variants`: openings (system prompt and first user message) of the same agent on other tasks, never replayed:
    they only show which text of an opening is the task's, so that one conversation can make a profile (the
    template is the text every opening, these too, shares)."""
    limit = max_positions(model, max_tokens)
    identity = model_identity(model)
    openings, weights = [], []
    if plans is None:
        plans = calibration_plans(tokenizer, conversations, limit)
    for i, p in enumerate(plans):
        if p is not None:
            session = Session(model, tokenizer, SessionConfig(policy="full", budget=None, protect="none"))
            rec = _ReplyAttention(identity["num_layers"], identity["num_kv_heads"], p.tokens)
            session.cache.signals.observers.append(rec)
            yield from replay_steps(session, p, rec.stop, before_reply=rec.start)
            openings.append(p.opening_ids)
            weights.append((rec.sums[..., : len(p.opening_ids)], rec.first[..., : len(p.opening_ids)]))
        if on_progress is not None:
            on_progress(i + 1, len(conversations), p is not None)
    others = [ChatRenderer(tokenizer).encode_messages(v, first=True) for v in variants]
    if len(openings) + len(others) < 2 or not openings:
        need = "a conversation" if variants else "at least two conversations"
        raise KVStoreError(
            f"calibration needs {need} with an opening and a reply inside {limit} tokens; got {len(openings)}"
        )
    return _profile(openings, weights, identity, (meta or {}) | {"max_tokens": limit}, others)


def opening(messages: list[dict]) -> list[dict] | None:
    """The messages up to and with the first user message (None without one)."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    return None if first is None else messages[: first + 1]


def statement_variants(messages: list[dict], statement: str | None) -> list[list[dict]]:
    """The conversation's opening (system prompt and first user message) twice more, the task's statement in it
    replaced by other text each time: the `variants` a calibration from this one conversation needs to tell the
    task's text from the fixed text around it (two, so that no token of a replacement agrees with the statement's by
    chance). [] when the first user message does not hold the statement."""
    statement, first = (statement or "").strip(), opening(messages)
    if not statement or first is None or statement not in first[-1]["content"]:
        return []
    out = []
    for other in ("(the statement of another task)", "[one more task's text]"):
        variant = [dict(m) for m in first]
        variant[-1]["content"] = variant[-1]["content"].replace(statement, other, 1)
        out.append(variant)
    return out


def max_positions(model, max_tokens: int | None) -> int:
    """How far a calibration replays each conversation: `max_tokens`, at most the model's positions."""
    return min(max_tokens or 10**9, int(model.config.max_position_embeddings))


def calibration_plans(tokenizer, conversations: list[list[dict]], limit: int) -> list[Plan | None]:
    """What a calibration replays of each conversation (kvstore.session.teacher.plan; None: left out)."""
    renderer = ChatRenderer(tokenizer)
    return [plan(messages, renderer, limit) for messages in conversations]


def _profile(
    openings: list[list[int]],
    weights: list[tuple[torch.Tensor, torch.Tensor]],
    identity: dict,
    meta: dict,
    others: list[list[int]] = (),
) -> MemoryProfile:
    """The template the openings (and `others`) share, weighted by each conversation's weights there: those of all
    its replies and of its first reply (each [L, Hkv, opening]), each scaled to mean 1 and blended FIRST_SHARE to the
    first reply; averaged over the conversations."""
    a, b = common_template([*openings, *others])
    if a + b == 0:
        raise KVStoreError("the conversations' openings share no text (no common first or last token)")

    def on_template(opening: list[int], w: torch.Tensor) -> torch.Tensor:
        t = torch.cat([w[..., :a], w[..., len(opening) - b :]], -1).clamp_min(1e-12)
        return t / t.mean(-1, keepdim=True)

    pre, suf = [], []
    for opening, (every, first) in zip(openings, weights, strict=True):
        t = (1 - FIRST_SHARE) * on_template(opening, every) + FIRST_SHARE * on_template(opening, first)
        pre.append(t[..., :a])
        suf.append(t[..., a:])
    return MemoryProfile(
        prefix=list(openings[0][:a]),
        suffix=list(openings[0][len(openings[0]) - b :]),
        prefix_weight=torch.stack(pre).mean(0),
        suffix_weight=torch.stack(suf).mean(0),
        identity={k: identity[k] for k in ARCHITECTURE_KEYS},
        conversations=len(openings),
        meta=meta | {"first_share": FIRST_SHARE},
    )
