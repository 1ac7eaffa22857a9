"""A reply generated one token at a time, the one implementation of a turn that decodes: `Session.generate` runs it
to its end (`run()`), an outside driver (e.g. a server batching many sessions) step by step.

Its steps: `prefill()` runs the pending tokens and picks the first token (or `begin_prefill()`, then
`prefill_chunk()` until it returns True: one chunk at a time, for a driver that interleaves a newcomer's prefill with
other sessions' decode steps); while `next_input` is not None the driver runs that token through the model (alone
with `step_alone()`, or in a batch with kvstore.session.batch.batched_decode) and hands the logits to `advance()`;
`finish()`
closes the turn, or `abort()` gives it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

import kvstore
from kvstore.errors import KVStoreError
from kvstore.session.reply_host import ReplyHost
from kvstore.session.sampling import LogitAdjust, TextStream, next_token, token_logprobs
from kvstore.session.turn_stats import OpenTurn, Reply

if TYPE_CHECKING:
    from kvstore.session.grammar import Constraint


class ReplyInProgress:
    """One turn of `session` (a kvstore Session, through kvstore.session.reply_host.ReplyHost) being generated; see
    the module docstring for the order of calls."""

    def __init__(
        self,
        session: ReplyHost,
        max_new_tokens: int = 1024,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        on_token: Callable[[str], None] | None = None,
        generator: torch.Generator | None = None,
        adjust: LogitAdjust | None = None,
        top_logprobs: int | None = None,
        constraint: Constraint | None = None,
    ) -> None:
        """generator: the draws of this reply (default: the session's); adjust: penalties and logit bias;
        top_logprobs: record each chosen token's log-probability and this many alternatives in `logprobs`
        (None: record nothing); constraint: a grammar the reply follows (kvstore.session.grammar: a fresh one per
        reply), which ends it ("stop") once complete."""
        s = self.session = session
        self.limit = s.begin_reply(max_new_tokens, temperature, top_p)
        self.temperature, self.top_p = temperature, top_p
        self.generator = generator if generator is not None else s.generator
        self.adjust, self.top_logprobs = adjust or None, top_logprobs
        self.constraint = constraint
        self.logprobs: list[tuple[int, float, list[tuple[int, float]]]] = []  # (token, logprob, top alternatives)
        self.stream = TextStream(s.renderer.decode, stop, on_token)
        self.prompt_tokens = len(s.tokens)  # the conversation the reply continues (generation prompt included)
        self.finish_reason: str | None = None
        self.next_input: int | None = None  # the chosen token the model has not seen yet (None once finished)
        self.prefill_tokens = 0
        self.prefill_done = False
        self.chunk = session.config.chunk_size
        self._turn: OpenTurn | None = None
        self._prefilled_at = 0.0

    def run(self) -> Reply:
        """The whole reply: prefill, then decode alone to the end (`Session.generate`). Interrupted or failed (Ctrl-C
        in a chat), it is given up (`abort`), so the history stays a conversation."""
        try:
            self.prefill()
            while self.next_input is not None:
                self.step_alone()
        except BaseException:
            self.abort()
            raise
        return self.finish()

    def prefill(self) -> None:
        """Run the pending tokens (the whole history under re-prefill) and choose the first reply token."""
        self.begin_prefill()
        while not self.prefill_chunk():
            pass

    def begin_prefill(self) -> None:
        """Start the turn's prefill; then `prefill_chunk()` until it returns True (a driver may run other sessions'
        decode steps between chunks: the chunks and their evictions are those of `kvstore.prefill`)."""
        s = self.session
        self._turn = s.open_turn()
        self.prefill_tokens = self._turn.pending
        if self.prefill_tokens and hasattr(s.cache, "resolve_budget"):  # a density budget is fixed by the prompt
            s.cache.resolve_budget(s.cache.get_seq_length() + self.prefill_tokens)

    @property
    def prefill_left(self) -> int:
        """Tokens of this turn's prefill not run through the model yet (0 once it is over)."""
        return 0 if self.prefill_done else len(self.session.tokens) - self.session.prefilled

    def prefill_chunk(self) -> bool:
        """Run the next chunk of the pending tokens; True once all have run and the first reply token is chosen.
        The generation prompt's tokens run one at a time (kvstore.cache.forwarding.chunk_end), all in the call that ran
        the message's last chunk, so that a driver's loop counts chunks of the message only."""
        s = self.session
        with self._guard():
            if s.prefilled < len(s.tokens):
                s.forward_chunk(self.chunk)
            while (prompt := s.pending_prompt()) is not None and prompt[0] <= 0:
                s.forward_chunk(self.chunk)
            if s.prefilled < len(s.tokens):
                return False
            s.check_protected()  # a density budget is fixed by the first prefill
        self._prefilled_at = s.now()
        self.prefill_done = True
        self._choose(s.logits)
        return True

    def step_alone(self) -> None:
        """Run `next_input` through the model for this session only, then choose the next token."""
        s = self.session
        with self._guard():
            logits = kvstore.forward(s.model, s.cache, torch.tensor([[self.next_input]], device=s.device))[0, -1]
        self.advance(logits)

    def advance(self, logits: torch.Tensor) -> None:
        """The model has seen `next_input` (its next-token logits [V] given): choose the next token."""
        self.session.prefilled += 1
        self._choose(logits)

    def _choose(self, logits: torch.Tensor) -> None:
        """Pick a token, append it, decide whether the reply is over."""
        s, stream = self.session, self.stream
        if self.adjust is not None:
            logits = self.adjust.apply(logits, stream.ids)
        if self.constraint is not None:
            logits = self.constraint.mask(logits, s.eos_ids)
        token = next_token(logits, self.temperature, self.top_p, self.generator)
        if self.top_logprobs is not None:
            self.logprobs.append((token, *token_logprobs(logits, self.temperature, token, self.top_logprobs)))
        s.tokens.append(token)
        self.next_input = None
        if token in s.eos_ids:
            stream.ids.append(token)
            self.finish_reason = "eos"
        elif stream.push(token) or (self.constraint is not None and self.constraint.advance(token)):
            self.finish_reason = "stop"
        elif len(stream.ids) >= self.limit:
            self.finish_reason = "length"
        else:
            self.next_input = token
            return
        stream.flush()

    def finish(self) -> Reply:
        """Close the turn (end-of-turn tokens, the assistant message, the turn's statistics); the reply."""
        if self.finish_reason is None:
            raise KVStoreError("the reply is not finished (next_input is still pending)")
        stats = self.session.close_turn(self._turn, len(self.stream.ids), self._prefilled_at)
        text = self._close()
        return Reply(text=text, token_ids=list(self.stream.ids), finish_reason=self.finish_reason, stats=stats)

    def abort(self) -> None:
        """Give up mid-reply (a failed forward, a client gone): reset the cache, keep the history a conversation."""
        self.session.restart_cache()
        self.finish_reason = self.finish_reason or "abort"
        self.next_input = None
        self._close()

    def _close(self) -> str:
        return self.session.end_reply(list(self.stream.ids), self.finish_reason)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """A forward cut short may leave some layers ahead of others: start the cache over from the token history."""
        try:
            yield
        except BaseException:
            self.session.restart_cache()
            raise
