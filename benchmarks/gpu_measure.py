"""Measurements of `nexus-agent bench gpu`: decode speed and cache memory of dense vs evicting caches on a
random-weight Qwen3 model of real shapes, and the fused scoring kernel against the torch scoring path.

Per-step latencies synchronize the device after every step (CUDA), so they are wall-clock steps, not launches.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM, DynamicCache, Qwen3Config

import kvstore
from benchmarks.shapes import QWEN3_8B, QWEN3_TINY, SHAPES  # noqa: F401 (SHAPES: imported from here)
from benchmarks.timing import sync
from kvstore.attention.dispatch import fused_window_block_scores
from kvstore.attention.scoring import window_block_scores
from kvstore.cache.config import parse_policy_spec


@dataclass
class GpuBenchConfig:
    """What `nexus-agent bench gpu` runs; the defaults are the full H200 run, `quick()` the CPU smoke run."""

    shapes: dict[str, Any] = field(default_factory=lambda: dict(QWEN3_8B))  # Qwen3Config fields of the model
    layers: int | None = None  # decoder layers to build (None: all of `shapes`); fewer only to fit the time
    device: str = "cuda"  # where the model and caches live
    dtype: str = "bfloat16"  # model dtype
    prefill: int = 8192  # prompt tokens
    decode_marks: tuple[int, ...] = (4096, 8192)  # decode lengths reported (one decode run to the largest)
    policies: tuple[str, ...] = ("dense", "nexus")  # "dense" = transformers DynamicCache; others via make_cache
    density: float = 0.2  # budget of the evicting policies, as a fraction of the prompt
    tail_steps: int = 256  # per-step latency reported as the median of the last `tail_steps` before each mark
    max_decode_s: float = 240.0  # stop a decode run after this long (the output says which marks were reached)
    kernel_lengths: tuple[int, ...] = (8192, 32768)  # held-key lengths T of the kernel timing
    kernel_reps: int = 20  # timed repetitions per kernel measurement
    window: int = 16  # W of the kernel timing
    block: int = 32  # b of the kernel timing
    seed: int = 0  # seed of the weights, prompt and cache
    cpu_threads: int | None = None  # torch threads on the CPU (1 in quick mode: shared CPUs make threads spin)

    @classmethod
    def quick(cls) -> GpuBenchConfig:
        """Tiny shapes on the CPU: checks the machinery in seconds."""
        return cls(
            shapes=dict(QWEN3_TINY), device="cpu", dtype="float32", prefill=1024, decode_marks=(64, 128),
            tail_steps=32, max_decode_s=60.0, kernel_lengths=(256, 1024), kernel_reps=3, cpu_threads=1,
        )  # fmt: skip


def random_qwen3(
    shapes: dict[str, Any], layers: int | None, device: str, dtype: str, attn: str, seed: int = 0
) -> tuple[torch.nn.Module, int]:
    """A random-weight Qwen3 of `shapes` (Qwen3Config fields), built on `device` (no download), with `layers`
    decoder layers (None: the shape's own count); returns it (eval mode) and its decoder layer count."""

    shapes = dict(shapes)
    if layers:
        shapes["num_hidden_layers"] = layers
    torch.manual_seed(seed)
    config = Qwen3Config(**shapes)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype), attn_implementation=attn)
    return model.eval(), shapes["num_hidden_layers"]


def build_model(cfg: GpuBenchConfig, attn: str) -> tuple[torch.nn.Module, int]:
    """The bench's random-weight model on its device; returns it and its decoder layer count."""
    return random_qwen3(cfg.shapes, cfg.layers, cfg.device, cfg.dtype, attn, cfg.seed)


def cache_bytes(cache: Any) -> int:
    """Bytes of keys + values the cache holds (EvictingCache.stats, else summed over a DynamicCache's layers)."""
    if hasattr(cache, "stats"):
        return int(cache.stats()["bytes_held"])
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def new_cache(model: torch.nn.Module, policy: str, cfg: GpuBenchConfig) -> Any:

    if policy == "dense":
        return DynamicCache(config=model.config)

    name, options = parse_policy_spec(policy)  # e.g. nexus-agent@observe_batch=1
    return kvstore.make_cache(model, name, None if name == "full" else cfg.density, seed=cfg.seed, **options)


def _peak_mib(device: str, base: int) -> float | None:
    if not device.startswith("cuda"):
        return None
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _mark_row(cfg: GpuBenchConfig, lat: list[float], cache: Any, peak_mib: float | None) -> dict[str, Any]:
    tail = lat[-cfg.tail_steps :]
    held = cache.stats()["tokens_held_per_layer"][0] if hasattr(cache, "stats") else cache.get_seq_length()
    return {
        "decode": len(lat),
        "tok_s": len(lat) / sum(lat),
        "ms_step_mean": 1e3 * sum(lat) / len(lat),
        "ms_step_p50_tail": 1e3 * statistics.median(tail),
        "cache_mib": cache_bytes(cache) / 2**20,
        "tokens_held_layer0": held,
        "peak_mib_span": peak_mib,
    }


@torch.inference_mode()
def run_policy(model: torch.nn.Module, policy: str, cfg: GpuBenchConfig) -> dict[str, Any]:
    """Prefill a random prompt, then decode greedily to the largest mark; one row per mark reached.

    peak_mib_span: torch.cuda.max_memory_allocated above the weights during the decode span since the previous
    mark (flat under eviction, growing with a dense cache)."""

    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, model.config.vocab_size, (1, cfg.prefill), generator=gen).to(cfg.device)
    cache = new_cache(model, policy, cfg)
    sync(cfg.device)
    base = 0
    if cfg.device.startswith("cuda"):
        base = torch.cuda.memory_allocated()  # weights (+ an empty cache)
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    logits = kvstore.prefill(model, cache, ids, chunk_size=512)
    sync(cfg.device)
    out: dict[str, Any] = {"policy": policy, "prefill_s": time.perf_counter() - t0, "marks": []}
    out["prefill_cache_mib"] = cache_bytes(cache) / 2**20
    out["prefill_peak_mib"] = _peak_mib(cfg.device, base)
    if cfg.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    tok = logits.argmax(-1, keepdim=True)  # [1, 1]
    lat: list[float] = []
    start = time.perf_counter()
    for mark in sorted(cfg.decode_marks):
        while len(lat) < mark and time.perf_counter() - start < cfg.max_decode_s:
            t = time.perf_counter()
            tok = kvstore.forward(model, cache, tok)[:, -1].argmax(-1, keepdim=True)
            sync(cfg.device)
            lat.append(time.perf_counter() - t)
        if len(lat) < mark:
            out["stopped_at"] = len(lat)  # max_decode_s reached
            break
        out["marks"].append(_mark_row(cfg, lat, cache, _peak_mib(cfg.device, base)))
        if cfg.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
    if hasattr(cache, "stats"):
        st = cache.stats()
        out.update(eviction_steps=st["eviction_steps"], score_s=st["score_s"], select_s=st["select_s"])
    return out


def warm_up_kernel(cfg: GpuBenchConfig) -> None:
    """Compile the scoring kernel for the model's shapes, so no run's first eviction pays for it (through the
    cache's own dispatch: a kernel that fails here sends the runs to the torch path, see kvstore.attention.dispatch)."""

    hq, hkv, d = cfg.shapes["num_attention_heads"], cfg.shapes["num_key_value_heads"], cfg.shapes["head_dim"]
    dtype = getattr(torch, cfg.dtype)
    q = torch.zeros(hq, cfg.window, d, device=cfg.device, dtype=dtype)  # [Hq, W, D]
    k = torch.zeros(hkv, 4 * cfg.block + 1, d, device=cfg.device, dtype=dtype)  # [Hkv, T, D]
    fused_window_block_scores(q, k, cfg.block)
    sync(cfg.device)


def _measure(fn, args: tuple, reps: int, device: str) -> tuple[float, float | None]:
    """(ms per call of fn(*args), peak MiB one call allocates above what was allocated before; None off CUDA)."""
    fn(*args)  # warm-up (compiles the kernel)
    sync(device)
    peak = None
    if device.startswith("cuda"):
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(*args)
        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    t = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    sync(device)
    return 1e3 * (time.perf_counter() - t) / reps, peak


@torch.inference_mode()
def kernel_rows(cfg: GpuBenchConfig, use_triton: bool) -> list[dict[str, Any]]:
    """Time the torch scoring path and (when `use_triton`) the fused kernel at each T, Qwen shapes of `cfg`."""

    hq, hkv, d = cfg.shapes["num_attention_heads"], cfg.shapes["num_key_value_heads"], cfg.shapes["head_dim"]
    dtype, gen = getattr(torch, cfg.dtype), torch.Generator().manual_seed(cfg.seed)
    rows = []
    for t in cfg.kernel_lengths:
        q = torch.randn(hq, cfg.window, d, generator=gen).to(cfg.device, dtype)  # [Hq, W, D]
        k = torch.randn(hkv, t, d, generator=gen).to(cfg.device, dtype)  # [Hkv, T, D]
        args, reps = (q, k, cfg.block), cfg.kernel_reps
        row: dict[str, Any] = {"T": t}
        row["torch_ms"], row["torch_peak_mib"] = _measure(window_block_scores, args, reps, cfg.device)
        if use_triton:
            try:  # the kernel itself, not its dispatch (which would fall back to torch); triton imported here
                from kvstore.attention.triton_scores import triton_window_block_scores

                row["triton_ms"], row["triton_peak_mib"] = _measure(triton_window_block_scores, args, reps, cfg.device)
            except Exception as exc:  # report it next to the torch timing instead of losing the whole run
                row["triton_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                rows.append(row)
                continue
            row["speedup"] = row["torch_ms"] / row["triton_ms"]
            diff = triton_window_block_scores(*args) - window_block_scores(*args)
            row["max_abs_diff"] = float(diff.abs().max())
        rows.append(row)
    return rows
