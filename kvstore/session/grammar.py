"""Constrained decoding: a grammar turned into the allowed next tokens of a reply, advanced with each chosen token.

A `Constraint` wraps an llguidance matcher over one tokenizer's vocabulary. `ReplyInProgress(...,
constraint=c)` (kvstore.session.reply) applies it at every step, alone or in a batched decode step: the tokens the
grammar does not allow get -inf logits before the token is chosen (greedy or sampled), the chosen token advances the
matcher, and the reply ends with finish_reason "stop" once the grammar is complete (nothing but the end of the text
may follow). Where the grammar forces text (a fixed tag, the rest of a name), only the first token of its canonical
tokenization is allowed (llguidance's fast-forward tokens), so the fixed parts of a format cost few tokens. The tokens
chosen are the session's tokens as without a constraint: the cache holds them.

The API (the server's tool_choice and response_format use it; the local agent's call format is agent.call_grammar):

- `Constraint.lark(text, tokenizer)`: a Lark grammar in llguidance's dialect (rule attributes such as
  `[stop="...", max_tokens=N]`, `%json {...}` for an inline JSON schema).
- `Constraint.json_schema(schema, tokenizer)`: a JSON schema (a dict or its JSON text); `Constraint.json_object(
  tokenizer)`: any JSON object (response_format json_object).
- `Constraint.regex(pattern, tokenizer)`: a regular expression (Rust `regex` syntax) the whole reply matches.
- `constraint.fresh()`: a new Constraint at the grammar's start, sharing the compiled grammar (one per reply: a
  Constraint holds the state of the reply it constrains).
- `constraint.mask(logits, end_ids)` -> the logits [V] with disallowed tokens at -inf; `constraint.advance(token)`
  -> True once the grammar is complete; `constraint.done`, `constraint.accepting`, `constraint.text_so_far`.

A grammar that does not compile raises `GrammarError` (a KVStoreError: one line for the CLI, an HTTP 400 for the
server). The tokenizer must be a fast (Rust `tokenizers`) Hugging Face tokenizer; its llguidance form is built once per
tokenizer object (about a second for a 150k vocabulary).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import llguidance
import llguidance.hf
import numpy as np
import torch
from llguidance import LLMatcher

from kvstore.errors import KVStoreError


class GrammarError(KVStoreError):
    """A grammar, JSON schema or regex that does not compile, or a token it does not allow."""


_TOKENIZERS: dict[int, tuple[Any, Any]] = {}  # id(HF tokenizer) -> (that tokenizer, its llguidance LLTokenizer)


def ll_tokenizer(tokenizer: Any) -> Any:
    """The llguidance form of a Hugging Face fast tokenizer, built once per tokenizer object."""
    entry = _TOKENIZERS.get(id(tokenizer))
    if entry is None or entry[0] is not tokenizer:
        try:
            entry = (tokenizer, llguidance.hf.from_tokenizer(tokenizer))
        except ValueError as exc:
            raise GrammarError(f"constrained decoding needs a fast Hugging Face tokenizer: {exc}") from None
        _TOKENIZERS[id(tokenizer)] = entry  # the entry keeps the tokenizer alive, so its id stays its own
    return entry[1]


class Constraint:
    """A grammar over a tokenizer's vocabulary and the state of one reply in it (see the module docstring)."""

    def __init__(self, grammar: str, tokenizer: Any, *, what: str = "grammar") -> None:
        """`grammar`: an llguidance grammar (llguidance.grammar_from(...)); `what` names it in errors."""

        self.tokenizer, self.what = tokenizer, what
        self._ll = ll_tokenizer(tokenizer)
        self._matcher = llguidance.LLMatcher(self._ll, grammar, log_level=0)
        if self._matcher.is_error():
            raise GrammarError(f"the {what} does not compile: {_first_line(self._matcher.get_error())}")
        self._start = self._matcher.deep_copy()  # the compiled grammar at its start, for fresh()
        self.tokens: list[int] = []  # the tokens consumed so far

    @classmethod
    def lark(cls, text: str, tokenizer: Any) -> Constraint:
        """A Lark grammar (llguidance's dialect: docs/constrained.md)."""

        return cls(LLMatcher.grammar_from_lark(text), tokenizer, what="Lark grammar")

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str, tokenizer: Any) -> Constraint:
        """Text that parses as JSON and validates against `schema` (a dict, or its JSON text)."""

        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise GrammarError(f"the JSON schema is not valid JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON schema is a JSON object, got {type(schema).__name__}")
        try:
            grammar = LLMatcher.grammar_from_json_schema(schema)
        except ValueError as exc:
            raise GrammarError(f"the JSON schema does not compile: {_first_line(str(exc))}") from None
        return cls(grammar, tokenizer, what="JSON schema")

    @classmethod
    def json_object(cls, tokenizer: Any) -> Constraint:
        """Any JSON object."""
        return cls.json_schema({"type": "object"}, tokenizer)

    @classmethod
    def regex(cls, pattern: str, tokenizer: Any) -> Constraint:
        """Text that matches `pattern` as a whole (Rust `regex` syntax)."""

        return cls(LLMatcher.grammar_from_regex(pattern), tokenizer, what="regex")

    def fresh(self) -> Constraint:
        """A new Constraint at the grammar's start, sharing the compiled grammar (cheap: one per reply)."""
        new = object.__new__(Constraint)
        new.tokenizer, new.what, new._ll = self.tokenizer, self.what, self._ll
        new._start, new._matcher, new.tokens = self._start, self._start.deep_copy(), []
        return new

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing but the end of the text may follow."""
        return self._matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        """The text so far is a complete sentence of the grammar (it may end here, or go on)."""
        return self._matcher.is_accepting()

    @property
    def text_so_far(self) -> str:
        return self.tokenizer.decode(self.tokens)

    def allowed(self, vocab: int, end_ids: Collection[int] = ()) -> torch.Tensor:
        """Which of `vocab` token ids may come next: bool [vocab] (CPU). Forced text allows only its canonical
        first token; the end of the text (any of `end_ids`, e.g. a session's EOS ids) once the grammar accepts."""
        n = min(vocab, self._ll.vocab_size)
        allowed = torch.zeros(vocab, dtype=torch.bool)
        forced = self._matcher.compute_ff_tokens()
        if forced:
            allowed[forced[0]] = True
            return allowed
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed[:n] = torch.from_numpy(bits[:n].view(np.bool_))  # one bit per token id, lowest bit first
        if self._matcher.is_accepting():
            allowed[[t for t in end_ids if t < vocab]] = True
        if not allowed.any():
            raise GrammarError(f"the {self.what} allows no next token after {self.text_so_far!r}")
        return allowed

    def mask(self, logits: torch.Tensor, end_ids: Collection[int] = ()) -> torch.Tensor:
        """`logits` [V] with every token the grammar does not allow next at -inf (a new tensor)."""
        allowed = self.allowed(logits.shape[-1], end_ids).to(logits.device)
        return logits.masked_fill(~allowed, float("-inf"))

    def advance(self, token: int) -> bool:
        """Consume the chosen token; True once the grammar is complete. A token it does not allow raises."""
        if not self._matcher.consume_token(token):
            raise GrammarError(
                f"token {token} ({self.tokenizer.decode([token])!r}) is not allowed by the {self.what} after "
                f"{self.text_so_far!r}: {_first_line(self._matcher.get_error())}"
            )
        self.tokens.append(token)
        return self._matcher.is_stopped()


def _first_line(message: str) -> str:
    """An llguidance error in one line: its first line and its `error:` line (a state dump or a caret drawing of
    the bad spot follows them)."""
    lines = [line.strip() for line in message.strip().splitlines()] or ["unknown error"]
    detail = next((line for line in lines[1:] if line.startswith("error:")), "")
    return f"{lines[0].removesuffix(':')} ({detail.removeprefix('error:').strip()})" if detail else lines[0]
