"""`nexus-agent bench speed`: decode throughput and per-step latency, Nexus at 20% density beside the full cache, at
growing contexts; prefill peak memory with chunked eviction vs one-shot prefill vs no eviction; cache bytes held.

Everything is measured side by side in one run on one model, so the ratios compare like with like. Peak cache
bytes are sampled inside every forward, at each layer's attention, after the new tokens were appended and before
that layer evicts (the true high-water mark of held keys/values). With --rss each memory config also runs in a fresh
subprocess that resets and then reports its resident-set high-water mark (VmHWM: weights, activations, cache).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

import kvstore
from benchmarks.common import console, table, tiny_qwen3, write_json
from kvstore.defaults import DEFAULT_MODEL
from kvstore.errors import KVStoreError
from kvstore.models.registry import load_model


@dataclass
class SpeedConfig:
    """What one speed run measures."""

    model: str = DEFAULT_MODEL  # registry name / HF id / local dir, or "tiny" (random 4-layer Qwen3)
    contexts: tuple[int, ...] = (1024, 2048, 4096, 7168)  # prompt lengths (within the model's positions)
    density: float = 0.2  # Nexus density
    steps: int = 64  # decoded tokens per measurement (>= 2 blocks so decode-time eviction is included)
    chunk_size: int = 512  # prefill chunk with eviction
    memory_context: int = 7168  # prompt length of the memory comparison
    threads: int = 1  # torch CPU threads
    rss: bool = True  # also measure each memory config's RSS high-water mark in a fresh subprocess


def load(name: str, max_positions: int = 8192):
    """(model, vocab size): the registry model, or a random tiny Qwen3 for "tiny"."""
    if name == "tiny":
        model = tiny_qwen3(max_positions=max_positions, layers=4)
        return model, model.config.vocab_size

    model, tok, _ = load_model(name)
    return model, len(tok)


def prompt(context: int, vocab: int, device) -> torch.Tensor:
    """A fixed random prompt [1, context] (speed and memory do not depend on the text)."""
    return torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(context)).to(device)


def track_peak(cache) -> list[int]:
    """Sample the cache's total held bytes at every layer's attention, before that layer may evict."""
    peak = [0]

    def probe(layer):
        peak[0] = max(peak[0], sum(lay.nbytes() for lay in cache.layers))

    cache.add_observer(probe)
    return peak


@torch.inference_mode()
def decode_pair(model, density: float, context: int, steps: int, chunk: int, vocab: int) -> list[dict]:
    """Prefill the same prompt on a full and a Nexus cache, then decode `steps` greedy tokens on both, alternating
    full / nexus step by step, so a busy machine slows both alike; each step is timed."""
    device = next(model.parameters()).device
    runs = []
    for policy, budget in (("full", None), ("nexus", density)):
        cache = kvstore.make_cache(model, policy, budget, seed=0, chunk_size=chunk)
        t0 = time.perf_counter()
        logits = kvstore.prefill(model, cache, prompt(context, vocab, device), chunk)
        runs.append(
            {"policy": policy, "cache": cache, "logits": logits, "prefill_s": time.perf_counter() - t0, "times": []}
        )
    for _ in range(steps):
        for run in runs:
            token = run["logits"].argmax(-1, keepdim=True)  # [1, 1]
            t = time.perf_counter()
            run["logits"] = kvstore.forward(model, run["cache"], token)[:, -1]
            run["times"].append(time.perf_counter() - t)
    return [_decode_row(run, context, steps) for run in runs]


def _decode_row(run: dict, context: int, steps: int) -> dict:
    times, st = run["times"], run["cache"].stats()
    return {
        "policy": run["policy"],
        "context": context,
        "prefill_s": run["prefill_s"],
        "decode_tok_s": steps / sum(times),
        "step_ms_median": statistics.median(times) * 1e3,
        "step_ms_p90": sorted(times)[int(0.9 * (len(times) - 1))] * 1e3,
        "cache_mib": st["bytes_held"] / 2**20,
        "held_tokens_per_layer": st["tokens_held"] / len(run["cache"].layers),
    }


MEMORY_CONFIGS = {  # name -> (policy, density, prefill chunk: None = the whole prompt in one forward)
    "full (no eviction)": ("full", None, 512),
    "nexus 20%, one-shot prefill": ("nexus", 0.2, None),
    "nexus 20%, chunked prefill": ("nexus", 0.2, 512),
}


@torch.inference_mode()
def memory_run(model, name: str, context: int, vocab: int, density: float) -> dict:
    """Peak and final cache bytes of one prefill config (see MEMORY_CONFIGS)."""
    policy, _, chunk = MEMORY_CONFIGS[name]
    budget = None if policy == "full" else density
    cache = kvstore.make_cache(model, policy, budget, seed=0)
    peak = track_peak(cache)
    kvstore.prefill(model, cache, prompt(context, vocab, next(model.parameters()).device), chunk or context)
    return {
        "config": name,
        "context": context,
        "peak_cache_mib": peak[0] / 2**20,
        "final_cache_mib": cache.stats()["bytes_held"] / 2**20,
    }


def rss_child(model_name: str, name: str, context: int, density: float, threads: int) -> None:
    """Subprocess body: load, reset the RSS high-water mark, prefill one memory config, print the marks as JSON."""
    torch.set_num_threads(threads)
    model, vocab = load(model_name, context + 64)
    gc.collect()
    loaded = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS (loading peaks higher)
    row = memory_run(model, name, context, vocab, density)
    print(json.dumps(row | {"rss_loaded_mib": loaded, "rss_peak_mib": _status_mib("VmHWM")}))


def _status_mib(field: str) -> float:
    """A memory field of /proc/self/status (kB) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KVStoreError(f"/proc/self/status has no {field} (RSS measurement needs Linux); use --no-rss")


def rss_of(cfg: SpeedConfig, name: str) -> dict:
    code = (
        "import sys; from benchmarks.speed import rss_child; rss_child(*sys.argv[1:3], int(sys.argv[3]), "
        "float(sys.argv[4]), int(sys.argv[5]))"
    )
    args = [cfg.model, name, str(cfg.memory_context), str(cfg.density), str(cfg.threads)]
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=root, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(cfg: SpeedConfig) -> dict:
    torch.set_num_threads(cfg.threads)
    model, vocab = load(cfg.model, max(cfg.contexts + (cfg.memory_context,)) + cfg.steps + 64)
    limit = model.config.max_position_embeddings
    decode, pairs = [], []
    for ctx in cfg.contexts:
        if ctx + cfg.steps > limit:
            console.print(f"[yellow]skip {ctx}: beyond the model's {limit} positions[/yellow]")
            continue
        console.print(f"decode at {ctx} tokens ...")
        full, nexus = decode_pair(model, cfg.density, ctx, cfg.steps, cfg.chunk_size, vocab)
        decode += [full, nexus]
        pairs.append(
            {
                "context": ctx,
                "throughput_ratio": nexus["decode_tok_s"] / full["decode_tok_s"],
                "latency_ratio": nexus["step_ms_median"] / full["step_ms_median"],
                "cache_bytes_ratio": full["cache_mib"] / nexus["cache_mib"],
            }
        )
    console.print(f"prefill memory at {cfg.memory_context} tokens ...")
    memory = [memory_run(model, name, cfg.memory_context, vocab, cfg.density) for name in MEMORY_CONFIGS]
    if cfg.rss:
        for row in memory:
            row.update({k: v for k, v in rss_of(cfg, row["config"]).items() if k.startswith("rss")})
    return {"decode": decode, "ratios": pairs, "memory": memory}


QUICK = {"model": "tiny", "contexts": (512, 1024), "steps": 40, "memory_context": 1024, "chunk_size": 128, "rss": False}


def show(result: dict) -> None:
    out = Console(width=max(console.width, 140))  # tables stay whole when the output is a file
    cols = ["policy", "context", "decode_tok_s", "step_ms_median", "step_ms_p90", "prefill_s", "cache_mib"]
    out.print(table("Decode speed (nexus at density vs full)", cols, [[r[c] for c in cols] for r in result["decode"]]))
    cols = ["context", "throughput_ratio", "latency_ratio", "cache_bytes_ratio"]
    out.print(
        table(
            "Nexus / full (throughput x, latency x, full bytes / nexus bytes)",
            cols,
            [[r[c] for c in cols] for r in result["ratios"]],
        )
    )
    cols = ["config", "context", "peak_cache_mib", "final_cache_mib", "rss_loaded_mib", "rss_peak_mib"]
    rows = [[r.get(c, "-") for c in cols] for r in result["memory"]]
    out.print(table("Prefill memory (peak cache bytes; RSS high-water in a fresh process)", cols, rows))


def main(
    model: str,
    contexts: str,
    steps: int,
    memory_context: int,
    threads: int,
    rss: bool,
    quick: bool,
    json_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` speed: its options and help are in benchmarks.commands.speed."""
    cfg = SpeedConfig(
        model=model,
        contexts=tuple(int(c) for c in contexts.split(",")),
        steps=steps,
        memory_context=memory_context,
        threads=threads,
        rss=rss,
    )
    if quick:
        cfg = SpeedConfig(**(cfg.__dict__ | QUICK))
    t0 = time.perf_counter()
    result = measure(cfg)
    show(result)
    console.print(f"measured in {time.perf_counter() - t0:.0f}s")
    write_json(json_path, {"benchmark": "speed", "config": cfg.__dict__, **result})
