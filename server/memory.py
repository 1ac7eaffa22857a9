"""How many KV bytes a session holds now and may hold at the peak of its next turn (for admission)."""

from __future__ import annotations

import math


def cache_bytes(cache) -> int:
    """Bytes of keys and values an evicting cache holds (all layers)."""
    return sum(layer.nbytes() for layer in cache.layers)


def bytes_per_token(model) -> int:
    """Bytes of one token's keys and values over all layers (K and V, every kv head)."""
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    size = next(model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * size


def peak_tokens(cache, history: int, new: int, max_new: int, chunk_size: int) -> int:
    """Most tokens per layer the cache can hold during a turn that adds `new` tokens and generates `max_new`.

    A full cache holds everything; an evicting layer holds at most its budget + one block of slack, plus one
    prefill chunk (and one block) before the eviction that follows it.
    """
    total = history + new + max_new
    if not cache.policy.evicts:
        return total
    block = cache.config.block
    if cache.budget_blocks is not None:
        budget = max(cache.layer_budget(i) for i in range(len(cache.layers))) * block
    elif isinstance(cache.config.budget, float):  # a density, fixed by the first prompt
        budget = math.ceil(cache.config.budget * math.ceil((history + new) / block)) * block * 2
    else:
        return total
    return min(total, budget + 2 * block + min(chunk_size, new))
