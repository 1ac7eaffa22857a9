"""Batched decoding over ragged, evicting caches gives each session exactly what it gets alone (greedy, fp32).

Batched kernels round differently from solo ones (keys agree to ~1e-6), so greedy tokens and every eviction
decision match; a sampled reply draws the same tokens unless a draw lands within rounding of a CDF boundary."""

from __future__ import annotations

import pytest
import torch
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore.session.batch import batched_decode
from kvstore.session.reply import ReplyInProgress
from kvstore.session.session import Session, SessionConfig

LENGTHS = (40, 130, 260, 420)  # prompts of different lengths: the caches are ragged from the start
CONFIG = SessionConfig(model="tiny", policy="nexus", budget=96, chunk_size=64, cache_options={"block": 16})


def opening(n: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words(n, f"t{n}x")}]


def solo(config: SessionConfig, n: int, new_tokens: int, temperature: float) -> Session:
    session = Session(tiny_chat_model(), qwen_tokenizer(), config)
    session.append(opening(n))
    session.generate(new_tokens, temperature=temperature)
    return session


def batched(config: SessionConfig, new_tokens: int, temperature: float) -> list[Session]:
    sessions = [Session(tiny_chat_model(), qwen_tokenizer(), config) for _ in LENGTHS]
    replies = []
    for s, n in zip(sessions, LENGTHS, strict=True):
        s.append(opening(n))
        replies.append(ReplyInProgress(s, new_tokens, temperature=temperature))
        replies[-1].prefill()
    sizes = []
    while rows := [r for r in replies if r.next_input is not None]:
        logits = batched_decode(tiny_chat_model(), [r.session.cache for r in rows], [r.next_input for r in rows])
        sizes.append(len(rows))
        for r, row in zip(rows, logits, strict=True):
            r.advance(row)
    for r in replies:
        r.finish()
    assert max(sizes) == len(LENGTHS)
    return sessions


@pytest.mark.parametrize("policy", ["nexus", "h2o", "snapkv", "nexus-agent"])
def test_batched_decode_matches_each_session_alone(policy: str, temperature: float = 0.0) -> None:
    torch.set_num_threads(1)
    config = SessionConfig(**(CONFIG.to_dict() | {"policy": policy}))
    together = batched(config, 60, temperature)
    for n, got in zip(LENGTHS, together, strict=True):
        alone = solo(config, n, 60, temperature)
        assert got.tokens == alone.tokens  # same reply tokens, token for token
        assert len(set(got.tokens[-60:])) > 10  # a real reply, not one repeated token
        a, b = alone.cache.stats(), got.cache.stats()
        assert a["tokens_evicted"] == b["tokens_evicted"] > 0  # eviction happened, identically
        for la, lb in zip(alone.cache.layers, got.cache.layers, strict=True):
            assert torch.equal(la.positions, lb.positions)  # the same tokens survived
            torch.testing.assert_close(la.keys, lb.keys, rtol=0, atol=1e-5)
        assert [t.evicted_tokens for t in alone.turns] == [t.evicted_tokens for t in got.turns]


def test_stepwise_reply_is_session_generate() -> None:
    """Driven alone, ReplyInProgress leaves the session exactly as Session.generate does (stop strings included)."""
    torch.set_num_threads(1)
    ref = solo(CONFIG, 200, 40, 1.0)
    stop = ref.renderer.decode(ref.tokens[-30:-27])  # a stop string the reply is known to produce
    a = Session(tiny_chat_model(), qwen_tokenizer(), CONFIG)
    a.append(opening(200))
    ra = a.generate(40, temperature=1.0, stop=[stop])
    b = Session(tiny_chat_model(), qwen_tokenizer(), CONFIG)
    b.append(opening(200))
    step = ReplyInProgress(b, 40, temperature=1.0, stop=[stop])
    step.prefill()
    while step.next_input is not None:
        step.step_alone()
    rb = step.finish()
    assert ra.finish_reason == rb.finish_reason == "stop"
    assert (ra.text, ra.token_ids) == (rb.text, rb.token_ids) and a.tokens == b.tokens
    assert a.messages == b.messages
    keys = ("prefill_tokens", "generated_tokens", "evicted_tokens", "held_tokens", "held_bytes", "history_tokens")
    assert [ra.stats.to_dict()[k] for k in keys] == [rb.stats.to_dict()[k] for k in keys]
