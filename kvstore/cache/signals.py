"""What a session tells its cache, as one object the cache holds (`EvictingCache.signals`): the memory profile's
weights over the opening, the spans never evicted, the agent's own replies, and observers of attention calls.
Policies see what they need of it through ScoreContext (prior, reply_queries, own, names); the cache pins the protected
spans."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kvstore.errors import KVStoreError


def span_mask(positions: torch.Tensor, spans) -> torch.Tensor:
    """Bool mask over `positions` (original token positions, any shape): inside any [start, end) of `spans`."""
    mask = torch.zeros_like(positions, dtype=torch.bool)
    for start, end in spans:
        mask |= (positions >= start) & (positions < end)
    return mask


@dataclass(eq=False)
class SessionSignals:
    """The session's side of a cache (kvstore.session.session sets it; kvstore.cache.snapshot saves it)."""

    shape: tuple[int, int]  # (layers, kv heads) of the cache: what a profile's weights must match
    device: str = "cpu"  # where the cache's tensors live (the profile's weights are moved there)
    prior: torch.Tensor | None = None  # [L, Hkv, P] memory-profile weights by position over the opening (0: none)
    prior_kind: str = "profile"  # what gave `prior`: a matched "profile", or a profile's "tokens" prior
    # (kvstore.profiles.tokens) for an opening no profile matched
    protected: list[tuple[int, int]] = field(default_factory=list)  # [start, end) positions never evicted
    replies: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of the agent's earlier replies
    names: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of the code names of the task's
    # text: a matched opening's task span, else the first user message (kvstore.profiles.names)
    reply_from: int | None = None  # where the reply being generated or teacher-forced starts (None: none runs)
    # called with each layer right after attention used the new tokens, before its eviction decision (benchmarks
    # sample memory here; calibration records attention); an observer must not change the layer
    observers: list[Callable[[Any], None]] = field(default_factory=list)
    _reply_mask: tuple[tuple, torch.Tensor | None] | None = field(default=None, init=False, repr=False)
    _task_span: tuple[torch.Tensor, tuple[int, int] | None] | None = field(default=None, init=False, repr=False)
    _names_table: tuple[list, torch.Tensor] | None = field(default=None, init=False, repr=False)

    def carried_over(self) -> SessionSignals:
        """The same spans and profile weights for the session's next cache (re-prefill); observers stay behind."""
        return SessionSignals(
            self.shape,
            self.device,
            self.prior,
            self.prior_kind,
            list(self.protected),
            list(self.replies),
            list(self.names),
            self.reply_from,
        )

    # --- memory profile -------------------------------------------------------------------------------------------
    def set_prior(self, weights: torch.Tensor, kind: str = "profile") -> None:
        """Weights [L, Hkv, P] for the tokens at positions [0, P) (kvstore.profiles.profile.MemoryProfile.prior_for,
        or kind "tokens": kvstore.profiles.tokens.TokenPrior.prior_for): what a memory profile says replies need of
        the opening; policies that use it see it as ScoreContext.prior."""
        if weights.dim() != 3 or tuple(weights.shape[:2]) != self.shape:
            raise KVStoreError(
                f"prior weights must be [{self.shape[0]}, {self.shape[1]}, P], got {tuple(weights.shape)}"
            )
        self.prior = weights.detach().float().to(self.device)
        self.prior_kind = kind

    @property
    def task_span(self) -> tuple[int, int] | None:
        """[start, end) of the task's own text in an opening a profile matched: the first run of positions its
        weights leave at 0 (between the matched prefix and suffix); None without a matched profile or such a run."""
        if self.prior is None or self.prior_kind != "profile":
            return None
        if self._task_span is None or self._task_span[0] is not self.prior:
            free = (self.prior[0, 0] == 0).int()
            span = None
            if bool(free.any()):
                start = int(free.argmax())
                rest = 1 - free[start:]
                span = (start, start + (int(rest.argmax()) if bool(rest.any()) else len(rest)))
            self._task_span = (self.prior, span)
        return self._task_span[1]

    def prior_at(self, layer_idx: int, positions: torch.Tensor | None) -> torch.Tensor | None:
        """The prior weights [B, Hkv, T] of the held tokens at `positions` (0 past the opening), or None."""
        if self.prior is None or positions is None:
            return None
        w = self.prior[layer_idx].to(positions.device)  # [Hkv, P]
        inside = positions < w.shape[-1]
        idx = positions.clamp_max(w.shape[-1] - 1)
        return torch.where(inside, w.expand(positions.shape[0], -1, -1).gather(-1, idx), 0.0)

    def name_tokens(self, positions: torch.Tensor) -> torch.Tensor | None:
        """[B, Hkv, T] bool: which held tokens are code names of the task's text (None: no name was found). Read
        from a table by position, made once per list of names: a task names dozens, and each eviction step of each
        layer asks."""
        if not self.names:
            return None
        if self._names_table is None or self._names_table[0] is not self.names:
            table = torch.zeros(max(end for _, end in self.names), dtype=torch.bool)
            for start, end in self.names:
                table[start:end] = True
            self._names_table = (self.names, table.to(self.device))
        table = self._names_table[1].to(positions.device)
        return (positions < len(table)) & table[positions.clamp_max(len(table) - 1)]

    # --- protected spans ------------------------------------------------------------------------------------------
    def protect(self, start: int, end: int) -> None:
        """Never evict the tokens at positions [start, end) (e.g. a system prompt); they count in the budget."""
        if end > start:
            self.protected.append((int(start), int(end)))

    def protected_mask(self, positions: torch.Tensor) -> torch.Tensor | None:
        """[B, Hkv, T] bool: which held tokens (by original position) are protected; None when nothing is."""
        return span_mask(positions, self.protected) if self.protected else None

    # --- the agent's replies ----------------------------------------------------------------------------------------
    def add_reply(self, start: int, end: int) -> None:
        """Mark positions [start, end) as a reply of the agent (spans kept in order, overlapping ones merged)."""
        if end <= start:
            return
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.replies, (int(start), int(end))]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.replies = merged

    def reply_queries(self, start: int, end: int) -> torch.Tensor | None:
        """[end - start] bool: which queries at positions [start, end) are the agent's reply's (None: none are).
        Worked out once per forward, however many layers ask."""
        key = (start, end, self.reply_from, tuple(self.replies))
        if self._reply_mask is not None and self._reply_mask[0] == key:
            return self._reply_mask[1]
        mask = None
        spans = [(a, b) for a, b in self.replies if a < end and b > start]
        if self.reply_from is not None and self.reply_from < end:
            spans.append((self.reply_from, end))
        if spans:
            mask = span_mask(torch.arange(start, end), spans)  # kept on the CPU: a policy reads it without a sync
        self._reply_mask = (key, mask)
        return mask

    def last_reply_tokens(self, positions: torch.Tensor) -> torch.Tensor | None:
        """[B, Hkv, T] bool: which held tokens the agent's latest finished reply wrote (None before the first)."""
        return span_mask(positions, self.replies[-1:]) if self.replies else None

    def reply_tokens(self, positions: torch.Tensor) -> torch.Tensor:
        """[B, Hkv, T] bool: which held tokens (by original position) the agent's replies wrote, the one running now
        included (generation prompts too: they are the replies' tokens here as their queries are in reply_queries)."""
        running = [(self.reply_from, math.inf)] if self.reply_from is not None else []
        return span_mask(positions, [*self.replies, *running])
