"""`nexus-agent bench gpu`: one prepared device run (decode speed, cache memory, scoring kernel) of dense vs
Nexus at 20% on a random-weight Qwen3-8B-shaped model; `--quick` runs the same machinery on tiny CPU shapes.
The run itself is `benchmarks.gpu_report` (also runnable without typer: `python -m benchmarks.gpu_report`)."""

from __future__ import annotations

from pathlib import Path

import typer

from benchmarks.gpu_report import make_config, parse_ints, run_and_report


def gpu(
    quick: bool = typer.Option(False, "--quick", help="tiny shapes on the CPU (checks the machinery in seconds)"),
    layers: int | None = typer.Option(None, help="decoder layers to build (default: all 36 of Qwen3-8B)"),
    prefill: int | None = typer.Option(None, help="prompt tokens (default 8192)"),
    decode: str | None = typer.Option(None, help="decode lengths to report, comma-separated (default 4096,8192)"),
    policies: str | None = typer.Option(None, help="comma-separated: dense (DynamicCache), full, nexus, ..."),
    density: float | None = typer.Option(None, help="budget of the evicting policies (default 0.2 of the prompt)"),
    max_decode_s: float | None = typer.Option(None, help="stop a decode run after this many seconds (default 240)"),
    kernel_lengths: str | None = typer.Option(None, help="held-key lengths of the kernel timing (default 8192,32768)"),
    json_path: Path | None = typer.Option(None, "--json", help="also write the result as JSON here"),
) -> None:
    """Decode throughput, per-step latency and cache memory of dense vs Nexus, and the scoring kernel's time."""
    names = tuple(p.strip() for p in policies.split(",") if p.strip()) if policies else None
    cfg = make_config(
        quick, layers=layers, prefill=prefill, decode_marks=parse_ints(decode), policies=names, density=density,
        max_decode_s=max_decode_s, kernel_lengths=parse_ints(kernel_lengths),
    )  # fmt: skip
    run_and_report(cfg, json_path)
