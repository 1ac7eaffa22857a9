"""A persistent chat session over one evicting KV cache: append messages, generate replies, save and restore.

The session keeps the whole conversation as one token sequence (append-only, see kvstore.session.render) and a cache
that
has seen a prefix of it. Two protocols differ only in what the cache holds, never in the tokens:

- ``true-eviction``: one cache for the session's life; each turn prefills only the tokens it has not seen.
- ``re-prefill``: each turn starts an empty cache (same config and seed) and prefills the whole history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

import torch

import kvstore
from kvstore.cache.evicting import model_identity, open_cache
from kvstore.cache.forwarding import chunk_end, prefill_steps
from kvstore.errors import KVStoreError, SettingError
from kvstore.models.registry import load_model
from kvstore.profiles.names import name_positions
from kvstore.profiles.profile import best_match, load_profiles
from kvstore.profiles.tokens import TokenPrior
from kvstore.session.config import SessionConfig
from kvstore.session.persist import load_session, save_session
from kvstore.session.render import ChatRenderer
from kvstore.session.reply import ReplyInProgress
from kvstore.session.sampling import check_sampling
from kvstore.session.turn_stats import OpenTurn, Reply, TurnStats
from kvstore.steps import run_steps


class Session:
    """A conversation whose KV cache persists across turns (see the module docstring for the protocols)."""

    def __init__(self, model, tokenizer, config: SessionConfig):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.renderer = ChatRenderer(tokenizer, tool_fallback=config.tool_fallback)
        self.tokens: list[int] = []  # the whole conversation, token-exact
        self.prefilled = 0  # how many of `tokens` the cache has seen
        self.messages: list[dict] = []
        self.turns: list[TurnStats] = []
        self.cache = self.new_cache()
        self.generator = torch.Generator(device="cpu").manual_seed(config.seed)
        self.eos_ids = _eos_ids(model, tokenizer)
        self.max_positions = int(model.config.max_position_embeddings)
        self.logits: torch.Tensor | None = None  # [V] logits after the last token the cache has seen
        self._prompt: tuple[int, int] | None = None  # the generation prompt of the reply being generated (positions)
        self._all_logits: torch.Tensor | None = None  # [pending, V] logits of the last teacher-forced turn
        # the memory profile's verdict on this session's opening: None (no profile, or no opening yet), else
        # "matched N template tokens" or "opening does not carry the profile's template"
        self.profile_status: str | None = None

    @classmethod
    def open(cls, config: SessionConfig) -> Session:
        """A new session on the model `config.model`, loaded through the registry (kvstore.models.registry)."""

        model, tokenizer, _ = load_model(config.model, device=config.device, dtype=config.dtype)
        return cls(model, tokenizer, config)

    @property
    def num_tokens(self) -> int:
        """Tokens in the conversation (every position used, whatever the cache still holds)."""
        return len(self.tokens)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def has_profile(self) -> bool:
        """Whether a memory profile's weights apply to this session's opening (it matched one; kept when saved; a
        token prior, for an opening no profile matched, does not count)."""
        signals = getattr(self.cache, "signals", None)  # None: a cache that never evicts
        return signals is not None and signals.prior is not None and signals.prior_kind == "profile"

    def new_cache(self):
        """An empty cache with the session's cache config (SessionConfig.cache: policy, budget, seed and options)."""
        cache = open_cache(self.model, self.config.cache)
        old = getattr(self, "cache", None)
        if old is not None:  # re-prefill: the same spans, profile weights and replies (their queries are the agent's)
            cache.signals = old.signals.carried_over()
        return cache

    # --- conversation ---------------------------------------------------------------------------------------------
    def append(self, messages: list[dict[str, str]], encode: Callable | None = None) -> None:
        """Add messages (role system/user/assistant/tool); only they are rendered and tokenized, nothing is run.

        `encode(messages, first) -> (ids, replies)` tokenizes them: the renderer's `encode_with_replies` (default),
        or ids a caller made in advance off its model thread (the server: server.prepare)."""
        if not messages:
            return
        encode = encode or self.renderer.encode_with_replies
        opens = not any(m["role"] == "user" for m in self.messages) and any(m["role"] == "user" for m in messages)
        profiles = self._profiles_for_opening() if opens else None  # read (and checked) before anything changes
        cut = self._protected_count(messages)
        if cut:
            start = len(self.tokens)
            self._grow(encode(messages[:cut], not self.tokens)[0])
            self.cache.signals.protect(start, len(self.tokens))
            try:
                self.check_protected()
            except KVStoreError:
                del self.tokens[start:], self.cache.signals.protected[-1]
                raise
        if cut < len(messages):
            start = len(self.tokens)
            ids, replies = encode(messages[cut:], not self.tokens)
            self._grow(ids)
            for a, b in replies:  # replies of the agent given as history: their queries are the agent's
                self.cache.signals.add_reply(start + a, start + b)
        self.messages.extend(dict(m) for m in messages)
        if opens:
            self._read_opening(profiles)

    def _read_opening(self, profiles) -> None:
        """Once the opening (system prompt + first user message) is in: its template tokens get the best profile's
        weights (one profile file that does not match: its token prior), and the code names of the task's text are
        found (kvstore.profiles.names): in the text a matched profile leaves to the task, else in the whole first
        user message."""
        first_user = next(i for i, m in enumerate(self.messages) if m["role"] == "user")
        render = self.renderer.encode_messages
        opening = self.tokens[: len(render(self.messages[: first_user + 1], first=True))]
        signals = self.cache.signals
        if profiles is not None:
            prior, self.profile_status = best_match(profiles, opening)
            if prior is not None:
                signals.set_prior(prior)
            elif len(profiles) == 1 and not Path(self.config.profile).is_dir():  # one profile file: its token prior
                signals.set_prior(TokenPrior.of(profiles[0][1]).prior_for(opening), "tokens")
                self.profile_status += f"; token prior for its {len(opening)} opening tokens"
        if self.has_profile:
            task = signals.task_span  # None: the profile left no text to the task
        else:  # no profile says where the task's text lies: all of the first user message
            task = (len(render(self.messages[:first_user], first=True)) if first_user else 0, len(opening))
        if task is not None:
            signals.names = name_positions(self.tokenizer, opening, task)

    def _profiles_for_opening(self):
        """The memory profiles (kvstore.profiles.profile.load_profiles: a file, or a directory of them) for an opening
        that messages being appended complete before the cache has seen it, else None; a missing or corrupt file, or
        a profile file of another model, raises."""
        if self.config.profile is None or self.prefilled:
            return None

        return load_profiles(self.config.profile, model_identity(self.model), self.config.skip_unreadable_profiles)

    def check_protected(self) -> None:
        """Raise when the smallest layer budget cannot hold the protected spans beside the policy's forced set."""
        cache = self.cache
        if cache.budget_tokens is None or not cache.signals.protected:
            return
        policy, spans = cache.policy, cache.signals.protected
        protected = sum(end - start for start, end in spans)
        for i in range(len(cache.layers)):
            have = cache.layer_budget_tokens(i)
            sink = 0 if min(start for start, _ in spans) == 0 else policy.sink_tokens()  # a span may hold the sink
            need = protected + sink + policy.forced_max(have) - policy.sink_tokens()
            if need > have:
                raise SettingError(
                    "budget",
                    f"({have} tokens per layer) cannot hold the protected opening ({protected} tokens, protect="
                    f"{self.config.protect!r}) beside the sink, recent and tail tokens ({need} tokens needed); raise "
                    "it, or protect less (protect 'system' or 'none')",
                )

    def _protected_count(self, messages: list[dict]) -> int:
        """How many leading `messages` belong to the protected opening (SessionConfig.protect)."""
        mode, seen = self.config.protect, [m["role"] for m in self.messages]
        if mode == "none" or any(r not in ("system",) for r in seen):
            return 0
        count = 0
        for m in messages:
            if m["role"] == "system":
                count += 1
            elif m["role"] == "user" and mode == "system+task":
                return count + 1
            else:
                break
        return count

    def _grow(self, ids: Sequence[int]) -> None:
        if len(self.tokens) + len(ids) > self.max_positions:
            raise KVStoreError(
                f"the conversation would grow to {len(self.tokens) + len(ids)} tokens, past the model's maximum of "
                f"{self.max_positions} positions (the cache holding fewer does not add positions); start a new session"
            )
        self.tokens.extend(ids)

    def prefill(self) -> TurnStats:
        """Run the pending tokens through the model (the whole history under re-prefill); a turn without decoding."""
        return run_steps(self._turn_steps())

    def prefill_steps(self) -> Generator[None, None, TurnStats]:
        """`prefill`, yielding between its chunks (a server's scheduler runs other sessions meanwhile); returns the
        turn's statistics. Left unfinished, it starts the cache over from the token history, as a failed forward
        does."""
        return self._turn_steps()

    def teacher_force(self, messages: list[dict[str, str]]) -> tuple[torch.Tensor, list[int]]:
        """Append `messages` and run them through the cache (teacher forcing: no decoding, one turn).

        Returns (logits [n, V] float32, ids [n]): the n new tokens and, for each, the model's next-token logits just
        before it (row 0 from the cache as it was, row i after new token i - 1). Needs an earlier prefill.
        """
        return run_steps(self.teacher_force_steps(messages))

    def teacher_force_steps(
        self, messages: list[dict[str, str]]
    ) -> Generator[None, None, tuple[torch.Tensor, list[int]]]:
        """`teacher_force`, yielding between its prefill chunks (a served calibration: other sessions decode
        meanwhile); returns what it returns. Left unfinished, it starts the cache over, as `prefill_steps` does."""
        if self.logits is None or self.prefilled != len(self.tokens):
            raise KVStoreError("teacher_force needs a prefilled conversation (append and prefill the opening first)")
        start, before = len(self.tokens), self.logits
        self.append(messages)
        self.cache.reply_from = start  # the queries of a teacher-forced message are the agent's (NexusAgentPolicy)
        try:
            yield from self._turn_steps(all_logits=True)
        finally:
            self.cache.reply_from = None
            self.cache.signals.add_reply(start, len(self.tokens))
        n = len(self.tokens) - start
        after = self._all_logits[self._all_logits.shape[0] - n : -1]  # [n - 1, V] (re-prefill ran the whole history)
        return torch.cat([before[None].to(after.device), after]), self.tokens[start:]

    def begin_reply(self, max_new_tokens: int, temperature: float, top_p: float) -> int:
        """Check the sampling settings and the positions left, then append the generation prompt; the most tokens
        the reply may have. The first step of every reply (`generate`, and the server's stepwise replies)."""
        check_sampling(temperature, top_p)
        if max_new_tokens < 1:
            raise KVStoreError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        prompt, closing = self.renderer.generation_prompt_ids, self.renderer.end_of_turn_ids
        room = self.max_positions - len(self.tokens) - len(prompt) - len(closing)
        if room < 1:
            raise KVStoreError(
                f"no room left to generate: {len(self.tokens)} tokens of the model's {self.max_positions} positions "
                "are used; start a new session"
            )
        self.cache.reply_from = len(self.tokens)  # from the generation prompt on, queries are the reply's own
        self._grow(prompt)
        self._prompt = (self.cache.reply_from, len(self.tokens))
        return min(max_new_tokens, room)

    def generate(
        self,
        max_new_tokens: int = 1024,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        on_token: Callable[[str], None] | None = None,
    ) -> Reply:
        """Prefill what is pending plus the generation prompt, then decode a reply: a step-wise reply
        (kvstore.session.reply.ReplyInProgress) run to its end.

        The raw reply tokens stay in the history (and the cache) as generated; the template's end-of-turn tokens
        follow them, so the history stays a valid conversation. Decoding stops at an end-of-turn token, a stop
        string, `max_new_tokens`, or the model's last position.
        """
        reply = ReplyInProgress(
            self, max_new_tokens, temperature=temperature, top_p=top_p, stop=stop, on_token=on_token
        )
        return reply.run()

    def end_reply(self, ids: list[int], finish_reason: str | None) -> str:
        """Close the reply begun by `begin_reply` whose generated tokens are `ids`: its text (without the EOS),
        now in the history with the template's end-of-turn tokens. The queries the reply ran through the model
        (from its generation prompt to the last token the cache has seen) stay marked as the agent's."""
        text = self.renderer.decode(ids[:-1] if finish_reason == "eos" else ids)
        self.cache.flush_observations()  # the reply's last decoded tokens' statistics: the turn's state is complete
        if self.cache.reply_from is not None:
            self.cache.signals.add_reply(self.cache.reply_from, self.prefilled)
        self.cache.reply_from, self._prompt = None, None
        self.tokens.extend(self.renderer.end_of_reply(ids))
        self.messages.append({"role": "assistant", "content": text})
        return text

    # --- the model ------------------------------------------------------------------------------------------------
    def open_turn(self) -> OpenTurn:
        """Begin a turn (a new cache first under re-prefill); `close_turn` records it."""
        if self.config.protocol == "re-prefill":
            self.restart_cache()
        return OpenTurn(self.cache.stats(), self.now(), len(self.tokens) - self.prefilled)

    def close_turn(self, turn: OpenTurn, generated: int, prefilled_at: float) -> TurnStats:
        """Record and return the statistics of `turn`, whose prefill ended at `prefilled_at` (then `generated`
        tokens were decoded)."""
        prefill_s, decode_s = prefilled_at - turn.start, self.now() - prefilled_at
        stats = self._stats(turn.before, self.cache.stats(), turn.pending, generated, prefill_s, decode_s)
        self.turns.append(stats)
        return stats

    def restart_cache(self) -> None:
        """Start the cache over from the token history: a forward cut short (or a prefill left unfinished) may leave
        some layers ahead of others, and the cache ahead of the history's prefilled mark."""
        self.cache, self.prefilled = self.new_cache(), 0

    def forward_chunk(self, size: int) -> None:
        """Run the next chunk of the pending tokens (at most `size`; a reply's generation prompt one token at a time,
        kvstore.cache.forwarding.chunk_end) through the model and keep the logits after it."""
        end = self.prefilled + chunk_end(0, len(self.tokens) - self.prefilled, size, self.pending_prompt())
        ids = torch.tensor([self.tokens[self.prefilled : end]], device=self.device)  # [1, chunk]
        self.logits = kvstore.forward(self.model, self.cache, ids)[0, -1]  # [V]
        self.prefilled = end

    def _turn_steps(self, all_logits: bool = False) -> Generator[None, None, TurnStats]:
        """A turn without decoding (prefill, teacher forcing), yielding between the prefill's chunks.

        all_logits: keep the logits after every pending token in `self._all_logits` [pending, V]."""
        turn = self.open_turn()
        try:
            if turn.pending:
                ids = torch.tensor([self.tokens[self.prefilled :]], device=self.device)  # [1, pending]
                out = yield from prefill_steps(
                    self.model, self.cache, ids, self.config.chunk_size, all_logits, self.pending_prompt()
                )
                out = out[0]
                self._all_logits = out if all_logits else None  # [pending, V]
                self.logits = out[-1] if all_logits else out  # [V]
                self.prefilled = len(self.tokens)
                self.check_protected()  # a density budget is fixed by the first prefill
        except BaseException:
            self.restart_cache()
            raise
        return self.close_turn(turn, 0, self.now())

    def pending_prompt(self) -> tuple[int, int] | None:
        """[start, end) of the generation prompt of the reply begun by `begin_reply` among the pending tokens (the
        prefill runs it apart: kvstore.cache.forwarding.chunk_end), or None (no reply begun, or its prompt has run)."""
        if self._prompt is None or self._prompt[1] <= self.prefilled:
            return None
        return self._prompt[0] - self.prefilled, self._prompt[1] - self.prefilled

    def reply_tokens(self) -> int | None:
        """Tokens the reply begun by `begin_reply` has generated so far, once its prompt has run; None before that and
        after `end_reply` (a live view tells the model's writing from its reading by it)."""
        if self._prompt is None or self._prompt[1] > self.prefilled:
            return None
        return len(self.tokens) - self._prompt[1]

    def _stats(self, before: dict, after: dict, prefilled: int, generated: int, prefill_s: float, decode_s: float):
        n_layers = max(1, len(after["tokens_held_per_layer"]))
        evict_s = (after["score_s"] + after["select_s"]) - (before["score_s"] + before["select_s"])
        return TurnStats(
            prefill_tokens=prefilled,
            generated_tokens=generated,
            evicted_tokens=round((after["tokens_evicted"] - before["tokens_evicted"]) / n_layers),
            held_tokens=round(after["tokens_held"] / n_layers),
            held_bytes=int(after["bytes_held"]),
            prefill_s=prefill_s,
            decode_s=decode_s,
            evict_s=evict_s,
            tokens_per_s=generated / decode_s if generated and decode_s > 0 else 0.0,
            turn=len(self.turns) + 1,
            history_tokens=len(self.tokens),
        )

    def now(self) -> float:
        """The clock of turn statistics (after the GPU's queued work)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    # --- persistence ----------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the whole session to one file, atomically (see kvstore.session.persist)."""

        save_session(self, Path(path))

    @classmethod
    def load(cls, path: str | Path, model=None, tokenizer=None, config: SessionConfig | None = None) -> Session:
        """Restore a saved session; with `config`, refuse a file saved under another model or cache config."""

        return load_session(cls, Path(path), model=model, tokenizer=tokenizer, expect=config)


def _eos_ids(model, tokenizer) -> set[int]:
    """Token ids that end a reply: the generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    found = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        found.add(int(tokenizer.eos_token_id))
    return found
