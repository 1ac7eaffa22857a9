"""Attention of one decoded query per sequence on the CPU, as two matmuls over the grouped kv heads.

torch's CPU sdpa kernel is slow at one query in bf16: on this project's CPU (SmolLM2-135M's shapes, one thread) a
call took 1.8x as long as this matmul-softmax-matmul at 1K held keys and 2.1x at 4K, and a whole decode step of the
full cache ran 1.31x (1K) and 2.0x (4K) faster with it in sdpa's place (docs/benchmarks.md, "Decode by KV storage
engine"). It reads the held keys and values as they are (views of the layer's buffers, kvstore.cache.buffers): no
repeat of the kv heads, no copy. Same signature and result as transformers' sdpa attention function for q = 1
without a mask. Not routed to yet: that is one condition in kvstore.cache.capture's wrapper (`applies`).
"""

from __future__ import annotations

import torch


def applies(query: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """Whether `decode_attention` stands for sdpa here: one query per sequence, no mask, on the CPU."""
    return query.shape[-2] == 1 and attention_mask is None and query.device.type == "cpu"


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
    b, hq, _, d = query.shape
    hkv = key.shape[1]
    grouped = query.reshape(b, hkv, hq // hkv, d)  # query head h reads kv head h // (Hq / Hkv)
    scale = scaling if scaling is not None else d**-0.5
    logits = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # [B, Hkv, G, T]
    out = torch.matmul(logits.softmax(-1).to(value.dtype), value)  # [B, Hkv, G, D]
    return out.reshape(b, hq, 1, d).transpose(1, 2).contiguous(), None
