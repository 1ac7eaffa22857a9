"""Attention of one decoded query per sequence on the CPU, as two matmuls over the grouped kv heads.

torch's CPU sdpa kernel is slow at one query in bf16: on this project's CPU (SmolLM2-135M's shapes, one thread) a
call took 1.8x as long as this matmul-softmax-matmul at 1K held keys and 2.1x at 4K, and a whole decode step of the
full cache ran 1.31x (1K) and 2.0x (4K) faster with it in sdpa's place (docs/benchmarks.md, "Decode by KV storage
engine"). It reads the held keys and values as they are (views of the layer's buffers, kvstore.cache.buffers): no
repeat of the kv heads, no copy. Same signature and result as transformers' sdpa attention function for q = 1
without a mask (`applies`: kvstore.cache.capture's wrapper routes the static engine's CPU decode steps here).

A policy that accumulates the attention its held tokens receive (H2O, the default memory) gets it from the same
pass (`decode_attention_with_mass`: the probabilities are there already; kvstore.cache.capture picks it, or the
Triton kernel on a GPU), instead of a second pass over the keys for every `observe_batch` decoded tokens.
"""

from __future__ import annotations

import torch


def applies(query: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> bool:
    """Whether `decode_attention` stands for sdpa here: one query per sequence, no mask, no attention variant
    (sliding window, soft-capping, sinks, dropout), on the CPU."""
    return query.shape[-2] == 1 and attention_mask is None and query.device.type == "cpu" and plain(kwargs)


def plain(kwargs: dict) -> bool:
    """Whether an attention function's keyword arguments ask for plain softmax attention: no dropout, no sliding
    window, soft-capping or attention sinks (which these paths do not implement)."""
    return not kwargs.get("dropout") and all(
        kwargs.get(name) is None for name in ("sliding_window", "softcap", "s_aux")
    )


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query [B, Hq, 1, D], key/value [B, Hkv, T, D] -> ([B, 1, Hq, D], None); softmax in float32."""
    return _attend(query, key, value, scaling)[0], None


def _logits(grouped: torch.Tensor, key: torch.Tensor, scale: float) -> torch.Tensor:
    """grouped [B, Hkv, G, D] x key [B, Hkv, T, D] -> fp32 logits [B, Hkv, G, T]. Computed as key @ grouped^T: the
    held keys are a view of a longer buffer (kvstore.cache.buffers), and the CPU's bf16 batched matmul with that
    view transposed on the right took 5x the time of a contiguous one (0.41 vs 0.08 ms, SmolLM2's shapes, 1,100
    keys of a 2,048 buffer), with it on the left 2x (0.17 ms)."""
    return torch.matmul(key, grouped.transpose(-1, -2)).transpose(-1, -2).float() * scale


def decode_attention_with_mass(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`decode_attention`'s output and the attention mass each held key receives, the torch path (and reference) of
    `kvstore.attention.triton_decode.triton_decode_attention`.

    query [B, Hq, 1, D], key/value [B, Hkv, T, D]; key_valid [B, Hkv, T] bool (the slots that hold a token; None:
    all); lengths [B] (keys from lengths[b] on are not held; None: T). Returns out [B, 1, Hq, D] (without a mask,
    `decode_attention`'s exactly) and mass [B, Hkv, T] float32: the softmax probability of each key per query head,
    averaged over the query heads of its kv head (`per_kv_head(attention_received(...))` of the one query). A
    sequence that holds no key gets output 0 and mass 0.
    """
    held = None if key_valid is None else key_valid.to(key.device, torch.bool)
    if lengths is not None:
        in_length = torch.arange(key.shape[2], device=key.device) < lengths.to(key.device)[:, None]  # [B, T]
        held = in_length[:, None] if held is None else held & in_length[:, None]
    out, probs = _attend(query, key, value, scale, held)
    return out, probs.mean(2)


def _attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None, held: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The output [B, 1, Hq, D] and the fp32 probabilities [B, Hkv, G, T] of one query per sequence over its kv
    head's keys; held [B, Hkv, T] bool masks the slots without a token (a row with none: output 0, probabilities 0)."""
    b, hq, _, d = query.shape
    grouped = query.reshape(b, key.shape[1], -1, d)  # query head h reads kv head h // (Hq / Hkv)
    logits = _logits(grouped, key, scale if scale is not None else d**-0.5)  # [B, Hkv, G, T]
    if held is not None:
        logits.masked_fill_(~held[:, :, None], float("-inf"))
    probs = logits.softmax(-1)
    if held is not None:
        probs = probs.nan_to_num_(0.0)  # a sequence (kv head) that holds no key: softmax over -inf only
    out = torch.matmul(probs.to(value.dtype), value)  # [B, Hkv, G, D]
    return out.reshape(b, hq, 1, d).transpose(1, 2).contiguous(), probs
