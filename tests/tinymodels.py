"""Tiny random-weight models of the supported architectures (kvstore.models.tiny) over a 128-token vocabulary."""

from __future__ import annotations

import torch

from kvstore.models.tiny import tiny_model as _tiny_model

VOCAB = 128


def tiny_model(arch: str = "qwen3", impl: str = "sdpa", layers: int = 2, seed: int = 0, **overrides):
    return _tiny_model(arch, impl, seed=seed, layers=layers, vocab_size=VOCAB, **overrides)


def random_ids(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, n), generator=g)
