"""One layer of the evicting cache: held keys/values with their original positions, the rolling window of recent
queries, and the eviction step (score -> plan -> gather) that runs right after attention used the new tokens."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Protocol

import torch
from transformers.cache_utils import DynamicLayer

from kvstore.attention.prefill import causal_mask
from kvstore.attention.received import weighting_coefs
from kvstore.cache import capture
from kvstore.cache.buffers import make_store
from kvstore.cache.eviction import plan_eviction
from kvstore.cache.signals import SessionSignals
from kvstore.cache.stats import LayerStats
from kvstore.errors import KVStoreError
from kvstore.policies.base import Policy, ScoreContext

if TYPE_CHECKING:
    from kvstore.cache.config import CacheConfig


class LayerOwner(Protocol):
    """What a layer reads of the cache it belongs to (kvstore.cache.evicting.EvictingCache, which builds its layers
    and so is known to them only through this)."""

    config: CacheConfig
    policy: Policy
    signals: SessionSignals
    generator: torch.Generator

    def layer_budget_tokens(self, layer_idx: int) -> int: ...

    def decode_limit(self, layer_idx: int) -> int | None: ...

    def should_evict(self, layer: EvictingLayer) -> bool: ...

    def timer(self) -> float: ...


class EvictingLayer(DynamicLayer):
    """keys/values: [B, Hkv, T_held, D]; positions: [B, Hkv, T_held] original token positions (never re-rotated)."""

    def __init__(self, layer_idx: int, owner: LayerOwner) -> None:
        self.store = make_store(owner.config.engine)  # keys, values, positions, valid, state.* (kvstore.cache.buffers)
        super().__init__()
        self.layer_idx = layer_idx
        self._owner = weakref.ref(owner)  # not a cycle: a cache no one holds frees its buffers at once, not at a gc
        # the static engine's CPU attention paths (kvstore.cache.capture): kvstore.attention.decode and .prefill
        self.fast_attention = owner.config.engine == "static"
        self.seen = 0  # tokens seen (new tokens continue at this position)
        self.window_q: torch.Tensor | None = None  # [B, Hq, <=W, D]
        self.query: torch.Tensor | None = None  # [B, Hq, q, D] the current attention call's queries (for observers)
        self.pending_q: list[torch.Tensor] = []  # [B, Hq, q, D] each: queries of the last positions not yet observed
        self.pending_mass: list[torch.Tensor] = []  # [B, Hkv, T_i] each: what decode step i's attention pass gave
        self.last_q_len = 0
        self.stats = LayerStats()

    @property
    def owner(self) -> LayerOwner:
        """The cache this layer belongs to."""
        return self._owner()

    # --- the held tokens: views of the store (kvstore.cache.buffers), [B, Hkv, T_held, ...] ----------------------
    keys = property(lambda self: self.store.get("keys"), lambda self, t: self.store.set("keys", t))
    values = property(lambda self: self.store.get("values"), lambda self, t: self.store.set("values", t))
    positions = property(lambda self: self.store.get("positions"), lambda self, t: self.store.set("positions", t))
    valid = property(  # [B, Hkv, T] bool, head-masking policies only (None otherwise)
        lambda self: self.store.get("valid"), lambda self, t: self.store.set("valid", t)
    )

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The policy's per-token state, each [B, Hkv, T] (views: a policy updates them in place)."""
        return {name[len("state.") :]: self.store.get(name) for name in self.store.names("state.")}

    @state.setter
    def state(self, tensors: dict[str, torch.Tensor]) -> None:
        for name in self.store.names("state."):
            self.store.set(name, None)
        for name, t in tensors.items():
            self.store.set(f"state.{name}", t)

    # --- transformers Cache API -------------------------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append the new keys/values [B, Hkv, q, D] with their positions and fresh per-token state; the held
        keys/values (the new ones included) for attention."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        bsz, hkv, q, _ = key_states.shape
        dev = key_states.device
        if q > 1 and self.pending_q and len(self.pending_mass) == len(self.pending_q):
            self.flush_observations()  # decoded tokens' masses, while they are still the last positions
        # the new tokens' positions, the policy's fresh state (zeros) and head mask (kept): written as one value per
        # name where it can be (a decode step), not made and copied (on a GPU each is a kernel launch per layer)
        fresh, filled = {"keys": key_states, "values": value_states}, {}
        if q == 1:
            filled["positions"] = (self.seen, torch.long)
        else:
            fresh["positions"] = torch.arange(self.seen, self.seen + q, device=dev).expand(bsz, hkv, q)
        for name in self.owner.policy.token_state:
            filled[f"state.{name}"] = (0.0, torch.float32)
        if self.owner.policy.masks_heads:
            filled["valid"] = (True, torch.bool)
        self.store.limit = self.owner.decode_limit(self.layer_idx)
        self.store.append(fresh, filled)
        self.seen += q
        self.last_q_len = q
        capture.hand_over(self.layer_idx, self)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.seen

    def held(self) -> int:
        return len(self.store) if self.is_initialized else 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        held = self.held()
        return held + query_length, self.seen - held

    def crop(self, tokens_to_remove: int) -> None:
        raise KVStoreError("an evicting cache cannot be cropped (evicted tokens are gone for good)")

    # --- called by the attention wrapper (kvstore.cache.capture) ----------------------------------------------------
    def head_mask(self, mask: torch.Tensor | None, query: torch.Tensor, impl: str) -> torch.Tensor | None:
        """Add the per-head mask of padded slots (head-masking policies) to the attention mask."""
        if self.valid is None or bool(self.valid.all()):
            return mask
        if impl.startswith("flash"):
            raise KVStoreError(
                f"policy {self.owner.config.policy} masks heads; use sdpa or eager attention, not {impl}"
            )
        bsz, hq, q, _ = query.shape
        kv = self.valid.shape[-1]
        allowed = self.valid.repeat_interleave(hq // self.valid.shape[1], dim=1)[:, :, None, :]  # [B, Hq, 1, kv]
        if mask is None:  # the causal mask sdpa would have implied: held keys are past, new ones causal
            mask = causal_mask(q, kv, query.device)
        if mask.dtype == torch.bool:
            return mask & allowed
        return mask.masked_fill(~allowed, torch.finfo(mask.dtype).min)

    def observes_by_sums(self) -> bool:
        """Whether the policy's statistics are attention sums over the held keys (Policy.observe_weightings) that
        an attention pass may hand over: it observes, says which sums, and heads are not masked."""
        policy = self.owner.policy
        return policy.observes and policy.observes_sums and self.valid is None

    def fused_weightings(self, q: int) -> torch.Tensor | None:
        """[k, q]: the weightings of a multi-token forward's q queries whose attention sums the policy observes,
        for the attention pass to compute them (kvstore.attention.prefill); None where the policy observes in
        its own pass: it does not observe by sums, or decoded queries are still pending without their masses (they
        are observed together)."""
        if not self.observes_by_sums() or self.pending_q:
            return None
        weightings = self.owner.policy.observe_weightings(self.score_context(with_prior=False, new=q))
        return weighting_coefs(weightings, q)

    def after_attention(
        self,
        query: torch.Tensor,
        scaling: float | None = None,
        sums: torch.Tensor | None = None,
        mass: torch.Tensor | None = None,
    ) -> None:
        """Record the window queries, let the policy observe and evict if this layer is over budget + slack.
        What the attention pass computed, where it did: `sums` [k, B, Hkv, T] for the weightings of
        `fused_weightings` (a multi-token forward), or `mass` [B, Hkv, T] (a decode step: what each held key
        received from the one query, observed with the next batch)."""
        self.query = query.detach()
        try:
            self._after_attention(scaling, sums, mass)
        finally:
            self.query = None

    def _after_attention(self, scaling: float | None, sums: torch.Tensor | None, mass: torch.Tensor | None) -> None:
        w = self.owner.policy.window
        query = self.query
        q = query[..., -w:, :]
        self.window_q = q if self.window_q is None else torch.cat([self.window_q, q], dim=-2)[..., -w:, :]
        self.scaling = scaling
        if sums is not None:  # observed in the attention pass (nothing was pending: fused_weightings flushed it)
            t0 = self.owner.timer()
            ctx = self.score_context(with_prior=False, new=query.shape[-2])
            ctx.sums = sums
            self.owner.policy.observe(ctx, query)
            self.stats.score_s += self.owner.timer() - t0
        elif self.owner.policy.observes:
            if mass is not None and len(self.pending_mass) == len(self.pending_q):
                self.pending_mass.append(mass)
            self.pending_q.append(query)  # joined once, when observed (not copied on every decoded token)
            if query.shape[-2] > 1 or len(self.pending_q) >= self.owner.config.observe_batch:
                self.flush_observations()
        if self.owner.should_evict(self):
            self.evict()

    @torch.inference_mode()
    def flush_observations(self) -> None:
        """Let the policy observe the queries still pending, in one call. A multi-token forward is observed at
        once; decoded tokens' statistics wait for `observe_batch` tokens (one call instead of one per token: on a GPU
        each call is dozens of kernel launches per layer) or the next multi-token forward, eviction step, saved state
        or dry-run plan, whichever comes first. The same sums as observing each forward alone: nothing is evicted
        while queries wait, and they sit at the last positions, where the statistics mask them causally. Where each
        decoded token's attention pass gave what the held keys received (`pending_mass`, one per pending query), the
        sums are those masses weighted, not a pass of their own."""
        if not self.pending_q:
            return
        pending = self.pending_q[0] if len(self.pending_q) == 1 else torch.cat(self.pending_q, dim=-2)
        masses = self.pending_mass if len(self.pending_mass) == len(self.pending_q) else None
        self.pending_q, self.pending_mass = [], []
        t0 = self.owner.timer()
        ctx = self.score_context(with_prior=False, new=pending.shape[-2])
        if masses is not None:
            ctx.sums = _weighted_masses(masses, self.owner.policy.observe_weightings(ctx), self.held())
        self.owner.policy.observe(ctx, pending)
        self.stats.score_s += self.owner.timer() - t0

    # --- eviction ---------------------------------------------------------------------------------------------
    def score_context(self, commit: bool = False, with_prior: bool = True, new: int | None = None) -> ScoreContext:
        """What a policy scores: the held keys, the window of recent queries, positions and per-token state
        (commit: this is a real eviction step, the policy may update its state; dry runs and benchmarks: False;
        with_prior: gather the memory-profile weights of the held tokens, which only scoring reads, not observe;
        new: how many of the last positions the observed queries are, default the last forward's)."""
        new = self.last_q_len if new is None else new
        cache, signals = self.owner, self.owner.signals
        return ScoreContext(
            keys=self.keys,
            queries=self.window_q,
            positions=self.positions,
            state=self.state,
            scaling=getattr(self, "scaling", None),
            layer_idx=self.layer_idx,
            valid=self.valid,
            seen=self.seen,
            max_elems=cache.config.score_chunk,
            commit=commit,
            prior=signals.prior_at(self.layer_idx, self.positions) if with_prior else None,
            prior_kind=signals.prior_kind,
            task_span=signals.task_span if with_prior else None,
            names=signals.name_tokens(self.positions) if with_prior and cache.policy.reads_names else None,
            reply_queries=signals.reply_queries(self.seen - new, self.seen),
            triton=cache.config.use_triton is not False,
            own=signals.reply_tokens(self.positions) if cache.policy.reads_own else None,
            last_own=signals.last_reply_tokens(self.positions) if cache.policy.reads_own else None,
        )

    def pinned(self) -> torch.Tensor | None:
        """[B, Hkv or 1, T] held slots inside the cache's protected spans (never evicted; SessionSignals.protect)."""
        mask = self.owner.signals.protected_mask(self.positions)
        if mask is None:
            return None
        return mask if self.owner.policy.per_head else mask[:, :1]

    def plan(self, budget_tokens: int | None = None):
        """Score and select down to `budget_tokens` (default: this layer's budget) without changing anything: the
        eviction plan (kvstore.cache.eviction.Plan), or None when nothing needs to go. Also what benchmarks time."""
        cache = self.owner
        self.flush_observations()
        budget = cache.layer_budget_tokens(self.layer_idx) if budget_tokens is None else budget_tokens
        ctx = self.score_context()
        scores = cache.policy.score(ctx)
        args = (self.keys.shape[1], cache.policy, cache.generator, self.valid, self.pinned(), ctx)
        return plan_eviction(scores, self.held(), budget, *args)

    def evict(self) -> None:
        """Score, select and gather: brings the layer back to its budget (docs/algorithm.md, "Setting")."""
        self.flush_observations()
        cache, t = self.owner, self.held()
        timer = cache.timer
        t0 = timer()
        ctx = self.score_context(commit=True)
        scores = cache.policy.score(ctx)
        t1 = timer()
        args = (self.keys.shape[1], cache.policy, cache.generator, self.valid, self.pinned(), ctx)
        plan = plan_eviction(scores, t, cache.layer_budget_tokens(self.layer_idx), *args)
        if plan is not None:
            self._apply(plan.keep, plan.valid, t)
        self.stats.score_s += t1 - t0
        self.stats.select_s += timer() - t1

    def _apply(self, keep: torch.Tensor, valid: torch.Tensor | None, t: int) -> None:
        before = self.effective_held()
        dropped = torch.ones(t, dtype=torch.bool, device=keep.device)
        dropped[keep[0, 0]] = False
        gone = self.positions[0, 0][dropped]
        if self.owner.policy.granularity == "block":
            gone = gone[:: self.owner.config.block]
        self.store.keep(keep)  # keys, values, positions, state (and valid, replaced next) in one place
        if self.owner.config.prefill_slack:  # a prefill's peak past the budget is given back once it is evicted,
            # down to what a prefill chunk needs without the slack (budget + chunk)
            self.store.trim(self.owner.layer_budget_tokens(self.layer_idx) + self.owner.config.chunk_size)
        if valid is not None:
            self.valid = valid
        self.stats.record(self.seen, gone, before - self.effective_held())

    def effective_held(self) -> float:
        """Tokens held per kv head (unmasked ones, averaged over heads, for head-masking policies)."""
        if self.valid is not None:
            return float(self.valid[0].sum()) / self.valid.shape[1]
        return float(self.held())

    def held_per_head(self) -> list[int]:
        """Tokens each kv head holds (batch row 0; unmasked ones for head-masking policies)."""
        if not self.is_initialized or self.keys is None:
            return []
        if self.valid is not None:
            return self.valid[0].sum(-1).tolist()
        return [self.held()] * self.keys.shape[1]

    def nbytes(self) -> int:
        """Bytes of the held keys and values."""
        if not self.is_initialized or self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

    def allocated_bytes(self) -> int:
        """Bytes the layer's storage takes (buffer capacity included, per-token state and positions too)."""
        return self.store.allocated_bytes() if self.is_initialized else 0


def _weighted_masses(masses: list[torch.Tensor], weightings: list[torch.Tensor | None], t: int) -> torch.Tensor:
    """[k, B, Hkv, t]: the decoded tokens' masses ([B, Hkv, T_i] each, T_i growing by one a token: the keys after
    a token are the later tokens', which it could not attend, so zero) summed with each weighting ([n] or None)."""
    stacked = torch.stack([torch.nn.functional.pad(m, (0, t - m.shape[-1])) for m in masses])  # [n, B, Hkv, T]
    coefs = weighting_coefs(weightings, len(masses))
    return torch.einsum("kn,nbht->kbht", coefs.to(stacked), stacked)
