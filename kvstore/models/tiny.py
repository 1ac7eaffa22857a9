"""Tiny random-weight models of the supported architectures, for tests, benchmarks and quick checks.

They build in ~0.1 s and have the real architecture's attention (RoPE, GQA, q-norm for Qwen3), so the cache and its
policies run on them exactly as on a real checkpoint; their text is noise.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

ARCHITECTURES = ("qwen3", "llama", "qwen2")


def tiny_config(
    arch: str = "qwen3",
    layers: int = 2,
    vocab_size: int = 128,
    hidden_size: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    max_positions: int = 8192,
    **overrides,
):
    """A transformers config of the given architecture and tiny shapes (`overrides`: any further config field)."""

    classes = {"qwen3": Qwen3Config, "llama": LlamaConfig, "qwen2": Qwen2Config}
    kwargs = dict(
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=2 * hidden_size,
        vocab_size=vocab_size,
        max_position_embeddings=max_positions,
    )
    if arch != "qwen2":  # qwen2 derives head_dim from hidden_size / heads
        kwargs["head_dim"] = head_dim
    return classes[arch](**(kwargs | overrides))


def tiny_model(
    arch: str = "qwen3",
    impl: str = "sdpa",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    **shapes,
) -> torch.nn.Module:
    """A random model (eval mode) with deterministic weights from `seed`; `shapes` go to `tiny_config`."""

    torch.manual_seed(seed)
    config = tiny_config(arch, **shapes)
    with torch.device(device or "cpu"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=impl, dtype=dtype)
    return model.eval()
