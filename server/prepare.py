"""A request's new messages rendered and tokenized on the request's side (a worker thread), not on the scheduler.

The scheduler thread runs the model for every session; tokenizing a long prompt there would stall all of them. So
the request side first refuses a prompt that cannot fit the model by its length in characters (no tokenizer), then
renders and tokenizes the messages as the session's `append` will (kvstore.session.session: the protected opening
apart, then the rest), and the scheduler appends them with those ids (`Prepared.encoder`) instead of encoding
again. The ids are only used for the exact (messages, first) the session asks for, so the cache's tokens are the
ones a fresh rendering gives; anything else (a session whose state changed meanwhile) is rendered as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from server.config import ServeError

CHARS_PER_TOKEN = 32  # generous: more characters than this per position of the model cannot fit, untokenized


@dataclass
class Part:
    """One `encode_with_replies` call of the session's append, answered in advance."""

    messages: list[dict]
    first: bool  # nothing was rendered in the session before
    ids: list[int]
    replies: list[tuple[int, int]]


@dataclass
class Prepared:
    """The ids of a request's new messages, as the session will append them."""

    first: bool  # prepared for a session that has rendered nothing yet
    parts: list[Part] = field(default_factory=list)
    prompt_tokens: int = 0  # their tokens plus the generation prompt (what admission sizes the turn by)

    def ids_for(self, messages: list[dict], first: bool) -> tuple[list[int], list[tuple[int, int]]] | None:
        for part in self.parts:
            if part.first == first and part.messages == list(messages):
                return list(part.ids), list(part.replies)
        return None

    def encoder(self, renderer) -> Callable[[list[dict], bool], tuple[list[int], list[tuple[int, int]]]]:
        """The `encode` of Session.append: these messages answered with the prepared ids, anything else rendered
        by `renderer` (the session's ChatRenderer)."""

        def prepared_or_encoded(messages: list[dict], first: bool) -> tuple[list[int], list[tuple[int, int]]]:
            return self.ids_for(messages, first) or renderer.encode_with_replies(messages, first)

        return prepared_or_encoded


def check_length(messages: list[dict], max_positions: int) -> None:
    """ServeError 400 when the messages hold more characters than the model's positions could ever take."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    if chars > max_positions * CHARS_PER_TOKEN:
        raise ServeError(
            f"the messages hold {chars} characters, more than the model's {max_positions} positions can take (at "
            f"most {CHARS_PER_TOKEN} characters a token); send a shorter conversation"
        )


def prepare(reference, messages: list[dict], first: bool) -> Prepared:
    """Render and tokenize `messages` as `reference`'s kind of session appends them (`first`: to a session that
    has rendered nothing yet); `reference` is a Session that never runs (its renderer and protect setting)."""
    check_length(messages, reference.max_positions)
    renderer, out = reference.renderer, Prepared(first)
    cut = reference._protected_count(messages) if first else 0
    for part in (messages[:cut], messages[cut:]):
        if part:
            ids, replies = renderer.encode_with_replies(part, first)
            out.parts.append(Part(list(part), first, ids, replies))
            first = False
    out.prompt_tokens = sum(len(p.ids) for p in out.parts) + len(renderer.generation_prompt_ids)
    if out.prompt_tokens > reference.max_positions:
        raise ServeError(
            f"the new messages are {out.prompt_tokens} tokens, past the model's maximum of "
            f"{reference.max_positions} positions; send a shorter conversation"
        )
    return out
