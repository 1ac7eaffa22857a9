"""Attach the cache to a model's attention without forking modeling code.

A wrapper of the model's own attention function is registered in transformers' `AttentionInterface` (and the
matching mask function in `AttentionMaskInterface`) under "nexus_<impl>". The cache layer that was just updated
hands itself over here (`hand_over`); the wrapper then (1) aligns the mask to that layer's held keys, (2) calls the
real kernel, and (3) gives the layer the queries exactly as attention used them (after RoPE / q-norm), after which
the layer may evict. The static engine's layers take faster paths where they apply (`_fused`): a decode step by
kvstore.attention.decode, and a multi-token forward by kvstore.attention.prefill, each also giving the
policy the attention its held keys received, so that its statistics need no pass of their own. With no evicting
layer pending (e.g. a plain DynamicCache), the wrapper is a pass-through.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

from kvstore.attention import decode, prefill
from kvstore.attention.dispatch import fused_decode_attention
from kvstore.errors import KVStoreError

PREFIX = "nexus_"
SUPPORTED = ("eager", "sdpa", "flash_attention_2", "flash_attention_3")
_pending = threading.local()


def hand_over(layer_idx: int, layer: Any) -> None:
    """Called by a cache layer's update(): the next attention call of `layer_idx` belongs to `layer`."""
    if not hasattr(_pending, "layers"):
        _pending.layers = {}
    _pending.layers[layer_idx] = layer


def _take(layer_idx: int | None) -> Any:
    layers = getattr(_pending, "layers", None)
    if not layers or layer_idx is None:
        return None
    return layers.pop(layer_idx, None)


def _base_function(impl: str, module: torch.nn.Module):
    if impl == "eager":  # eager lives in each modeling file; use the model's own
        return sys.modules[type(module).__module__].eager_attention_forward
    return AttentionInterface._global_mapping[impl]


def _align_mask(mask: torch.Tensor | None, kv_len: int) -> torch.Tensor | None:
    """Keep the right-most kv_len columns: the cache reports the largest held length over layers, and a layer
    holding fewer keys must keep the causal block of the new tokens aligned to the right edge."""
    if mask is None or mask.dim() != 4 or mask.shape[-1] == kv_len:
        return mask
    return mask[..., mask.shape[-1] - kv_len :]


def _make_wrapper(impl: str):
    def attention(module, query, key, value, attention_mask, **kwargs):
        layer = _take(getattr(module, "layer_idx", None))
        if getattr(layer, "ragged", None) is not None:  # a batch of sessions (kvstore.session.batch)
            if decode.plain(kwargs):
                return layer.attend(query, kwargs.get("scaling")), None  # each over its own buffers
            key, value = layer.padded()
        attention_mask = _align_mask(attention_mask, key.shape[-2])
        if layer is not None:
            attention_mask = layer.head_mask(attention_mask, query, impl)
        out = _fused(layer, impl, query, key, value, attention_mask, kwargs)
        if out is not None:  # the layer observed what the attention pass computed, and may have evicted
            return out, None
        fn = _base_function(impl, module)
        fast = getattr(layer, "fast_attention", False) and impl == "sdpa"
        if fast and decode.applies(query, attention_mask, **kwargs):
            fn = decode.decode_attention  # a CPU decode step of the static engine: faster than torch's sdpa
        out = fn(module, query, key, value, attention_mask, **kwargs)
        if layer is not None:
            layer.after_attention(query, scaling=kwargs.get("scaling"))
        return out

    attention.__name__ = f"{PREFIX}{impl}_attention"
    return attention


def _fused(layer, impl: str, query, key, value, attention_mask, kwargs) -> torch.Tensor | None:
    """The attention output, where the static engine's pass also gives the layer what its policy observes (handed
    over with after_attention): a multi-token forward on the CPU (kvstore.attention.prefill), a decode step on
    the CPU (sdpa's place) or on a GPU with triton (any implementation's place; kvstore.attention.decode). None:
    attend as before, and the policy observes in its own pass."""
    if not getattr(layer, "fast_attention", False) or not decode.plain(kwargs):
        return None
    scaling = kwargs.get("scaling")
    if query.shape[-2] == 1 and attention_mask is None and (impl == "sdpa" or query.device.type == "cuda"):
        fused = _attention_with_mass(query, key, value, scaling) if layer.observes_by_sums() else None
        if fused is None:
            return None
        out, mass = fused
        layer.after_attention(query, scaling=scaling, mass=mass)
        return out
    if impl == "sdpa" and prefill.applies(query, key, attention_mask, **kwargs):
        coefs = layer.fused_weightings(query.shape[-2])
        if coefs is None:
            return None
        out, sums = prefill.attention_with_sums(query, key, value, scaling, coefs)
        layer.after_attention(query, scaling=scaling, sums=sums)
        return out
    return None


def _attention_with_mass(query, key, value, scale: float | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One decoded query per sequence: the output [B, 1, Hq, D] and the mass each held key receives [B, Hkv, T]
    fp32 from the same pass over the keys. On the CPU decode_attention_with_mass; on a GPU the fused Triton kernel
    (kvstore.attention.triton_decode), or None where it does not run (no triton: attend as before)."""
    if query.device.type == "cpu":
        return decode.decode_attention_with_mass(query, key, value, scale)
    return fused_decode_attention(query, key, value, scale)


def install(model: torch.nn.Module) -> str:
    """Route `model`'s attention through the capturing wrapper (idempotent); returns the implementation name."""
    impl = model.config._attn_implementation
    if impl.startswith(PREFIX):
        return impl
    if impl not in SUPPORTED:
        raise KVStoreError(f"attention implementation {impl!r} is not supported; use one of {', '.join(SUPPORTED)}")
    name = PREFIX + impl
    AttentionInterface.register(name, _make_wrapper(impl))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[impl])
    model.set_attn_implementation(name)
    return name


def uninstall(model: torch.nn.Module) -> None:
    """Restore the model's original attention implementation."""
    impl = model.config._attn_implementation
    if impl.startswith(PREFIX):
        model.set_attn_implementation(impl[len(PREFIX) :])
