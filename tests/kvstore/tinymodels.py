"""Tiny random-weight models of the supported architectures (built in ~0.1 s, fp32, deterministic weights)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

VOCAB = 128
ARCHS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}


def tiny_model(arch: str = "qwen3", impl: str = "sdpa", layers: int = 2, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    kwargs = dict(
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=8192,
    )
    if arch != "qwen2":
        kwargs["head_dim"] = 16
    kwargs.update(overrides)
    model = AutoModelForCausalLM.from_config(ARCHS[arch](**kwargs), attn_implementation=impl, dtype=torch.float32)
    return model.eval()


def random_ids(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, n), generator=g)
