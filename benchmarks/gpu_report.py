"""The device benchmark as one plain run: `python -m benchmarks.gpu_report [options]` (what scripts/gpu_bench.sh
calls, needing only torch, transformers and triton) or `nexus-agent bench gpu`; its options and their help are in
benchmarks/gpu_options.py."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu_measure import GpuBenchConfig, build_model, kernel_rows, run_policy, warm_up_kernel
from benchmarks.gpu_options import parse
from benchmarks.machine import machine
from benchmarks.shapes import SHAPES
from kvstore.attention.dispatch import triton_error, use_triton
from kvstore.cache.config import parse_policy_spec
from kvstore.errors import KVStoreError
from kvstore.models.registry import pick_attention


def make_config(quick: bool = False, **overrides: Any) -> GpuBenchConfig:
    """The full device config (or the `quick` CPU one) with the options that were given (None = default); every
    policy spec is checked here, so a misspelt one fails before the model is built, not minutes into a device run."""

    cfg = GpuBenchConfig.quick() if quick else GpuBenchConfig()
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    for spec in cfg.policies:
        if spec != "dense":  # transformers' DynamicCache, not a policy
            parse_policy_spec(spec)
    return cfg


def parse_ints(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise KVStoreError(f"expected comma-separated integers, got {text!r}") from None


def environment(cfg: GpuBenchConfig, attn: str, layers: int) -> dict[str, Any]:
    """What ran: versions, device, attention kernel, scoring path, and how many of the model's layers were built."""

    triton_version = None
    if importlib.util.find_spec("triton") is not None:
        import triton  # lazy: triton is optional

        triton_version = triton.__version__
    return machine(cfg.device) | {
        "triton": triton_version,
        "attn_implementation": attn,
        "scoring_path": "triton" if use_triton(torch.device(cfg.device)) else "torch",
        "triton_error": triton_error(),
        "layers": layers,
        "layers_of_model": cfg.shapes["num_hidden_layers"],
        "dtype": cfg.dtype,
    }


def run_bench(cfg: GpuBenchConfig) -> dict[str, Any]:
    """Build the model, run every policy, time the scoring kernel; returns the JSON-able result."""

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise KVStoreError("no CUDA GPU here: run `nexus-agent bench gpu --quick` for the CPU check of the machinery")
    if cfg.cpu_threads:
        torch.set_num_threads(cfg.cpu_threads)
    start = time.perf_counter()
    attn = pick_attention(cfg.device)
    model, layers = build_model(cfg, attn)
    weights = torch.cuda.memory_allocated() / 2**20 if cfg.device.startswith("cuda") else None
    if use_triton(torch.device(cfg.device)):
        warm_up_kernel(cfg)
    result: dict[str, Any] = {"config": asdict(cfg), "env": environment(cfg, attn, layers), "weights_mib": weights}
    result["runs"] = []
    for policy in cfg.policies:
        result["runs"].append(run_policy(model, policy, cfg))
        print(f"  {policy}: done at {time.perf_counter() - start:.0f}s", flush=True)
    del model
    if cfg.device.startswith("cuda"):
        torch.cuda.empty_cache()
    result["kernel"] = kernel_rows(cfg, use_triton(torch.device(cfg.device)))
    result["elapsed_s"] = time.perf_counter() - start
    return result


def _fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def text_table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def decode_table(result: dict[str, Any]) -> str:
    """Side by side per decode mark: throughput, latency, cache memory and peak memory, with ratios to dense."""
    header = ["policy", "decode", "tok/s", "x dense", "ms/step", "p50 tail ms", "cache MiB", "x smaller", "held/layer"]
    header.append("peak MiB in span")
    dense = {m["decode"]: m for r in result["runs"] if r["policy"] == "dense" for m in r["marks"]}
    rows = []
    for run in result["runs"]:
        for m in run["marks"]:
            base = dense.get(m["decode"])
            speed = m["tok_s"] / base["tok_s"] if base else None
            smaller = base["cache_mib"] / m["cache_mib"] if base and m["cache_mib"] else None
            rows.append([
                run["policy"], str(m["decode"]), _fmt(m["tok_s"]), _fmt(speed, ".2f"), _fmt(m["ms_step_mean"], ".2f"),
                _fmt(m["ms_step_p50_tail"], ".2f"), _fmt(m["cache_mib"]), _fmt(smaller, ".1f"),
                _fmt(m["tokens_held_layer0"], ".0f"), _fmt(m["peak_mib_span"]),
            ])  # fmt: skip
        if "stopped_at" in run:
            rows.append([run["policy"], f"stopped at {run['stopped_at']} (max_decode_s)"] + [""] * 8)
    title = f"decode after a {result['config']['prefill']}-token prefill (batch 1, greedy, synchronized steps)"
    return text_table(title, header, rows)


def kernel_table(result: dict[str, Any]) -> str:
    header = ["T", "torch ms", "triton ms", "speedup", "torch peak MiB", "triton peak MiB", "max |diff|"]
    rows = [
        [str(r["T"]), _fmt(r["torch_ms"], ".3f"), _fmt(r.get("triton_ms"), ".3f"), _fmt(r.get("speedup"), ".2f"),
         _fmt(r["torch_peak_mib"]), _fmt(r.get("triton_peak_mib")), _fmt(r.get("max_abs_diff"), ".2e")]
        for r in result["kernel"]
    ]  # fmt: skip
    table = text_table("window block scores of one layer: fused Triton kernel vs torch path", header, rows)
    errors = [f"T={r['T']}: triton failed: {r['triton_error']}" for r in result["kernel"] if "triton_error" in r]
    return "\n".join([table, *errors])


def report(result: dict[str, Any]) -> str:
    """The whole result as text: environment, decode table, per-run notes, kernel table."""
    env = result["env"]
    out = [", ".join(f"{k}={v}" for k, v in env.items())]
    if env["layers"] != env["layers_of_model"]:
        out.append(
            f"NOTE: {env['layers']} of the model's {env['layers_of_model']} decoder layers were built (--layers, to "
            "fit the time); per-step time and cache memory scale with the layer count, the ratios do not"
        )
    out += ["", decode_table(result), ""]
    for run in result["runs"]:
        extra = f", {run['eviction_steps']} eviction steps, score {run['score_s']:.2f}s" if "score_s" in run else ""
        out.append(
            f"{run['policy']}: prefill {run['prefill_s']:.2f}s, cache after prefill {run['prefill_cache_mib']:.1f} "
            f"MiB, prefill peak {_fmt(run['prefill_peak_mib'])} MiB above weights{extra}"
        )
    out += ["", kernel_table(result), ""]
    out.append(f"weights {_fmt(result['weights_mib'])} MiB; total {result['elapsed_s']:.0f}s")
    return "\n".join(out)


def run_and_report(cfg: GpuBenchConfig, json_path: Path | None) -> dict[str, Any]:
    result = run_bench(cfg)
    print(report(result), flush=True)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {json_path}")
    return result


def run(argv: list[str] | None = None, prog: str = "python -m benchmarks.gpu_report") -> None:
    """The options of `nexus-agent bench gpu` (benchmarks/gpu_options.py), parsed and run; KVStoreError on a bad
    setup."""
    run_parsed(parse(argv, prog))


def run_parsed(a: argparse.Namespace) -> None:
    """A run of the parsed options."""
    policies = tuple(x.strip() for x in a.policies.split(";" if ";" in a.policies else ",")) if a.policies else None
    shapes = dict(SHAPES[a.shape]) if a.shape else None
    cfg = make_config(
        a.quick, shapes=shapes, layers=a.layers, prefill=a.prefill, decode_marks=parse_ints(a.decode),
        policies=policies, density=a.density, max_decode_s=a.max_decode_s, kernel_lengths=parse_ints(a.kernel_lengths),
    )  # fmt: skip
    run_and_report(cfg, a.json)


def main() -> None:
    """`python -m benchmarks.gpu_report [options]`: the run, with a bad setup as one line (exit 2)."""
    try:
        run()
    except KVStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
