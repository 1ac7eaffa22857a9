"""Ada-KV (Feng et al. 2024) over SnapKV: a layer's budget is redistributed across kv heads by attention
concentration (joint top-K of all heads' candidate scores, with a guaranteed floor per head).

MASKING, NOT MEMORY: heads keep different numbers of tokens, but the cache stores one dense tensor per layer, so
each head is padded to the largest head's count and the padded slots are masked out of attention (a per-head mask,
so flash-attention is not supported). `stats()` reports `masked_heads=True`, the effective (unmasked) tokens held
and the physical bytes, which are those of the largest head, not of the average one.

Defaults and their sources: ada_floor = 0.2 (the paper's safeguard alpha = 0.2; kvpress AdaKVPress
alpha_safeguard=0.20), over SnapKV's defaults (window 32, kernel 5, see kvstore.policies.snapkv).
"""

import torch

from kvstore.policies.snapkv import SnapKVPolicy


class AdaSnapKVPolicy(SnapKVPolicy):
    name = "ada-snapkv"
    masks_heads = True

    def allocate(self, cand_scores: torch.Tensor, k: int) -> torch.Tensor:
        """[B, Hkv, Nc] candidate scores -> [B, Hkv] kept counts summing to Hkv * k (capped at Nc per head)."""
        b, h, nc = cand_scores.shape
        k = min(k, nc)
        floor = min(int(self.config.ada_floor * k), k)
        normed = cand_scores / cand_scores.sum(-1, keepdim=True).clamp_min(1e-12)  # concentration per head
        ranked = normed.sort(dim=-1, descending=True).values[..., floor:]  # [B, H, Nc - floor]
        extra = (k - floor) * h
        flat = ranked.reshape(b, -1)
        top = torch.topk(flat, min(extra, flat.shape[-1]), dim=-1).indices // ranked.shape[-1]  # head of each pick
        counts = torch.zeros(b, h, dtype=torch.long, device=cand_scores.device)
        counts.scatter_add_(1, top, torch.ones_like(top))
        return counts + floor
