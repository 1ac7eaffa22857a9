"""Chunked prefill onto a cache, so a long prompt is evicted as it streams in (peak memory near the budget)."""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache


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
def prefill(
    model: torch.nn.Module,
    cache: Cache,
    input_ids: torch.Tensor,
    chunk_size: int | None = None,
    all_logits: bool = False,
    boundary: int | None = None,
) -> torch.Tensor:
    """Prefill `input_ids` [B, T] in chunks; returns the logits of the last position [B, V], or with `all_logits`
    the logits after every position [B, T, V] (teacher forcing: row t predicts token t + 1).

    boundary: an index into `input_ids` where a chunk must end (see `chunk_end`).
    A density budget is fixed here from the prompt length (tokens already seen + T)."""
    if hasattr(cache, "resolve_budget"):
        cache.resolve_budget(cache.get_seq_length() + input_ids.shape[-1])
    size = chunk_size or getattr(getattr(cache, "config", None), "chunk_size", None) or input_ids.shape[-1]
    chunks, start, total = [], 0, input_ids.shape[-1]
    while start < total:
        end = chunk_end(start, total, size, boundary)
        chunks.append(forward(model, cache, input_ids[:, start:end], last_only=not all_logits))
        start = end
    if not chunks:
        raise ValueError("prefill needs at least one token")
    return torch.cat(chunks, dim=1) if all_logits else chunks[-1][:, -1]


def chunk_end(start: int, total: int, size: int, boundary: int | None = None) -> int:
    """Where the prefill chunk that starts at `start` ends: `size` tokens on, or at `total`, or at `boundary` when
    it falls inside. The session puts the boundary where a reply begins (its generation prompt), so that the
    message before it is evicted before the reply's own queries arrive, as `bench replay` measures it
    (docs/memory.md, "Where a reply's prefill begins")."""
    end = min(start + size, total)
    return boundary if boundary is not None and start < boundary < end else end
