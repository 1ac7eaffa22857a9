"""A local transformers model over a persistent kvstore Session: each turn prefills only the new messages.

The reply is kept verbatim (raw generated tokens) in the session's history and cache; the session's protocol
(true-eviction or re-prefill) and policy decide what the cache holds. Per-turn cache statistics come back with
every reply. Constrained (`constrain`; on by default for the offline default model only), each reply follows the
call grammar of agent.call_grammar, so it always parses (docs/constrained.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.call_grammar import call_constraint, constrained_by_default
from agent.errors import LimitsExceeded
from agent.protocols import Message, ModelReply, Sampling
from kvstore.defaults import describe_memory
from kvstore.session.reply import ReplyInProgress
from kvstore.session.session import Session, SessionConfig


class LocalModel:
    """The ModelBackend over a kvstore Session."""

    def __init__(
        self,
        session: Session,
        on_token: Callable[[str], None] | None = None,
        name: str = "",
        constrain: bool | None = None,
    ) -> None:
        self.session = session
        self.on_token = on_token  # called with each piece of decoded text (live views)
        # replies follow the call grammar; None: only for the offline default model (agent.call_grammar)
        self.constrain = constrained_by_default(session.config.model) if constrain is None else constrain
        self._grammars: dict[int, Any] = {}  # max_new_tokens -> the compiled call grammar for replies that long
        c = session.config
        self.name = name or f"{c.model} ({describe_memory(c.policy, c.budget, c.protocol, c.protect, c.profile)})"

    @classmethod
    def open(
        cls, config: SessionConfig, on_token: Callable[[str], None] | None = None, constrain: bool | None = None
    ) -> LocalModel:
        """Load the model named in `config` (kvstore's registry, a local directory or a hub id) into a new session."""
        return cls(Session.open(config), on_token=on_token, constrain=constrain)

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        self._check_room(new_messages)
        self.session.append(new_messages)
        constraint = self._constraint(sampling.max_new_tokens)
        r = ReplyInProgress(
            self.session,
            sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            stop=sampling.stop if constraint is None else (),  # constrained, the grammar's end ends the reply
            on_token=self.on_token,
            constraint=constraint,
        ).run()
        stats = r.stats.to_dict()
        if self.session.profile_status is not None:  # a memory profile: did it match this session's opening?
            stats["memory_profile"] = self.session.profile_status
        return ModelReply(r.text, stats, self.session.num_tokens, r.finish_reason)

    def _constraint(self, max_new_tokens: int):
        """A fresh call grammar for a reply of at most `max_new_tokens` tokens, or None when unconstrained."""
        if not self.constrain:
            return None
        if max_new_tokens not in self._grammars:
            self._grammars[max_new_tokens] = call_constraint(self.session.tokenizer, max_new_tokens)
        return self._grammars[max_new_tokens].fresh()

    def _check_room(self, new_messages: list[Message]) -> None:
        """End the episode with token_limit when the model's positions cannot hold the messages and one reply token."""
        s = self.session
        renderer = s.renderer
        ids = renderer.encode_messages(new_messages, first=not s.tokens) if new_messages else []
        need = s.num_tokens + len(ids) + len(renderer.generation_prompt_ids) + len(renderer.end_of_turn_ids) + 1
        if need > s.max_positions:
            raise LimitsExceeded("token_limit", f"the next turn needs {need} of the {s.max_positions} positions")
