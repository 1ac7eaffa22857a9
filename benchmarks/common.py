"""Small helpers shared by the benchmark commands: timing, tiny models, JSON output, rich tables."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmarks.timing import sync
from kvstore.models.tiny import tiny_model

console = Console()


def median_time(fn: Callable[[], Any], repeats: int, device: torch.device | str = "cpu", warmup: int = 1) -> float:
    """Median wall time of fn() in seconds over `repeats` runs (after `warmup` untimed runs)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tiny_qwen3(max_positions: int = 40_000, layers: int = 4, dtype: torch.dtype = torch.float32):
    """A random-weight Qwen3 of tiny width (fast to build, any context length)."""

    shapes = dict(hidden_size=128, head_dim=32, vocab_size=1024, max_positions=max_positions)
    return tiny_model("qwen3", layers=layers, dtype=dtype, **shapes)


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)
    console.print(f"wrote {path}")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c not in ("model", "policy", "protocol", "task") else "left")
    for r in rows:
        t.add_row(*[f"{v:.3f}" if isinstance(v, float) else escape(str(v)) for v in r])  # a label's `[...]` is text
    return t
