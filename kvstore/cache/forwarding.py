"""Chunked prefill onto a cache, so a long prompt is evicted as it streams in (peak memory near the budget)."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import torch
from transformers.cache_utils import Cache

from kvstore.steps import run_steps


def cache_kwarg(model: torch.nn.Module) -> str:
    """The forward argument that takes the cache: `cache` in newer transformers, `past_key_values` before."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.inference_mode()
def forward(model: torch.nn.Module, cache: Cache, input_ids: torch.Tensor, last_only: bool = True) -> torch.Tensor:
    """One forward of new tokens [B, q] on top of `cache`; logits [B, q or 1, V] (float32)."""
    kwargs = {cache_kwarg(model): cache, "use_cache": True}
    if last_only:
        kwargs["logits_to_keep"] = 1
    return model(input_ids=input_ids, **kwargs).logits.float()


@torch.inference_mode()
def prefill(model: torch.nn.Module, cache: Cache, input_ids: torch.Tensor, *args: Any, **options: Any) -> torch.Tensor:
    """Prefill `input_ids` [B, T] in chunks; returns the logits of the last position [B, V], or with `all_logits`
    the logits after every position [B, T, V] (teacher forcing: row t predicts token t + 1). The options, in order:
    chunk_size, all_logits, reply (see `prefill_steps`)."""
    return run_steps(prefill_steps(model, cache, input_ids, *args, **options))


@torch.inference_mode()
def prefill_steps(
    model: torch.nn.Module,
    cache: Cache,
    input_ids: torch.Tensor,
    chunk_size: int | None = None,
    all_logits: bool = False,
    reply: tuple[int, int] | None = None,
) -> Generator[None, None, torch.Tensor]:
    """`prefill`, yielding between its chunks (a caller may run other work in between, as a server's scheduler does
    between the steps of a calibration); returns what `prefill` returns. The chunks and evictions are the same.

    chunk_size: tokens per forward (default: the cache's `chunk_size`, else all at once); all_logits: return every
    position's logits; reply: [start, end) of a reply's generation prompt within `input_ids` (see `chunk_end`).
    A density budget is fixed here from the prompt length (tokens already seen + T). With the cache's
    `prefill_slack`, a chunk before the last (and before the reply's prompt) evicts only past budget + slack."""
    if hasattr(cache, "resolve_budget"):
        cache.resolve_budget(cache.get_seq_length() + input_ids.shape[-1])
    size = chunk_size or getattr(getattr(cache, "config", None), "chunk_size", None) or input_ids.shape[-1]
    chunks, start, total = [], 0, input_ids.shape[-1]
    pauses = hasattr(cache, "eviction_point")  # an evicting cache: told which chunks may leave it past its budget
    try:
        while start < total:
            end = chunk_end(start, total, size, reply)
            if pauses:  # the last chunk, and the one before a reply's prompt, bring it back (prefill_slack)
                cache.eviction_point = end == total or (reply is not None and end == reply[0])
            chunks.append(forward(model, cache, input_ids[:, start:end], last_only=not all_logits))
            start = end
            if start < total:
                yield
    finally:
        if pauses:
            cache.eviction_point = True
    if not chunks:
        raise ValueError("prefill needs at least one token")
    return torch.cat(chunks, dim=1) if all_logits else chunks[-1][:, -1]


def chunk_end(start: int, total: int, size: int, reply: tuple[int, int] | None = None) -> int:
    """Where the prefill chunk that starts at `start` ends: `size` tokens on or at `total`, except around `reply`,
    the [start, end) of the generation prompt of a reply being generated. A chunk ends where the prompt begins, and
    the prompt's tokens run one at a time, as decoding runs the reply's: the message before the reply is evicted
    before any of the reply's queries count (the reply term), and the prompt evicts only past the budget plus the
    decode slack. That is the cache `bench replay` measures for a recorded reply (docs/memory.md, "Where a reply's
    prefill begins")."""
    end = min(start + size, total)
    if reply is None:
        return end
    first, last = reply
    if first <= start < last:
        return start + 1
    return first if start < first < end else end
