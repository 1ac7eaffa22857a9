"""The real model shapes a random-weight Qwen3 of the GPU, decode and overhead benchmarks can take, written out
without torch so that `nexus-agent bench gpu --help` lists them without importing it."""

from __future__ import annotations

# Qwen3-8B (config.json of Qwen/Qwen3-8B), written out so nothing is downloaded
QWEN3_8B = dict(
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
# Qwen3-32B (config.json of Qwen/Qwen3-32B; DeepSWE-Preview, the product's model, is a fine-tune of it)
QWEN3_32B = QWEN3_8B | dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64, num_attention_heads=64)
SHAPES = {"qwen3-8b": QWEN3_8B, "qwen3-32b": QWEN3_32B}  # the real shapes a random-weight model can take
# a tiny Qwen3 for --quick (CPU, seconds)
QWEN3_TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
