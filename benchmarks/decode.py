"""`nexus-agent bench decode`: decode tokens/s and ms/step of each policy under each KV storage engine (the
concatenating `eager` path and the `static` in-place buffers, kvstore.cache.buffers), alone (batch 1) and in a
batched decode of N sessions (kvstore.session.batch), at growing contexts; each beside the bound for the same step:
the bytes it must read (weights once, plus every row's held keys and values) divided by the memory bandwidth that a
large tensor copy reaches in the same run.

Side by side: each (context, policy) is prefilled once; every engine and batch row then starts from a copy of that
cache (kvstore.export_state / restore_cache), and the engines decode in turns, step by step, so a busy machine slows
them alike. Ratios are to the eager engine of the same (context, policy, batch).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

import kvstore
from benchmarks.common import console, median_time, table, tiny_qwen3, write_json
from benchmarks.gpu_measure import SHAPES, random_qwen3
from benchmarks.machine import machine
from benchmarks.timing import sync
from kvstore.cache.config import parse_policy_spec
from kvstore.defaults import DEFAULT_MODEL, ENGINES
from kvstore.errors import KVStoreError
from kvstore.models.registry import load_model, pick_attention
from kvstore.session.batch import batched_decode


@dataclass
class DecodeConfig:
    """What one decode run measures."""

    model: str = DEFAULT_MODEL  # registry name / HF id / local dir, or "tiny" (random 4-layer Qwen3)
    dtype: str | None = None  # model dtype (None: the registry's choice for the CPU: bf16 where native, else fp32)
    shape: str | None = None  # instead of `model`: random weights of a real shape (qwen3-8b, qwen3-32b) in bf16
    layers: int | None = None  # decoder layers of `shape` to build (None: all of them)
    device: str = "cpu"  # where the model and caches live
    contexts: tuple[int, ...] = (1024, 2048, 4096)  # prompt lengths
    policies: tuple[str, ...] = ("full", "nexus-agent", "h2o")  # POLICY[@key=value,...] specs
    density: float = 0.25  # budget of the evicting policies, as a share of the prompt
    engines: tuple[str, ...] = ENGINES  # KV storage engines compared (CacheConfig.engine)
    steps: int = 64  # decoded tokens per measurement (>= 2 decode slacks, so decode-time eviction is included)
    batch: int = 4  # sessions of the batched decode (1: batch 1 only)
    chunk_size: int = 512  # prefill chunk
    threads: int = 1  # torch CPU threads
    copy_mib: int = 512  # size of the tensor copied to measure the memory bandwidth


QUICK = {"model": "tiny", "dtype": None, "contexts": (256, 512), "steps": 40, "batch": 2, "chunk_size": 128}


def load(cfg: DecodeConfig):
    """(model, vocab size): a random model of cfg.shape, the registry model in cfg.dtype, or a random tiny Qwen3."""
    if cfg.shape:
        if cfg.shape not in SHAPES:
            raise KVStoreError(f"unknown shape {cfg.shape!r}; known: {', '.join(SHAPES)}")
        shapes = SHAPES[cfg.shape]
        model, _ = random_qwen3(shapes, cfg.layers, cfg.device, "bfloat16", pick_attention(cfg.device))
        return model, shapes["vocab_size"]
    if cfg.model == "tiny":
        model = tiny_qwen3(max_positions=max(cfg.contexts) + cfg.steps + 64, layers=4)
        return model, model.config.vocab_size

    model, tok, _ = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    return model, len(tok)


def bandwidth(mib: int, device: torch.device) -> float:
    """Bytes per second a large tensor copy moves (read + written), the same threads as the decode."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_time(lambda: dst.copy_(src), 5, device)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights a decode step reads (tied embeddings once: the output projection reads them)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.inference_mode()
def prefilled(model, cfg: DecodeConfig, spec: str, context: int, vocab: int) -> tuple[dict, dict, torch.Tensor]:
    """One cache of `spec` prefilled with a fixed random prompt: its exported state and the next token [1, 1]."""
    policy, options = parse_policy_spec(spec)
    budget = None if policy == "full" else cfg.density
    cache = kvstore.make_cache(model, policy, budget, seed=0, chunk_size=cfg.chunk_size, **options)
    ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(context))
    logits = kvstore.prefill(model, cache, ids.to(next(model.parameters()).device), cfg.chunk_size)
    tensors, meta = kvstore.export_state(cache)
    return tensors, meta, logits.argmax(-1, keepdim=True)


def copies(model, state: tuple[dict, dict], engine: str, n: int) -> list:
    """n caches continuing the saved state under `engine` (each its own tensors)."""
    tensors, meta = state
    meta = meta | {"config": meta["config"] | {"engine": engine}}
    return [kvstore.restore_cache(model, {k: v.clone() for k, v in tensors.items()}, meta) for _ in range(n)]


@torch.inference_mode()
def step(model, run: dict) -> None:
    """One timed decode step of the run's caches (one forward alone, or one batched forward)."""
    caches, tokens = run["caches"], run["tokens"]
    device = tokens.device
    sync(device)
    t0 = time.perf_counter()
    if len(caches) == 1:
        logits = kvstore.forward(model, caches[0], tokens.view(1, 1))[:, -1]
    else:
        logits = batched_decode(model, caches, tokens.view(-1).tolist())
    sync(device)
    run["times"].append(time.perf_counter() - t0)
    run["tokens"] = logits.argmax(-1)
    run["greedy"].append(int(run["tokens"].view(-1)[0]))  # the first row's tokens, for the engines' agreement
    run["kv_bytes"].append(sum(layer.nbytes() for c in caches for layer in c.layers))


def decode_group(model, cfg: DecodeConfig, state: tuple, token: torch.Tensor, batch: int) -> list[dict]:
    """Every engine decoding `steps` tokens from the same state, batch rows each, in turns step by step."""
    runs = [
        {"engine": e, "caches": copies(model, state, e, batch), "tokens": token.view(1).repeat(batch)}
        | {"times": [], "kv_bytes": [], "greedy": []}
        for e in cfg.engines
    ]
    for _ in range(cfg.steps):
        for run in runs:
            step(model, run)
    return runs


def row(run: dict, spec: str, context: int, batch: int, weights: int, bw: float) -> dict[str, Any]:
    times = run["times"]
    kv = statistics.mean(run["kv_bytes"])
    bound_s = (weights + kv) / bw  # the step's bytes (weights once, every row's keys and values) at the bandwidth
    return {
        "policy": spec,
        "context": context,
        "batch": batch,
        "engine": run["engine"],
        "tok_s": batch * len(times) / sum(times),
        "ms_step": statistics.median(times) * 1e3,
        "kv_mib": kv / 2**20,
        "bound_ms": bound_s * 1e3,
        "of_bound": bound_s / statistics.median(times),
        "allocated_mib": sum(layer.allocated_bytes() for c in run["caches"] for layer in c.layers) / 2**20,
        "greedy": run["greedy"],
    }


def measure(cfg: DecodeConfig) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    for spec in cfg.policies:
        parse_policy_spec(spec)  # a misspelt spec fails before the model loads
    model, vocab = load(cfg)
    device = next(model.parameters()).device
    load_before = os.getloadavg()
    bw, weights = bandwidth(cfg.copy_mib, device), weight_bytes(model)
    rows = []
    for context in cfg.contexts:
        for spec in cfg.policies:
            console.print(f"{spec} at {context} tokens ...")
            state, meta, token = prefilled(model, cfg, spec, context, vocab)
            for batch in sorted({1, cfg.batch}):
                runs = decode_group(model, cfg, (state, meta), token, batch)
                rows += [row(run, spec, context, batch, weights, bw) for run in runs]
    return {
        "rows": with_ratios(rows),
        "bandwidth_gb_s": bw / 1e9,
        "weights_mib": weights / 2**20,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "machine": machine(device),
    }


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s over the eager engine's in the same (policy, context, batch), and `agree`: the share of
    its greedy tokens (first batch row) before the first that differs from the eager engine's (1.0: all the same;
    in bf16 the engines' attention rounds differently, so a near tie may flip)."""
    base = {(r["policy"], r["context"], r["batch"]): r for r in rows if r["engine"] == "eager"}
    for r in rows:
        b = base.get((r["policy"], r["context"], r["batch"]))
        r["x_eager"] = r["tok_s"] / b["tok_s"] if b else None
        r["agree"] = _leading_agreement(r["greedy"], b["greedy"]) if b else None
    return rows


def _leading_agreement(a: list[int], b: list[int]) -> float:
    """The share of a's tokens before the first position where a and b differ."""
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
    return same / max(1, len(a))


def targets(result: dict) -> list[list[Any]]:
    """The issue's targets from this run: static / eager tokens/s per policy and context (batch 1), and the default
    memory against the full cache (static engine, batch 1) at each context."""
    rows = [r for r in result["rows"] if r["batch"] == 1]
    out = [[f"static / eager, {r['policy']}", r["context"], r["x_eager"]] for r in rows if r["engine"] == "static"]
    full = {r["context"]: r["tok_s"] for r in rows if r["policy"] == "full" and r["engine"] == "static"}
    for r in rows:
        if r["policy"] != "full" and r["engine"] == "static" and r["context"] in full:
            out.append([f"{r['policy']} / full (static)", r["context"], r["tok_s"] / full[r["context"]]])
    return out


def show(result: dict) -> None:
    out = Console(width=max(console.width, 150))  # tables stay whole when the output is a file
    cols = [
        "policy",
        "context",
        "batch",
        "engine",
        "tok_s",
        "x_eager",
        "agree",
        "ms_step",
        "kv_mib",
        "bound_ms",
        "of_bound",
    ]
    cols.append("allocated_mib")
    title = (
        f"Decode: tokens/s, ms/step (median), KV read per step, the bound (weights + KV at "
        f"{result['bandwidth_gb_s']:.1f} GB/s copy bandwidth) and the fraction of it reached"
    )
    out.print(table(title, cols, [[r[c] for c in cols] for r in result["rows"]]))
    out.print(table("Ratios of tokens/s (batch 1)", ["comparison", "context", "ratio"], targets(result)))
    before, after = result["load_average"]["before"], result["load_average"]["after"]
    out.print(f"load average: {before[0]:.2f} before, {after[0]:.2f} after; weights {result['weights_mib']:.0f} MiB")


def _csv(text: str, cast=str) -> tuple:
    try:
        return tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError:
        raise KVStoreError(f"expected a comma-separated list, got {text!r}") from None


def main(
    model: str,
    dtype: str | None,
    contexts: str,
    policies: str,
    density: float,
    engines: str,
    steps: int,
    batch: int,
    threads: int,
    shape: str | None,
    layers: int | None,
    device: str,
    quick: bool,
    json_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` decode_cmd: its options and help are in benchmarks.commands.decode_cmd."""
    chosen = _csv(engines)
    if unknown := [e for e in chosen if e not in ENGINES]:
        raise KVStoreError(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise KVStoreError("no CUDA GPU here: run bench decode on the CPU (--device cpu)")
    cfg = DecodeConfig(model, dtype, shape, layers, device, _csv(contexts, int), _csv(policies), density, chosen)
    cfg.steps, cfg.batch, cfg.threads = steps, batch, threads
    if quick:
        cfg = DecodeConfig(**(asdict(cfg) | QUICK))
    t0 = time.perf_counter()
    result = measure(cfg)
    show(result)
    console.print(f"measured in {time.perf_counter() - t0:.0f}s")
    write_json(json_path, {"benchmark": "decode", "config": asdict(cfg), **result})
