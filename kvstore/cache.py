"""The evicting KV cache: a transformers `Cache` whose layers evict blocks under a fixed per-layer budget.

Stock `model.generate` and plain forward calls accept it. Positions continue at the number of tokens seen, kept
keys keep their original (already rotated) positions, and each layer is brought back to its budget right after
attention used the new tokens, so between forward calls a layer holds at most budget + one block.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from transformers.cache_utils import Cache

from kvstore import capture
from kvstore.config import CacheConfig
from kvstore.defaults import DEFAULT_DENSITY, DEFAULT_POLICY
from kvstore.errors import KVStoreError
from kvstore.eviction import max_forced_blocks
from kvstore.layer import EvictingLayer
from kvstore.policies import build_policy, policy_defaults

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")


class EvictingCache(Cache):
    def __init__(self, config: CacheConfig, identity: dict[str, Any]) -> None:
        self.config = config
        self.policy = build_policy(config)
        self.identity = identity  # model_type, layers, kv heads, head dim, name: what a saved state must match
        super().__init__(layers=[EvictingLayer(i, self) for i in range(identity["num_layers"])])
        self.generator = torch.Generator(device="cpu").manual_seed(config.seed)
        self.budget_blocks: int | None = None
        self._cuda = identity.get("device", "cpu").startswith("cuda")
        if isinstance(config.budget, int) and self.policy.evicts:
            self._set_budget(config.budget // config.block)

    # --- budget ---------------------------------------------------------------------------------------------------
    def resolve_budget(self, prompt_tokens: int) -> None:
        """Fix a density budget from the prompt length (B = ceil(d * N_k)); no-op once fixed or for token budgets."""
        if self.budget_blocks is None and self.policy.evicts and isinstance(self.config.budget, float):
            self._set_budget(math.ceil(self.config.budget * math.ceil(prompt_tokens / self.config.block)))

    def _set_budget(self, blocks: int) -> None:
        need = max_forced_blocks(self.config)
        if blocks < need:
            b = self.config.block
            raise KVStoreError(
                f"budget of {blocks * b} tokens ({blocks} blocks of {b} per layer) cannot hold the {need} forced "
                f"blocks (sink + {self.config.recent_blocks} recent + tail); use at least {need * b} tokens or a "
                "larger density"
            )
        n = len(self.layers)
        # layers whose own share (PyramidKV) falls below the forced set still keep the forced set
        per_layer = [max(need, self.policy.layer_budget(i, n, blocks)) for i in range(n)]
        self.budget_blocks = blocks
        self._layer_budgets = per_layer

    def layer_budget(self, layer_idx: int) -> int:
        return self._layer_budgets[layer_idx]

    def should_evict(self, layer: EvictingLayer) -> bool:
        if self.config.budget is None or not self.policy.evicts or (self.policy.prefill_only and layer.last_q_len <= 1):
            return False
        if self.budget_blocks is None:
            self.resolve_budget(layer.seen)  # no prefill() told us the prompt: the first forward is the prompt
        return math.ceil(layer.held() / self.config.block) > self.layer_budget(layer.layer_idx) + 1

    # --- Cache API overrides ---------------------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].seen

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        """kv_length = the largest held length over layers + new tokens; every held key counts as past. Layers that
        hold fewer keys take the right-most columns of the mask (kvstore.capture)."""
        held = max(layer.held() for layer in self.layers)
        return held + query_length, self.layers[layer_idx].seen - held

    # --- statistics -----------------------------------------------------------------------------------------------
    def timer(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def stats(self) -> dict[str, Any]:
        held = [layer.effective_held() for layer in self.layers]
        evicted = [layer.stats.evicted for layer in self.layers]
        return {
            "policy": self.config.policy,
            "budget_tokens": None if self.budget_blocks is None else self.budget_blocks * self.config.block,
            "budget_blocks": self.budget_blocks,
            "layer_budget_blocks": getattr(self, "_layer_budgets", None),
            "tokens_seen": self.get_seq_length(),
            "tokens_held": sum(held),
            "tokens_held_per_layer": held,
            "tokens_held_physical_per_layer": [layer.held() for layer in self.layers],
            "tokens_evicted": sum(evicted),
            "tokens_evicted_per_layer": evicted,
            "eviction_steps": sum(layer.stats.eviction_steps for layer in self.layers),
            "score_s": sum(layer.stats.score_s for layer in self.layers),
            "select_s": sum(layer.stats.select_s for layer in self.layers),
            "bytes_held": sum(layer.nbytes() for layer in self.layers),
            "masked_heads": self.policy.masks_heads,
        }

    def export_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Tensors + JSON-able metadata to continue exactly here later (see kvstore.state.restore_cache)."""
        from kvstore.state import export_state

        return export_state(self)

    def evictions(self, layer_idx: int) -> torch.Tensor:
        """Survival record of one layer: [E, 2] rows of (tokens seen at eviction, evicted block start position)."""
        return self.layers[layer_idx].stats.events_tensor()


def model_identity(model: torch.nn.Module) -> dict[str, Any]:
    cfg = model.config
    if cfg.model_type not in SUPPORTED_ARCHITECTURES:
        raise KVStoreError(
            f"architecture {cfg.model_type!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return {
        "model_type": cfg.model_type,
        "name": getattr(cfg, "_name_or_path", "") or "",
        "num_layers": cfg.num_hidden_layers,
        "num_kv_heads": getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "device": str(next(model.parameters()).device),
    }


def make_cache(
    model: torch.nn.Module,
    policy: str = DEFAULT_POLICY,
    budget: int | float | None = DEFAULT_DENSITY,
    seed: int = 0,
    **options: Any,
) -> EvictingCache:
    """The evicting cache for `model`.

    budget: int = tokens per layer; float in (0, 1] = density of the prompt (fixed at the first prefill);
    None = never evict (the cache holds everything, whatever the policy). Every knob of `CacheConfig` is an
    option (block, window, walk_steps, lam, eps_tie, n, recent_blocks, chunk_size, selector, ...).
    """
    identity = model_identity(model)
    opts = policy_defaults(policy) | options
    config = CacheConfig.from_options(policy=policy, budget=budget, seed=seed, **opts)
    capture.install(model)
    return EvictingCache(config, identity)
