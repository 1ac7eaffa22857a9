"""Timing on any device (no rich, no typer: the GPU report runs where only the ML stack is installed)."""

from __future__ import annotations

import torch


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously), so a timer measures it."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
