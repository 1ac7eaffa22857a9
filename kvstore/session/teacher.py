"""Driving a Session through a recorded conversation, teacher-forced: what `bench replay` and the calibration of a
memory profile (kvstore.profiles.calibrate) share.

The opening (system prompt + first user message) is prefilled, every following non-assistant message is prefilled
on its own (the cache evicts as it goes) and every assistant message runs as one teacher-forced forward (its logits
for every token at once, no decoding)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from kvstore.session.render import ChatRenderer
from kvstore.steps import run_steps


@dataclass
class Plan:
    """The part of a conversation that is replayed."""

    opening: list[dict]  # system + first user message (prefilled first)
    opening_ids: list[int]  # its tokens, rendered as the session renders them
    rest: list[dict]  # the following messages, ending with an assistant message
    tokens: int  # tokens of opening + rest


def plan(conversation: list[dict], renderer: ChatRenderer, max_tokens: int) -> Plan | None:
    """Opening + as many following messages as fit in `max_tokens`, cut after the last assistant message that
    fits; None when not even the opening and one reply fit."""
    first_user = next((i for i, m in enumerate(conversation) if m["role"] == "user"), None)
    if first_user is None:
        return None
    opening = conversation[: first_user + 1]
    opening_ids = renderer.encode_messages(opening, first=True)
    total = len(opening_ids)
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
    return Plan(opening, list(opening_ids), kept, kept_tokens)


def scored_rows(session, content: str, n: int) -> slice:
    """Rows of a teacher-forced assistant message that predict its content and end-of-turn token."""
    start = len(session.renderer.generation_prompt_ids)
    return slice(start, min(n, start + len(session.renderer.encode_text(content)) + 1))


def replay(session, p: Plan, on_reply: Callable, before_reply: Callable[[int], None] | None = None) -> None:
    """Drive `session` through the plan; `on_reply(turn, start, logits [n, V], ids [n], held)` per assistant
    message, with only its scored rows; `before_reply(turn)` just before each assistant message runs."""
    run_steps(replay_steps(session, p, on_reply, before_reply))


def replay_steps(
    session, p: Plan, on_reply: Callable, before_reply: Callable[[int], None] | None = None
) -> Iterator[None]:
    """`replay`, yielding after each message and between the prefill chunks of every message, replies included, so
    that a caller can do other work in between (a server's scheduler waits at most one chunk's forward)."""
    session.append(p.opening)
    yield from session.prefill_steps()
    yield
    turn = 0
    for m in p.rest:
        if m["role"] != "assistant":
            session.append([m])
            yield from session.prefill_steps()
            yield
            continue
        turn += 1
        if before_reply is not None:
            before_reply(turn)
        start, held = session.num_tokens, _held(session)
        logits, ids = yield from session.teacher_force_steps([m])
        rows = scored_rows(session, m["content"], len(ids))
        on_reply(turn, start, logits[rows], torch.tensor(ids[rows], device=logits.device), held)
        yield


def _held(session) -> float:
    stats = session.cache.stats()
    return stats["tokens_held"] / max(1, len(stats["tokens_held_per_layer"]))
