"""Token-aligned storage of one cache layer: named per-token tensors that grow and shrink together along the token
axis (dim 2): keys and values [B, Hkv, T, D], original positions [B, Hkv, T], the policy's per-token state and the
head mask of head-masking policies [B, Hkv, T].

Two engines hold the same contents (CacheConfig.engine):
- `BufferStore` ("static", the default): preallocated buffers [B, Hkv, C, ...] of capacity C >= T; new tokens are
  written in place at the end of the valid length, readers get views of the valid length [:, :, :T], and an eviction
  step compacts the kept tokens into the front of the same buffers (no reallocation). A buffer grows only when a
  write does not fit: to the layer's limit (budget + decode slack + 1, so decoding never reallocates) or, for a cache
  that does not evict in decode, by doubling. Names whose new tokens take one value (a decode step's position, a
  policy's fresh state, the head mask: `append`'s `filled`) are written with one fill, and a buffer's slots past the
  held tokens are kept zero for them, so a fresh zero state is not written at all: on a GPU every write is a kernel
  launch per layer and decode step (tests/kvstore/cache/test_launches.py counts them).
- `ConcatStore` ("eager", the earlier path): every write concatenates into new tensors, every eviction gathers into
  new tensors. Kept to compare against (tests/kvstore/cache/test_engine.py) and for whoever needs its exact behaviour.
"""

from __future__ import annotations

import torch

ROUND = 64  # buffer capacities are whole multiples of this many tokens


def make_store(engine: str) -> ConcatStore:
    """The storage of one layer for `engine` ("static" or "eager")."""
    return BufferStore() if engine == "static" else ConcatStore()


# names appended as one value per new token: name -> (value, dtype), e.g. a policy's fresh state (0.0, float32)
Filled = dict[str, tuple[float | int | bool, torch.dtype]]


def _materialized(fresh: dict[str, torch.Tensor], filled: Filled | None) -> dict[str, torch.Tensor]:
    """`filled` as tensors [B, H, q] (B, H, q and the device those of `fresh`)."""
    ref = next(iter(fresh.values()))
    return {n: ref.new_full(ref.shape[:3], v, dtype=d) for n, (v, d) in (filled or {}).items()}


def _expand(index: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """[B, H, K] token indices -> an index for gathering `t` along dim 2 (expanded over its trailing dims)."""
    return index.view(*index.shape, *([1] * (t.dim() - 3))).expand(*index.shape, *t.shape[3:])


def _layout(t: torch.Tensor) -> tuple:
    """Everything of a tensor but its token count: what a buffer must share with what it holds."""
    return t.shape[:2], t.shape[3:], t.dtype, t.device


class ConcatStore:
    """The concatenating engine: `tensors` holds each name's held tokens exactly (new tensors on every change)."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.limit: int | None = None  # BufferStore's growth limit (unused here)

    def __len__(self) -> int:
        return next(iter(self.tensors.values())).shape[2] if self.tensors else 0

    def get(self, name: str) -> torch.Tensor | None:
        """The held tokens of `name` ([B, H, T, ...]), or None when it is not stored."""
        return self.tensors.get(name)

    def names(self, prefix: str = "") -> list[str]:
        return [n for n in self.tensors if n.startswith(prefix)]

    def set(self, name: str, t: torch.Tensor | None) -> None:
        """Replace `name`'s held tokens by `t` (None: stop storing it)."""
        if t is None:
            self.tensors.pop(name, None)
        else:
            self.tensors[name] = t

    def append(self, fresh: dict[str, torch.Tensor], filled: Filled | None = None) -> None:
        """Add q new tokens to each name: fresh[name] is [B, H, q, ...] (a name not stored yet starts with it); each
        name of `filled` gets q tokens [B, H, q] of one value (its (value, dtype)), B and H those of `fresh`."""
        for name, t in (fresh | _materialized(fresh, filled)).items():
            old = self.tensors.get(name)
            self.tensors[name] = t.clone() if old is None else torch.cat([old, t], dim=2)

    def keep(self, index: torch.Tensor) -> None:
        """Keep the held tokens `index` [B, H, K] (ascending) of every name, in that order."""
        self.tensors = {n: t.gather(2, _expand(index, t)) for n, t in self.tensors.items()}

    def trim(self, capacity: int) -> None:
        """Give back room past `capacity` tokens (BufferStore; here every tensor is already exact)."""

    def allocated_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class BufferStore(ConcatStore):
    """The in-place engine: `tensors` holds buffers [B, H, C, ...]; the first `length` tokens are held."""

    def __init__(self) -> None:
        super().__init__()
        self.length = 0
        # names of `filled` appends whose slots past the held tokens are all zero, so a new token whose value is 0
        # (a policy's fresh per-token state) needs no write at all: one kernel launch fewer per name and decode step
        self.zero_tail: set[str] = set()

    def __len__(self) -> int:
        return self.length

    def get(self, name: str) -> torch.Tensor | None:
        buf = self.tensors.get(name)
        return None if buf is None else buf[:, :, : self.length]

    def set(self, name: str, t: torch.Tensor | None) -> None:
        """Replace `name`'s held tokens by a copy of `t` (so later in-place writes never reach the caller's tensor);
        the held length becomes t's (every name is set to the same length by whoever sets them)."""
        self.zero_tail.discard(name)  # its tail is what the buffer held: zeroed again at its next `filled` append
        if t is None:
            self.tensors.pop(name, None)
            self.length = self.length if self.tensors else 0
            return
        buf = self.tensors.get(name)
        n = t.shape[2]
        if buf is None or buf.shape[2] < n or _layout(buf) != _layout(t):
            buf = t.new_empty(*t.shape[:2], self._capacity(n, 0), *t.shape[3:])
            self.tensors[name] = buf
        buf[:, :, :n].copy_(t)
        self.length = n

    def append(self, fresh: dict[str, torch.Tensor], filled: Filled | None = None) -> None:
        ref = next(iter(fresh.values()))
        n, q = self.length, ref.shape[2]
        for name, t in fresh.items():
            self._room(name, n, q, t)[:, :, n : n + q].copy_(t)
        for name, (value, dtype) in (filled or {}).items():
            buf = self._room(name, n, q, ref, dtype)
            if name not in self.zero_tail:  # a new name, or one `set` replaced: from now on its tail stays zero
                buf[:, :, n:].zero_()
                self.zero_tail.add(name)
            if value != 0:
                buf[:, :, n : n + q].fill_(value)
        self.length = n + q

    def _room(self, name: str, n: int, q: int, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`name`'s buffer with room for n + q tokens: as it is, grown, or new (a name that starts now: the first
        write of a layer) in `like`'s layout [B, H, any, ...] and dtype, or [B, H, any] of `dtype` when given (a
        `filled` name)."""
        buf = self.tensors.get(name)
        if buf is None:
            trailing = like.shape[3:] if dtype is None else ()
            buf = like.new_empty(*like.shape[:2], self._capacity(n + q, 0), *trailing, dtype=dtype or like.dtype)
            self.tensors[name] = buf
        elif buf.shape[2] < n + q:
            buf = self.tensors[name] = self._grown(buf, n, n + q, zero=name in self.zero_tail)
        return buf

    def keep(self, index: torch.Tensor) -> None:
        k = index.shape[-1]
        for name, buf in self.tensors.items():
            held = buf[:, :, : self.length]
            buf[:, :, :k].copy_(held.gather(2, _expand(index, held)))  # gathered first: the regions overlap
            if name in self.zero_tail:
                buf[:, :, k : self.length].zero_()
        self.length = k

    def trim(self, capacity: int) -> None:
        """Reallocate every buffer with room for more than `capacity` tokens (at least the held ones and the layer's
        limit, whole multiples of ROUND) to that: what a prefill_slack peak grew stays allocated no longer than that
        prefill, and decoding still never reallocates."""
        capacity = -(-max(capacity, self.length, self.limit or 0) // ROUND) * ROUND
        for name, buf in self.tensors.items():
            if buf.shape[2] > capacity:
                new = buf.new_zeros(*buf.shape[:2], capacity, *buf.shape[3:])  # zeros: a zero_tail stays zero
                new[:, :, : self.length].copy_(buf[:, :, : self.length])
                self.tensors[name] = new

    def _grown(self, buf: torch.Tensor, n: int, need: int, zero: bool = False) -> torch.Tensor:
        """A larger buffer holding buf's first n tokens (zeros after them when `zero`)."""
        make = buf.new_zeros if zero else buf.new_empty
        new = make(*buf.shape[:2], self._capacity(need, buf.shape[2]), *buf.shape[3:])
        new[:, :, :n].copy_(buf[:, :, :n])
        return new

    def _capacity(self, need: int, current: int) -> int:
        """Tokens a buffer is given when `need` do not fit in `current`: at least the layer's limit (budget + decode
        slack + 1: decoding then never reallocates) when it evicts in decode, else double; whole multiples of ROUND."""
        grow = max(need, self.limit) if self.limit else max(need, 2 * current)
        return -(-grow // ROUND) * ROUND
