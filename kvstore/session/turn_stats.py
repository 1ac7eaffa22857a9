"""What one turn of a session gives back: its statistics (`TurnStats`, also kept in trajectories and reports) and,
for a generated reply, the reply (`Reply`); and a turn still open (`OpenTurn`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple


@dataclass
class TurnStats:
    """What one turn (a `generate` or `prefill` call) did; token counts per layer are means over layers."""

    prefill_tokens: int  # tokens run through the model before decoding (the whole history under re-prefill)
    generated_tokens: int  # tokens the model generated
    evicted_tokens: int  # tokens evicted during the turn, per layer
    held_tokens: int  # tokens the cache holds after the turn, per layer
    held_bytes: int  # bytes of keys, values and their bookkeeping held after the turn (all layers)
    prefill_s: float  # seconds of prefill (eviction included)
    decode_s: float  # seconds of decoding (eviction included)
    evict_s: float  # seconds of prefill_s + decode_s spent scoring and selecting what to evict
    tokens_per_s: float  # generated tokens per second of decoding (0 when nothing was generated)
    turn: int = 0  # 1-based index of the turn in the session
    history_tokens: int = 0  # tokens in the conversation after the turn (positions used)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnStats | None:
        """The stats a dict records (extra keys ignored); None when it lacks a field (e.g. another backend's)."""
        names = [f.name for f in fields(cls)]
        if not set(names) <= set(data):
            return None
        return cls(**{k: data[k] for k in names})

    def summary(self) -> str:
        """One line for the terminal."""
        return (
            f"turn {self.turn}: prefill {self.prefill_tokens} tok {self.prefill_s:.2f}s, "
            f"generated {self.generated_tokens} tok ({self.tokens_per_s:.1f} tok/s), "
            f"cache {self.held_tokens} tok/layer {self.held_bytes / 2**20:.1f} MiB, "
            f"evicted {self.evicted_tokens} tok/layer ({self.evict_s:.2f}s), history {self.history_tokens} tok"
        )


@dataclass
class Reply:
    """A generated reply."""

    text: str  # the decoded reply (its end-of-turn token excluded)
    token_ids: list[int]  # the raw generated token ids, as they are in the history and the cache
    finish_reason: str  # "stop" (a stop string), "eos" (end-of-turn token) or "length" (max_new_tokens / context)
    stats: TurnStats


class OpenTurn(NamedTuple):
    """A turn begun by `Session.open_turn`, closed by `Session.close_turn`."""

    before: dict  # the cache's statistics before the turn
    start: float  # when it began (Session.now)
    pending: int  # tokens it prefills
