"""`nexus-agent bench overhead`: the cost of every registered policy beside one decode step of the full cache.

Per policy and context: one eviction step of the whole model (score + select on every layer, no write-back, so
it can be repeated), the per-forward attention statistics (`observe`, H2O's accumulation) per decoded token (as
the cache gathers them, `observe_batch` tokens in one call, and for one token alone, as before 2026-12-04) and for
one 512-token prefill chunk, the peak extra memory of each (benchmarks.memtrack), and the amortized overhead per
decoded token: (eviction_step / decode_slack + observe) / decode_step for policies that evict in decode;
prefill-only policies evict once per multi-token forward (observe only, here zero). Per context also the
time of one 512-token prefill chunk of the full cache (an agent turn's new message arrives in such chunks) and each
policy's share of it: (observe_chunk + eviction_step) / prefill_chunk, where observe_chunk is the statistics in a pass
of their own; and the same chunk onto the policy's cache, timed alternately with the full cache's from the same saved
states (`chunk_with_stats_ms`, `stats_in_chunk_pct`): what the statistics cost inside a real forward, where the
static engine computes them in the attention pass (kvstore.attention.prefill).

The contexts run on a random-weight model: the tiny Qwen3 (CPU, seconds) or, with `--shape qwen3-8b|qwen3-32b`, a
model of that real shape in bf16 (`--device cuda`: the cost on a GPU at the product model's size; `--layers` builds
fewer decoder layers, which scales every time but the output layer alike).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch
import typer
from rich.console import Console

import kvstore
from benchmarks.common import console, median_time, table, tiny_qwen3, write_json
from benchmarks.gpu_measure import SHAPES, random_qwen3
from benchmarks.memtrack import peak_extra_bytes
from kvstore import POLICIES
from kvstore.cache.snapshot import export_state, restore_cache
from kvstore.models.registry import load_model, pick_attention

PREFILL_CHUNK = 512
PREFILL_CHUNK_REPEATS = 3
MIB = 1 << 20


def _filled_cache(model, policy: str, context: int, chunk: int, **options):
    """A cache holding `context` tokens (budget above context, so nothing is evicted while filling), measured as
    inside an agent's reply: every new query is the reply's too (nexus-agent's reply term works on every call)."""
    # room for one more prefill chunk: the chunk timed beside the full cache's observes but does not evict
    cache = kvstore.make_cache(model, policy, budget=context + 64 + PREFILL_CHUNK, seed=0, **options)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids.to(model.device), chunk_size=chunk)
    cache.reply_from = 0
    return cache


def eviction_step(cache) -> None:
    """Score every layer and plan its eviction down to 20% (no write-back, so it can be repeated)."""
    for layer in cache.layers:
        t = layer.held()
        budget = max(cache.policy.forced_max(t // 5) + cache.config.block, t // 5)
        layer.plan(budget)


def observe_step(cache, q_len: int) -> None:
    """The policy's per-forward statistics for q_len new queries on every layer (state copied, not changed)."""
    if not cache.policy.observes:
        return
    for layer in cache.layers:
        ctx = layer.score_context(new=q_len)  # the reply mask of these q_len queries (every one the reply's)
        ctx.state = {k: v.clone() for k, v in ctx.state.items()}
        b, hq, _, d = layer.window_q.shape
        q = torch.randn(b, hq, q_len, d, device=layer.keys.device, dtype=layer.window_q.dtype)
        cache.policy.observe(ctx, q)


def observe_batch(cache) -> int:
    """How many decoded tokens' statistics one call gathers once the cache is at its budget: `observe_batch`,
    or fewer when an eviction step comes first (after decode_slack + 1 tokens; EvictingLayer.flush_observations)."""
    batch = cache.config.observe_batch
    if cache.policy.prefill_only or not cache.policy.evicts:
        return batch
    return min(batch, cache.decode_slack() + 1)


def _decode_timer(model, full):
    tok = torch.tensor([[1]], device=next(model.parameters()).device)

    def decode_one():  # one decode step; the context grows by one token per repetition (well under 1%)
        kvstore.forward(model, full, tok)

    return decode_one


def measure(
    model, name: str, context: int, repeats: int, policies: list[str], rows: list, save=None, **options
) -> None:
    """Append one row per policy to `rows` (calling save() after each, so a stopped run keeps what it measured),
    then give this context's rows the time of one 512-token prefill chunk and each policy's share of it."""
    full = _filled_cache(model, "full", context, chunk=1024)
    decode_one = _decode_timer(model, full)
    full_saved = export_state(full)
    for policy in policies:
        cache = _filled_cache(model, policy, context, chunk=1024, **options)
        row = {"model": name, "context": context, "policy": policy, "triton": options.get("use_triton") is not False}
        row |= _measure(cache, decode_one, repeats)
        # a turn's new message, per chunk: the policy's statistics and one eviction step, beside the full cache
        full_s, policy_s = chunk_pair(model, full_saved, export_state(cache), PREFILL_CHUNK_REPEATS)
        row["prefill_chunk_ms"], row["chunk_with_stats_ms"] = full_s * 1e3, policy_s * 1e3
        row["prefill_overhead_pct"] = 100.0 * (row["observe_chunk_ms"] + row["eviction_step_ms"]) / (full_s * 1e3)
        row["stats_in_chunk_pct"] = 100.0 * (policy_s - full_s) / full_s
        rows.append(row)
        console.print(
            f"  {policy}: evict {row['eviction_step_ms']:.2f} ms, chunk {policy_s:.2f} s vs {full_s:.2f} s full"
        )
        del cache  # one policy's cache at a time (a 32K context of a 32B model holds 8 GiB)
        if save:
            save()


def chunk_pair(model, full_saved, policy_saved, repeats: int) -> tuple[float, float]:
    """Median seconds of one 512-token prefill chunk onto the full cache and onto the policy's (its budget leaves
    room: nothing is evicted, so the difference is what its statistics cost inside the forward, where they are
    computed in the attention pass or beside it), alternated and each from the same saved state, after one
    untimed pair."""
    device = next(model.parameters()).device
    ids = torch.ones(1, PREFILL_CHUNK, dtype=torch.int64, device=device)
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(repeats + 1):
        for which, saved in enumerate((full_saved, policy_saved)):
            cache = restore_cache(model, *saved)
            cache.reply_from = 0  # inside the agent's reply, as the other columns measure
            times[which].append(median_time(lambda c=cache: kvstore.forward(model, c, ids), 1, device, warmup=0))
            del cache
    return statistics.median(times[0][1:]), statistics.median(times[1][1:])


def _measure(cache, decode_one, repeats: int) -> dict:
    device = cache.layers[0].keys.device
    slack = cache.decode_slack() or 1
    batch = observe_batch(cache)
    evict, decode, observe, alone = [], [], [], []
    for r in range(repeats):  # alternate, so that load from other processes hits all alike
        evict.append(median_time(lambda: eviction_step(cache), 1, device, warmup=0 if r else 1))
        observe.append(median_time(lambda: observe_step(cache, batch), 1, device, warmup=0 if r else 1) / batch)
        alone.append(median_time(lambda: observe_step(cache, 1), 1, device, warmup=0 if r else 1))
        decode.append(median_time(decode_one, 1, device, warmup=0 if r else 1))
    evict_s, decode_s, obs_s, alone_s = (statistics.median(x) for x in (evict, decode, observe, alone))
    chunk_s = median_time(lambda: observe_step(cache, PREFILL_CHUNK), 1, device, warmup=0)
    per_token = obs_s + (0.0 if cache.policy.prefill_only else evict_s / slack)
    return {
        "eviction_step_ms": evict_s * 1e3,
        "eviction_peak_mib": peak_extra_bytes(lambda: eviction_step(cache), device) / MIB,
        "observe_batch": batch,
        "observe_decode_ms": obs_s * 1e3,
        "observe_alone_ms": alone_s * 1e3,
        "observe_chunk_ms": chunk_s * 1e3,
        "observe_chunk_peak_mib": peak_extra_bytes(lambda: observe_step(cache, PREFILL_CHUNK), device) / MIB,
        "decode_step_ms": decode_s * 1e3,
        "amortized_overhead_pct": 100.0 * per_token / decode_s,
        "decode_slack": slack,
    }


COLUMNS = [
    "model",
    "context",
    "policy",
    "triton",
    "eviction_step_ms",
    "eviction_peak_mib",
    "observe_batch",
    "observe_decode_ms",
    "observe_alone_ms",
    "observe_chunk_ms",
    "observe_chunk_peak_mib",
    "decode_step_ms",
    "amortized_overhead_pct",
    "prefill_chunk_ms",
    "prefill_overhead_pct",
    "chunk_with_stats_ms",
    "stats_in_chunk_pct",
]


def _random_model(shape: str, layers: int, device: str, positions: int) -> tuple[torch.nn.Module, str]:
    """The random-weight model the contexts are measured on, and its label in the table."""

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise typer.BadParameter("no CUDA GPU here; use --device cpu", param_hint="--device")
    if shape == "tiny":
        return tiny_qwen3(max_positions=positions).to(device), "tiny-qwen3 (4 layers)"
    if shape not in SHAPES:
        raise typer.BadParameter(f"unknown shape {shape!r}; known: tiny, {', '.join(SHAPES)}", param_hint="--shape")
    shapes = SHAPES[shape] | {"max_position_embeddings": max(positions, SHAPES[shape]["max_position_embeddings"])}
    model, built = random_qwen3(shapes, layers or None, device, "bfloat16", pick_attention(device))
    return model, f"{shape} random, {built} of {SHAPES[shape]['num_hidden_layers']} layers"


def main(
    contexts: str,
    shape: str,
    layers: int,
    device: str,
    triton: bool,
    model: str,
    real_contexts: str,
    policies: str,
    repeats: int,
    threads: int,
    json_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` overhead: its options and help are in benchmarks.commands.overhead."""

    names = [p for p in (policies.split(",") if policies else POLICIES) if p and p != "full"]
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise typer.BadParameter(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    if threads:
        torch.set_num_threads(threads)
    rows = []
    options = {} if triton else {"use_triton": False}

    def save() -> None:  # after every policy, so a run stopped by a time bound keeps what it measured
        payload = {"benchmark": "overhead", "threads": torch.get_num_threads(), "repeats": repeats, "rows": rows}
        write_json(json_path, payload)

    if contexts:
        sizes = [int(c) for c in contexts.split(",")]
        random_model, label = _random_model(shape, layers, device, max(sizes) + 4096)
        for ctx in sizes:
            console.print(f"{label} at {ctx} tokens ...")
            measure(random_model, label, ctx, repeats, names, rows, save, **options)
        del random_model
    if model:
        real, _, _info = load_model(model)
        limit = real.config.max_position_embeddings
        for ctx in (int(c) for c in real_contexts.split(",")):
            if ctx + 64 > limit:
                console.print(f"[yellow]skip {model} at {ctx}: beyond its {limit} positions[/yellow]")
                continue
            console.print(f"{model} at {ctx} tokens ...")
            measure(real, model, ctx, repeats, names, rows, save, **options)
    wide = Console(width=max(console.width, 230))  # twelve columns: do not wrap them in a narrow terminal
    wide.print(table("Eviction overhead per policy", COLUMNS, [[r[c] for c in COLUMNS] for r in rows]))
