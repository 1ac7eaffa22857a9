"""Peak extra memory of a piece of torch code: CUDA's allocator statistics on a GPU; on CPU a dispatch-mode
tracker that counts the bytes of every new tensor storage an op returns while it is alive (views and in-place
results share their input's storage and are not counted; an op's internal scratch space is not seen). The CPU
figure is a lower bound: a storage is released when the tensor an op returned dies, even if a view keeps it alive.
Also the process's resident memory (`rss_mib`), which bench serve samples around its phases."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _PeakTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {_ptr(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and _ptr(t) not in inputs and t.device.type == "cpu":
                self._count(t)
        return out

    def _count(self, t: torch.Tensor) -> None:
        n = t.untyped_storage().nbytes()
        self.live += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(t, self._release, n)

    def _release(self, n: int) -> None:
        self.live -= n


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def peak_extra_bytes(fn: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Bytes allocated by fn() at its peak beyond what was allocated before it ran."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    tracker = _PeakTracker()
    with tracker:
        fn()
    return tracker.peak


def rss_mib() -> float | None:
    """This process's resident memory in MiB (Linux's /proc/self/status; None elsewhere)."""
    status = Path("/proc/self/status")
    if not status.is_file():
        return None
    line = next((x for x in status.read_text().splitlines() if x.startswith("VmRSS:")), None)
    return None if line is None else int(line.split()[1]) / 1024
