"""Per-layer eviction statistics, and the cheap survival record (when each evicted block left the cache)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerStats:
    evicted: float = 0.0  # tokens evicted (per kv head; heads of per-head policies are averaged)
    eviction_steps: int = 0
    score_s: float = 0.0  # time computing scores
    select_s: float = 0.0  # time selecting + gathering
    # survival record: for each eviction step, (tokens seen then, original start positions of the evicted blocks
    # of batch 0 / kv head 0; token policies record every evicted token's position)
    events: list[tuple[int, torch.Tensor]] = field(default_factory=list)

    def record(self, seen: int, evicted_positions: torch.Tensor, n_evicted: float) -> None:
        self.events.append((seen, evicted_positions.to("cpu", torch.int32)))
        self.evicted += n_evicted
        self.eviction_steps += 1

    def counters(self) -> dict[str, float]:
        return {
            "evicted": self.evicted,
            "eviction_steps": self.eviction_steps,
            "score_s": self.score_s,
            "select_s": self.select_s,
        }

    def events_tensor(self) -> torch.Tensor:
        """All events as one [E, 2] int64 tensor of (seen at eviction, evicted start position)."""
        rows = [torch.stack([torch.full_like(p, s, dtype=torch.int64), p.long()], -1) for s, p in self.events]
        return torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.int64)

    @classmethod
    def restore(cls, counters: dict[str, float], events: torch.Tensor) -> LayerStats:
        st = cls(counters["evicted"], int(counters["eviction_steps"]), counters["score_s"], counters["select_s"])
        for s in events[:, 0].unique(sorted=True).tolist():
            st.events.append((int(s), events[events[:, 0] == s, 1].to(torch.int32)))
        return st
