"""`nexus-agent bench overhead`: one Nexus eviction step (score + walk + select) beside one decode step.

Eviction runs once per b decoded tokens, so the amortized overhead per decoded token is
eviction_step / (b * decode_step). Both are measured in the same run, at the same context, on the same model.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated

import torch
import typer

import kvstore
from benchmarks.common import console, median_time, table, tiny_qwen3, write_json
from kvstore.defaults import DEFAULT_MODEL
from kvstore.eviction import plan_eviction


def _filled_cache(model, policy: str, context: int, chunk: int):
    """A cache holding `context` tokens (budget = context, so nothing is evicted while filling)."""
    cache = kvstore.make_cache(model, policy, budget=context + 64, seed=0)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids.to(model.device), chunk_size=chunk)
    return cache


def eviction_step(cache) -> None:
    """Score every layer and plan its eviction down to 20% (no write-back, so it can be repeated)."""
    for layer in cache.layers:
        scores = cache.policy.score(layer._context())
        budget = max(4, layer.held() // cache.config.block // 5)
        plan_eviction(scores, layer.held(), budget, layer.keys.shape[1], cache.config, cache.policy, cache.generator)


def measure(model, name: str, context: int, repeats: int) -> dict:
    device = next(model.parameters()).device
    nexus = _filled_cache(model, "nexus", context, chunk=1024)
    full = _filled_cache(model, "full", context, chunk=1024)
    tok = torch.tensor([[1]], device=device)

    def decode_one():  # one decode step at this context, then drop the token again to keep the context fixed
        kvstore.forward(model, full, tok)
        for layer in full.layers:
            layer.keys, layer.values = layer.keys[..., :-1, :], layer.values[..., :-1, :]
            layer.positions = layer.positions[..., :-1]
            layer.seen -= 1

    # alternate the two, so that load from other processes hits both alike
    evict, decode = [], []
    for _ in range(repeats):
        evict.append(median_time(lambda: eviction_step(nexus), 1, device, warmup=0 if evict else 1))
        decode.append(median_time(decode_one, 1, device, warmup=0 if decode else 1))
    evict_s, decode_s = statistics.median(evict), statistics.median(decode)
    b = nexus.config.block
    return {
        "model": name,
        "context": context,
        "eviction_step_ms": evict_s * 1e3,
        "decode_step_ms": decode_s * 1e3,
        "amortized_overhead_pct": 100.0 * evict_s / (b * decode_s),
        "block": b,
    }


def overhead(
    contexts: Annotated[
        str, typer.Option(help="Comma-separated context lengths for the tiny model.")
    ] = "2048,8192,32768",
    model: Annotated[str, typer.Option(help="Real model to measure too ('' to skip).")] = DEFAULT_MODEL,
    real_contexts: Annotated[
        str, typer.Option(help="Context lengths for the real model (within its limit).")
    ] = "2048,7168",
    repeats: Annotated[int, typer.Option(min=1, help="Timed repetitions (median reported).")] = 9,
    threads: Annotated[int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
) -> None:
    """Time one Nexus eviction step beside one decode step; print the amortized overhead per decoded token."""
    if threads:
        torch.set_num_threads(threads)
    rows = []
    tiny = tiny_qwen3(max_positions=max(int(c) for c in contexts.split(",")) + 1024)
    for ctx in (int(c) for c in contexts.split(",")):
        console.print(f"tiny-qwen3 at {ctx} tokens ...")
        rows.append(measure(tiny, "tiny-qwen3 (4 layers)", ctx, repeats))
    if model:
        from kvstore.models import load_model

        real, _, info = load_model(model)
        limit = real.config.max_position_embeddings
        for ctx in (int(c) for c in real_contexts.split(",")):
            if ctx + 64 > limit:
                console.print(f"[yellow]skip {model} at {ctx}: beyond its {limit} positions[/yellow]")
                continue
            console.print(f"{model} at {ctx} tokens ...")
            rows.append(measure(real, model, ctx, repeats))
    cols = ["model", "context", "eviction_step_ms", "decode_step_ms", "amortized_overhead_pct"]
    console.print(
        table("Nexus eviction overhead (amortized over b decoded tokens)", cols, [[r[c] for c in cols] for r in rows])
    )
    write_json(
        json_path, {"benchmark": "overhead", "threads": torch.get_num_threads(), "repeats": repeats, "rows": rows}
    )
