"""The evicting KV cache: a transformers `Cache` whose layers evict blocks under a fixed per-layer budget.

Stock `model.generate` and plain forward calls accept it. Positions continue at the number of tokens seen, kept
keys keep their original (already rotated) positions, and each layer is brought back to its budget right after
attention used the new tokens. Budget accounting (docs/baselines.md): budgets are tokens per layer; after a
multi-token forward a layer holds at most its budget (token policies exactly, block policies at most b - 1 less);
in decode a layer may grow by `decode_slack` tokens (one block) before the next step brings it back. With
`prefill_slack`, the chunks of one prefill before its last evict only past budget + slack, so a message up to that
long is evicted once, on every one of its queries; the layer's storage shrinks back after that peak.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache

from kvstore.cache import capture
from kvstore.cache.config import CacheConfig
from kvstore.cache.layer import EvictingLayer
from kvstore.cache.signals import SessionSignals
from kvstore.defaults import DEFAULT_DENSITY, DEFAULT_POLICY
from kvstore.errors import KVStoreError
from kvstore.policies import build_policy

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")


class EvictingCache(Cache):
    def __init__(self, config: CacheConfig, identity: dict[str, Any]) -> None:
        self.config = config
        self.policy = build_policy(config)
        self.identity = identity  # model_type, layers, kv heads, head dim, name: what a saved state must match
        super().__init__(layers=[EvictingLayer(i, self) for i in range(identity["num_layers"])])
        self.generator = torch.Generator(device="cpu").manual_seed(config.seed)
        self.budget_tokens: int | None = None
        self._layer_budgets: list[int] | None = None
        self.prefill_end: int | None = None  # tokens seen at the end of the latest prefill() (compress_once)
        self.eviction_point = True  # False: a prefill chunk before its last, which evicts only past prefill_slack
        self._cuda = identity.get("device", "cpu").startswith("cuda")
        # what the session tells the cache: profile weights, protected spans, the agent's replies, observers
        self.signals = SessionSignals((identity["num_layers"], identity["num_kv_heads"]), identity.get("device", "cpu"))
        if isinstance(config.budget, int) and self.policy.evicts:
            self._set_budget(config.budget)

    # --- budget ---------------------------------------------------------------------------------------------------
    def resolve_budget(self, prompt_tokens: int) -> None:
        """Called by prefill() with the tokens seen once the prompt is in: fixes a density budget
        (round(d * prompt_tokens) tokens per layer, never below `least_budget`) the first time, or at every prefill
        with `density_grows`; no-op for token budgets."""
        self.prefill_end = prompt_tokens
        density = self.config.budget
        if not self.policy.evicts or not isinstance(density, float):
            return
        if self.budget_tokens is None or self.config.density_grows:
            tokens = self.density_budget(prompt_tokens)
            if tokens != self.budget_tokens:
                self._set_budget(tokens)

    def density_budget(self, tokens: int) -> int:
        """The tokens per layer a density budget gives a conversation of `tokens` tokens: d x tokens, but never
        less than the policy must keep (`least_budget`), so a short prompt is held whole instead of refused."""
        return max(round(self.config.budget * tokens), self.least_budget())

    def least_budget(self) -> int:
        """The smallest budget whose every layer holds the policy's forced set (sink, recent tokens, a block's
        tail) and the protected spans."""
        protected = sum(end - start for start, end in self.signals.protected)

        def holds(n: int) -> bool:  # the forced set grows slower than the budget: false below some n, true above
            per_layer = self.policy.layer_budgets(n, len(self.layers))
            return all(self.policy.forced_max(b) + protected <= b for b in per_layer)

        high = 1
        while not holds(high):
            high *= 2
        low = high // 2  # holds(low) is false (or low is 0)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if holds(mid) else (mid, high)
        return high

    def _set_budget(self, tokens: int) -> None:
        per_layer = self.policy.layer_budgets(tokens, len(self.layers))
        for i, n in enumerate(per_layer):
            need = self.policy.forced_max(n)
            if n < need:
                raise KVStoreError(
                    f"budget of {n} tokens per layer (layer {i}) cannot hold the forced blocks of {self.config.policy} "
                    f"({self.policy.sink_tokens()} sink + {self.policy.recent_tokens(n)} recent"
                    f"{' + an incomplete tail block' if self.policy.granularity == 'block' else ''} = {need} tokens); "
                    "use a larger budget or density"
                )
        self.budget_tokens = tokens
        self._layer_budgets = per_layer

    @property
    def budget_blocks(self) -> int | None:
        """The budget in whole blocks (rounded up; informational: budgets are counted in tokens)."""
        return None if self.budget_tokens is None else math.ceil(self.budget_tokens / self.config.block)

    def layer_budget_tokens(self, layer_idx: int) -> int:
        return self._layer_budgets[layer_idx]

    def decode_slack(self) -> int:
        slack = self.config.decode_slack
        return self.config.block if slack is None else slack

    def decode_limit(self, layer_idx: int) -> int | None:
        """The most tokens a layer holds while decoding (its budget + decode slack + 1: the step past it evicts), or
        None where decoding never evicts (no budget yet, full, prefill-only): what its storage preallocates."""
        if self._layer_budgets is None or self.config.budget is None or self.policy.prefill_only:
            return None
        return self._layer_budgets[layer_idx] + self.decode_slack() + 1 if self.policy.evicts else None

    def should_evict(self, layer: EvictingLayer) -> bool:
        """Multi-token forwards are brought back to the budget exactly (a prefill's chunks before its last only once
        past budget + prefill_slack); decode steps once past budget + decode slack.
        Prefill-only policies never evict in decode; with compress_once only at the end of the first prefill."""
        for observe in self.signals.observers:
            observe(layer)
        multi = layer.last_q_len > 1
        if self.config.budget is None or not self.policy.evicts or (self.policy.prefill_only and not multi):
            return False
        if self.policy.prefill_only and self.config.compress_once:
            if layer.stats.eviction_steps > 0 or (self.prefill_end is not None and layer.seen < self.prefill_end):
                return False
        if self.budget_tokens is None:
            self.resolve_budget(layer.seen)  # no prefill() told us the prompt: the first forward is the prompt
        slack = (0 if self.eviction_point else self.config.prefill_slack) if multi else self.decode_slack()
        return layer.effective_held() > self.layer_budget_tokens(layer.layer_idx) + slack

    def flush_observations(self) -> None:
        """Apply every layer's pending decode statistics (EvictingLayer.flush_observations): before reading the
        policies' per-token state from outside, at the end of a reply, and before saving."""
        for layer in self.layers:
            layer.flush_observations()

    # --- for callers that predate `signals` (benchmarks, the chat command): the same object underneath ---------
    @property
    def prior(self) -> torch.Tensor | None:
        return self.signals.prior

    @property
    def reply_from(self) -> int | None:
        return self.signals.reply_from

    @reply_from.setter
    def reply_from(self, position: int | None) -> None:
        self.signals.reply_from = position

    def add_observer(self, observe: Callable[[EvictingLayer], None]) -> None:
        """Call `observe(layer)` after every attention call, before the layer may evict (it must not change it)."""
        self.signals.observers.append(observe)

    # --- Cache API overrides ---------------------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].seen

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        """kv_length = the largest held length over layers + new tokens; every held key counts as past. Layers that
        hold fewer keys take the right-most columns of the mask (kvstore.cache.capture)."""
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
        b = self.config.block
        budgets = self._layer_budgets
        return {
            "policy": self.config.policy,
            "budget_tokens": self.budget_tokens,
            "budget_blocks": self.budget_blocks,
            "layer_budget_tokens": budgets,
            "layer_budget_blocks": None if budgets is None else [math.ceil(n / b) for n in budgets],
            "sink_tokens": self.policy.sink_tokens(),
            "decode_slack": self.decode_slack(),
            "evicts_when": self.evicts_when(),
            "tokens_seen": self.get_seq_length(),
            "tokens_held": sum(held),
            "tokens_held_per_layer": held,
            "tokens_held_per_head": [layer.held_per_head() for layer in self.layers],
            "tokens_held_physical_per_layer": [layer.held() for layer in self.layers],
            "tokens_evicted": sum(evicted),
            "tokens_evicted_per_layer": evicted,
            "eviction_steps": sum(layer.stats.eviction_steps for layer in self.layers),
            "score_s": sum(layer.stats.score_s for layer in self.layers),
            "select_s": sum(layer.stats.select_s for layer in self.layers),
            "bytes_held": sum(layer.nbytes() for layer in self.layers),
            "masked_heads": self.policy.masks_heads,
        }

    def evicts_when(self) -> str:
        """When this cache's policy compresses, in words (stats()["evicts_when"])."""
        if not self.policy.evicts:
            return "never"
        if not self.policy.prefill_only:
            slack = self.config.prefill_slack
            prefill = (
                f"a prefill's last chunk back to the budget, its others once past budget + {slack}"
                if slack
                else "multi-token ones back to the budget"
            )
            return f"every forward: {prefill}, decode once past budget + decode_slack"
        if self.config.compress_once:
            return "once, at the end of the first prefill; later tokens (decode and new turns) accumulate"
        return "every multi-token forward (each prefill chunk, each new turn); decode tokens accumulate"

    def evictions(self, layer_idx: int) -> torch.Tensor:
        """Survival record of one layer: [E, 2] rows of (tokens seen at eviction, evicted block start position)."""
        return self.layers[layer_idx].stats.events_tensor()


# what a saved cache or a memory profile must share with the model it is used on (kvstore.cache.snapshot,
# kvstore.profiles.profile)
ARCHITECTURE_KEYS = ("model_type", "num_layers", "num_kv_heads", "head_dim")


def model_identity(model: torch.nn.Module) -> dict[str, Any]:
    cfg = model.config
    if cfg.model_type not in SUPPORTED_ARCHITECTURES:
        raise KVStoreError(
            f"architecture {cfg.model_type!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return architecture(cfg) | {
        "name": getattr(cfg, "_name_or_path", "") or "",
        "device": str(next(model.parameters()).device),
    }


def architecture(cfg) -> dict[str, Any]:
    """The ARCHITECTURE_KEYS of a model's (transformers) config."""
    return {
        "model_type": cfg.model_type,
        "num_layers": cfg.num_hidden_layers,
        "num_kv_heads": getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
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
    None = never evict (the cache holds everything, whatever the policy). Every shared knob of `CacheConfig` (block,
    sink, recent, decode_slack, chunk_size, ...) and every option of the policy's settings (Nexus: window,
    walk_steps, lam, n, selector, ...) is an option; one the policy does not declare is an error.
    """
    return open_cache(model, CacheConfig.of(policy, budget=budget, seed=seed, **options))


def open_cache(model: torch.nn.Module, config: CacheConfig) -> EvictingCache:
    """The evicting cache for `model` with a config built before (a session's `SessionConfig.cache`): the one place a
    new cache meets its model."""
    identity = model_identity(model)
    capture.install(model)
    return EvictingCache(config, identity)
