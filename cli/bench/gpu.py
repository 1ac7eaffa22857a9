"""`nexus-agent bench gpu`: one prepared device run (decode speed, cache memory, scoring kernel) of dense vs
Nexus at 20% on a random-weight Qwen3-8B-shaped model; `--quick` runs the same machinery on tiny CPU shapes."""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table

from cli.app import bench_app
from cli.bench.gpu_measure import GpuBenchConfig, build_model, kernel_rows, run_policy
from kvstore.errors import KVStoreError

console = Console(width=None if sys.stdout.isatty() else 150)  # logs of the device run keep whole tables


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise KVStoreError(f"expected comma-separated integers, got {text!r}") from None


def environment(cfg: GpuBenchConfig, attn: str, layers: int) -> dict[str, Any]:
    """What ran: versions, device, attention kernel, scoring path, and how many of the model's layers were built."""
    import transformers

    from kvstore.kernels import use_triton

    triton_version = None
    if importlib.util.find_spec("triton") is not None:
        import triton

        triton_version = triton.__version__
    cuda = cfg.device.startswith("cuda")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "triton": triton_version,
        "device": torch.cuda.get_device_name(cfg.device) if cuda else platform.processor() or "cpu",
        "attn_implementation": attn,
        "scoring_path": "triton" if use_triton(torch.device(cfg.device)) else "torch",
        "layers": layers,
        "layers_of_model": cfg.shapes["num_hidden_layers"],
        "dtype": cfg.dtype,
    }


def run_bench(cfg: GpuBenchConfig) -> dict[str, Any]:
    """Build the model, run every policy, time the scoring kernel; returns the JSON-able result."""
    from kvstore.kernels import use_triton
    from kvstore.models import pick_attention

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise KVStoreError("no CUDA GPU here: run `nexus-agent bench gpu --quick` for the CPU check of the machinery")
    start = time.perf_counter()
    attn = pick_attention(cfg.device)
    model, layers = build_model(cfg, attn)
    weights = torch.cuda.memory_allocated() / 2**20 if cfg.device.startswith("cuda") else None
    result: dict[str, Any] = {"config": asdict(cfg), "env": environment(cfg, attn, layers), "weights_mib": weights}
    result["runs"] = [run_policy(model, policy, cfg) for policy in cfg.policies]
    del model
    if cfg.device.startswith("cuda"):
        torch.cuda.empty_cache()
    result["kernel"] = kernel_rows(cfg, use_triton(torch.device(cfg.device)))
    result["elapsed_s"] = time.perf_counter() - start
    return result


def _fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def decode_table(result: dict[str, Any]) -> Table:
    """Side by side per decode mark: throughput, latency, cache memory and peak memory, with ratios to dense."""
    table = Table(title=f"decode after a {result['config']['prefill']}-token prefill (batch 1, greedy)")
    cols = ("policy", "decode", "tok/s", "x dense", "ms/step", "p50 tail ms", "cache MiB", "held/layer", "peak MiB")
    for col in cols:
        table.add_column(col, justify="right")
    dense = {m["decode"]: m for r in result["runs"] if r["policy"] == "dense" for m in r["marks"]}
    for run in result["runs"]:
        for m in run["marks"]:
            base = dense.get(m["decode"])
            ratio = m["tok_s"] / base["tok_s"] if base else None
            table.add_row(
                run["policy"], str(m["decode"]), _fmt(m["tok_s"]), _fmt(ratio, ".2f"), _fmt(m["ms_step_mean"], ".2f"),
                _fmt(m["ms_step_p50_tail"], ".2f"), _fmt(m["cache_mib"]), _fmt(m["tokens_held_layer0"], ".0f"),
                _fmt(m["peak_mib_span"]),
            )  # fmt: skip
        if "stopped_at" in run:
            table.add_row(run["policy"], f"stopped at {run['stopped_at']} (max_decode_s)", *[""] * 7)
    return table


def kernel_table(result: dict[str, Any]) -> Table:
    table = Table(title="window block scores (one layer): fused Triton kernel vs torch path")
    for col in ("T", "torch ms", "triton ms", "speedup", "torch peak MiB", "triton peak MiB", "max |diff|"):
        table.add_column(col, justify="right")
    for r in result["kernel"]:
        table.add_row(
            str(r["T"]), _fmt(r["torch_ms"], ".3f"), _fmt(r.get("triton_ms"), ".3f"), _fmt(r.get("speedup"), ".2f"),
            _fmt(r["torch_peak_mib"]), _fmt(r.get("triton_peak_mib")), _fmt(r.get("max_abs_diff"), ".2e"),
        )  # fmt: skip
    return table


def report(result: dict[str, Any]) -> None:
    env = result["env"]
    console.print(", ".join(f"{k}={v}" for k, v in env.items()), highlight=False)
    if env["layers"] != env["layers_of_model"]:
        console.print(
            f"[yellow]{env['layers']} of the model's {env['layers_of_model']} layers were built (--layers, to fit "
            "the time); per-step costs scale with the layer count, the ratios do not[/yellow]"
        )
    console.print(decode_table(result))
    for run in result["runs"]:
        extra = f", {run['eviction_steps']} eviction steps, score {run['score_s']:.2f}s" if "score_s" in run else ""
        console.print(
            f"{run['policy']}: prefill {run['prefill_s']:.2f}s, cache after prefill "
            f"{run['prefill_cache_mib']:.1f} MiB, prefill peak {_fmt(run['prefill_peak_mib'])} MiB{extra}",
            highlight=False,
        )
    console.print(kernel_table(result))
    console.print(f"weights {_fmt(result['weights_mib'])} MiB; total {result['elapsed_s']:.0f}s", highlight=False)


@bench_app.command("gpu")
def gpu(
    quick: bool = typer.Option(False, "--quick", help="tiny shapes on the CPU (checks the machinery in seconds)"),
    layers: int | None = typer.Option(None, help="decoder layers to build (default: all 36 of Qwen3-8B)"),
    prefill: int | None = typer.Option(None, help="prompt tokens (default 8192)"),
    decode: str | None = typer.Option(None, help="decode lengths to report, comma-separated (default 4096,8192)"),
    policies: str | None = typer.Option(None, help="comma-separated: dense (DynamicCache), full, nexus, ..."),
    density: float = typer.Option(0.2, help="budget of the evicting policies (fraction of the prompt)"),
    max_decode_s: float | None = typer.Option(None, help="stop a decode run after this many seconds (default 240)"),
    kernel_lengths: str | None = typer.Option(None, help="held-key lengths of the kernel timing (default 8192,32768)"),
    json_path: Path | None = typer.Option(None, "--json", help="also write the result as JSON here"),
) -> None:
    """Decode throughput, per-step latency and cache memory of dense vs Nexus, and the scoring kernel's time."""
    cfg = GpuBenchConfig.quick() if quick else GpuBenchConfig()
    changes: dict[str, Any] = {"layers": layers, "prefill": prefill, "max_decode_s": max_decode_s}
    changes |= {"decode_marks": decode and _ints(decode), "kernel_lengths": kernel_lengths and _ints(kernel_lengths)}
    changes["policies"] = policies and tuple(p.strip() for p in policies.split(",") if p.strip())
    cfg = replace(cfg, density=density, **{k: v for k, v in changes.items() if v})
    result = run_bench(cfg)
    report(result)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, default=str))
        console.print(f"wrote {json_path}", highlight=False)
