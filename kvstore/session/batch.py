"""One decode step of several sessions in one batched forward, each session's cache evicting exactly as alone.

The caches hold different numbers of keys (ragged). For each layer, a `BatchView` layer hands every row's new key
and value to that row's own `EvictingLayer` (which appends them, as a solo forward would). The weights are read once
for the batch; attention is per row:
- on the CPU with sdpa (`ragged`), each row attends over its own held keys and values where they lie (views of its
  buffers: kvstore.cache.buffers) with the decode attention of a solo step (kvstore.attention.decode), so
  nothing is copied or padded, and a row whose policy observes gets each key's mass from that pass;
- elsewhere the rows' held keys/values are left-padded to the longest into one [B, Hkv, T_max, D] batch with a mask
  of the real slots (one copy per layer and step), for the model's own attention kernel.
After attention each row's queries go back to its own layer, which then runs its own eviction step. So every cache
sees the same calls, in the same order, with the same tensors (up to floating-point rounding of the batched
kernels) as in a solo decode step. Head-masking policies (per-head budgets) are not batched: decode them alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache

import kvstore
from kvstore.attention import decode
from kvstore.cache import capture
from kvstore.cache.evicting import EvictingCache
from kvstore.errors import KVStoreError


def can_batch(cache: EvictingCache) -> bool:
    """True when `cache` can join a batched decode step (its policy does not mask heads)."""
    return not cache.policy.masks_heads


class _BatchLayer:
    """One layer of the batch: routes rows to their own cache layers and builds the padded keys and mask."""

    def __init__(self, layer_idx: int, rows: list, sdpa: bool, per_row: bool = False) -> None:
        self.layer_idx, self.rows, self.sdpa, self.per_row = layer_idx, rows, sdpa, per_row
        self.mask: torch.Tensor | None = None  # [B, 1, q, T_max]: True (or 0.0) where a row has a real key
        self.ragged: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # each row's held keys/values (per_row)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states/value_states [B, Hkv, q, D] -> padded held keys/values [B, Hkv, T_max, D]; per row (one
        query each), the first row's held keys/values as placeholders: `attend` reads every row's own."""
        held = [row.update(key_states[i : i + 1], value_states[i : i + 1]) for i, row in enumerate(self.rows)]
        capture.hand_over(self.layer_idx, self)  # the attention call of this layer comes back to the batch
        if self.per_row and key_states.shape[-2] == 1:
            self.ragged = held
            return held[0]
        return self._padded(held, key_states.shape[-2])

    def padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows kept for `attend` as one padded batch instead (an attention variant `attend` does not do)."""
        held, self.ragged = self.ragged, None
        return self._padded(held, 1)

    def _padded(self, held: list[tuple[torch.Tensor, torch.Tensor]], q: int) -> tuple[torch.Tensor, torch.Tensor]:
        t_max = max(k.shape[-2] for k, _ in held)
        keys = _right_aligned([k for k, _ in held], t_max)  # [B, Hkv, T_max, D]
        values = _right_aligned([v for _, v in held], t_max)
        real = torch.zeros(len(held), t_max, dtype=torch.bool, device=keys.device)  # [B, T_max]
        for i, (k, _) in enumerate(held):
            real[i, t_max - k.shape[-2] :] = True
        j = torch.arange(t_max, device=keys.device)
        causal = j[None, :] <= (t_max - q + torch.arange(q, device=keys.device))[:, None]  # [q, T_max]
        allowed = real[:, None, None, :] & causal[None, None]  # [B, 1, q, T_max]
        if self.sdpa:
            self.mask = allowed
        else:
            self.mask = torch.zeros(allowed.shape, dtype=keys.dtype, device=keys.device)
            self.mask.masked_fill_(~allowed, torch.finfo(keys.dtype).min)
        return keys, values

    def head_mask(self, mask: torch.Tensor | None, query: torch.Tensor, impl: str) -> torch.Tensor:
        return self.mask  # the rows' padding mask replaces the model's (which knows nothing of the rows)

    def after_attention(self, query: torch.Tensor, scaling: float | None = None) -> None:
        for i, row in enumerate(self.rows):
            row.after_attention(query[i : i + 1], scaling)  # each row observes its own queries and evicts alone

    def attend(self, query: torch.Tensor, scaling: float | None) -> torch.Tensor:
        """query [B, Hq, 1, D] -> [B, 1, Hq, D]: each row over its own held keys and values (no copy), as a solo
        decode step attends; each row then observes (with the keys' mass where its policy reads sums) and evicts."""
        held, self.ragged = self.ragged, None
        outs = []
        for i, (row, (keys, values)) in enumerate(zip(self.rows, held, strict=True)):
            q = query[i : i + 1]
            if row.observes_by_sums():
                out, mass = decode.decode_attention_with_mass(q, keys, values, scaling)
                row.after_attention(q, scaling, mass=mass)
            else:
                out = decode.decode_attention(None, q, keys, values, None, scaling)[0]
                row.after_attention(q, scaling)
            outs.append(out)
        return torch.cat(outs)


class BatchView(Cache):
    """A transformers Cache over B evicting caches for one forward; each row is one session's cache."""

    def __init__(self, caches: Sequence[EvictingCache], sdpa: bool, per_row: bool = False) -> None:
        n_layers = {len(c.layers) for c in caches}
        if len(n_layers) != 1:
            raise KVStoreError("caches of different models cannot share a batch")
        layers = [_BatchLayer(i, [c.layers[i] for c in caches], sdpa, per_row) for i in range(n_layers.pop())]
        super().__init__(layers=layers)
        self.caches = list(caches)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(c.get_seq_length(layer_idx) for c in self.caches)


@torch.inference_mode()
def batched_decode(model: torch.nn.Module, caches: Sequence[EvictingCache], token_ids: Sequence[int]) -> torch.Tensor:
    """Run token_ids[i] on top of caches[i] for every i in one forward; next-token logits [B, V] (float32).

    Equivalent to B solo `kvstore.forward` calls (same positions, same keys seen, same eviction per cache)."""
    if len(caches) != len(token_ids) or not caches:
        raise KVStoreError("batched_decode needs one token per cache and at least one cache")
    if not all(can_batch(c) for c in caches):
        raise KVStoreError("head-masking policies cannot be batched; decode those sessions alone")
    impl = capture.install(model)
    if impl.removeprefix(capture.PREFIX).startswith("flash"):
        raise KVStoreError("batched decoding needs sdpa or eager attention (a padding mask), not flash attention")
    device = next(model.parameters()).device
    sdpa = impl.endswith("sdpa")
    view = BatchView(caches, sdpa=sdpa, per_row=sdpa and device.type == "cpu")
    ids = torch.tensor([[t] for t in token_ids], device=device)  # [B, 1]
    positions = torch.tensor([[c.get_seq_length()] for c in caches], device=device)  # [B, 1]
    out = model(
        input_ids=ids,
        position_ids=positions,
        # a ready 4D mask is passed through untouched by every architecture; the batch layers replace it (head_mask)
        attention_mask=torch.ones(len(caches), 1, 1, 1, dtype=torch.bool, device=device),
        use_cache=True,
        logits_to_keep=1,
        **{kvstore.cache_kwarg(model): view},
    )
    return out.logits[:, -1].float()


def _right_aligned(rows: list[torch.Tensor], length: int) -> torch.Tensor:
    """[1, H, T_i, D] each -> [B, H, length, D]: each row's tokens at the right end, zeros in front (one copy)."""
    first = rows[0]
    out = first.new_empty(len(rows), *first.shape[1:-2], length, first.shape[-1])
    for i, t in enumerate(rows):
        pad = length - t.shape[-2]
        out[i, :, :pad].zero_()
        out[i, :, pad:].copy_(t[0])
    return out
