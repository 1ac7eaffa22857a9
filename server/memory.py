"""How many KV bytes a session holds now and may hold at the peak of its next turn (for admission)."""

from __future__ import annotations


def cache_bytes(cache) -> int:
    """Bytes of keys and values an evicting cache holds (all layers): what admission reserves a turn's peak in. The
    storage's headroom (kvstore.cache.buffers: an evicting layer's one prefill chunk, a full cache's doubling) is
    not counted; `allocated_bytes()` has it."""
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
    prefill chunk (and one block) before the eviction that follows it, and its `prefill_slack` on top while a
    prefill's chunks before its last wait for that eviction.
    """
    total = history + new + max_new
    if not cache.policy.evicts:
        return total
    budget = _layer_budget(cache, history + new)
    if budget is None:
        return total
    return min(total, budget + 2 * cache.config.block + min(chunk_size + cache.config.prefill_slack, new))


def _layer_budget(cache, tokens: int) -> int | None:
    """The largest layer budget the cache has once it has seen `tokens` tokens (None: it never evicts)."""
    config = cache.config
    if isinstance(config.budget, float) and (config.density_grows or cache.budget_tokens is None):
        return max(cache.policy.layer_budgets(cache.density_budget(tokens), len(cache.layers)))
    if cache.budget_tokens is not None:
        return max(cache.layer_budget_tokens(i) for i in range(len(cache.layers)))
    return None


def turn_peak_bytes(job, reference, config, per_token: int) -> int:
    """The KV bytes `job`'s turn (server.jobs.Job) may hold at its peak, which admission reserves: its session's
    history and its new tokens (as tokenized on the request side, server.prepare, else rendered by `reference`, a
    Session that never runs), its reply, one prefill chunk of headroom, as its cache keeps them."""
    entry = job.entry
    session = entry.session
    history = len(session.tokens) if session is not None else entry.history_tokens
    if job.prepared is not None and job.prepared.first == (history == 0):
        new = job.prepared.prompt_tokens
    else:
        new = len(reference.renderer.encode_messages(job.messages, first=history == 0))
        new += len(reference.renderer.generation_prompt_ids)
    if config.memory.protocol == "re-prefill":
        new, history = new + history, 0
    cache = session.cache if session is not None and session.cache is not None else reference.cache
    return peak_tokens(cache, history, new, job.max_new_tokens, config.chunk_size) * per_token
