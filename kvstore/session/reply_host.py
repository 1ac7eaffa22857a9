"""What a reply drives in its session: the contract between `kvstore.session.reply.ReplyInProgress` and
`kvstore.session.session.Session`, which runs replies (`generate`) and so is known to them only through this."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from kvstore.session.config import SessionConfig
from kvstore.session.render import ChatRenderer
from kvstore.session.turn_stats import OpenTurn, TurnStats


class ReplyHost(Protocol):
    """The session's state a reply reads and writes, and the steps of a turn it calls (Session's, in order:
    begin_reply, open_turn, forward_chunk / pending_prompt, check_protected, close_turn, end_reply)."""

    model: torch.nn.Module
    cache: Any  # the session's cache (kvstore.cache.evicting.EvictingCache, or a transformers Cache)
    config: SessionConfig
    renderer: ChatRenderer
    generator: torch.Generator  # the session's draws (a reply's default)
    tokens: list[int]  # the whole conversation, token-exact
    prefilled: int  # how many of `tokens` the cache has seen
    logits: torch.Tensor | None  # [V] after the last token the cache has seen
    eos_ids: set[int]

    @property
    def device(self) -> torch.device: ...

    def begin_reply(self, max_new_tokens: int, temperature: float, top_p: float) -> int: ...

    def open_turn(self) -> OpenTurn: ...

    def forward_chunk(self, size: int) -> None: ...

    def pending_prompt(self) -> tuple[int, int] | None: ...

    def check_protected(self) -> None: ...

    def now(self) -> float: ...

    def close_turn(self, turn: OpenTurn, generated: int, prefilled_at: float) -> TurnStats: ...

    def end_reply(self, ids: list[int], finish_reason: str | None) -> str: ...

    def restart_cache(self) -> None: ...
