"""`nexus-agent bench quality`: every eviction policy on RULER-style tasks over real text, compressed before the
question is seen, at several densities; a table per density, a JSON file and a PNG plot."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console

from benchmarks.common import console, write_json
from benchmarks.plans import MODES
from benchmarks.quality_report import density_table, plot, summarize, with_average
from benchmarks.quality_run import QUERY_AWARE, RunSpec, run_item
from benchmarks.quality_tasks import TASKS, make_item
from kvstore import POLICIES, CacheConfig
from kvstore.cache.config import SHARED, declared, is_stochastic, own_options
from kvstore.defaults import DEFAULT_MODEL
from kvstore.errors import KVStoreError
from kvstore.models.registry import load_model


@dataclass
class QualityConfig:
    """What one quality run covers."""

    model: str = DEFAULT_MODEL  # model registry name / HF id / local directory
    policies: tuple[str, ...] = field(default_factory=lambda: tuple(POLICIES))  # policies (registered ones: all)
    densities: tuple[float, ...] = (0.2, 0.5)  # shares of the context kept
    tasks: tuple[str, ...] = TASKS  # tasks to run
    items: int = 2  # items per task
    seeds: int = 3  # cache seeds for the stochastic policies (deterministic ones run once, seed 0)
    context_tokens: int = 1024  # haystack / conversation length in tokens
    threads: int = 1  # torch CPU threads (1 is fastest on a shared, busy machine)
    data_seed: int = 0  # seed of the task generator
    cache_options: dict = field(default_factory=dict)  # cache options (ablations): each policy takes those it declares
    modes: tuple[str, ...] = MODES  # "unaware" (question after compression) and/or "aware" (question inside)

    def specs(self) -> list[RunSpec]:
        """The run matrix per mode: full once, every other policy at each density (stochastic ones per seed)."""
        out = []
        for aware in (m == "aware" for m in self.modes):
            out += [RunSpec("full", 1.0, 0, query_aware=aware)] if "full" in self.policies else []
            for d in self.densities:
                for p in self.policies:
                    if p != "full":
                        options = declared(p, self.cache_options)
                        seeds = range(self.seeds if is_stochastic(p, **options) else 1)
                        out += [RunSpec(p, d, s, options=options, query_aware=aware) for s in seeds]
        return out

    def labels(self) -> list[str]:
        """Policy columns of the tables: each policy, then its query-aware twin."""
        return [p + (QUERY_AWARE if m == "aware" else "") for p in self.policies for m in self.modes]


QUICK = {"items": 1, "seeds": 2, "context_tokens": 320, "densities": (0.5,), "policies": ("full", "nexus", "snapkv")}


def run(cfg: QualityConfig, model, tokenizer, on_row=None) -> list[dict]:
    """Every spec on every item, item-major (a stopped run still has all policies for its first items)."""
    specs, rows, t0 = cfg.specs(), [], time.perf_counter()
    total = cfg.items * len(cfg.tasks) * len(specs)
    for index in range(cfg.items):
        for task in cfg.tasks:
            item = make_item(task, cfg.data_seed, index, tokenizer, cfg.context_tokens)
            for spec in specs:
                if spec.query_aware and task == "multi_turn":
                    continue  # a conversation has no single prompt to put the question in
                result = run_item(model, tokenizer, item, spec, cfg.context_tokens)
                density = None if spec.policy == "full" else spec.density
                rows.append(
                    {
                        "task": task,
                        "item": index,
                        "policy": spec.label,
                        "mode": "aware" if spec.query_aware else "unaware",
                        "density": density,
                        "seed": spec.seed,
                        **result,
                    }
                )
                done, spent = len(rows), time.perf_counter() - t0
                console.print(
                    f"[{done}/{total}] {task} #{index} {spec.policy} d={spec.density} s={spec.seed}: "
                    f"{result['score']:.2f} ({spent:.0f}s, eta {spent / done * (total - done):.0f}s)"
                )
            if on_row:
                on_row(rows)
    return rows


def parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE strings to CacheConfig options (ints, floats, booleans, else strings)."""
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise KVStoreError(f"cache option {pair!r} is not KEY=VALUE")
        lowered = raw.lower()
        if lowered in ("true", "false"):
            out[key] = lowered == "true"
        else:
            try:
                out[key] = int(raw)
            except ValueError:
                try:
                    out[key] = float(raw)
                except ValueError:
                    out[key] = raw
    known = {*SHARED, *(name for p in POLICIES for name in own_options(p))}
    unknown = sorted(set(out) - known)
    if unknown:
        raise KVStoreError(f"unknown cache option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for p in POLICIES:  # bad values: one clear error now, not mid-run
        CacheConfig.from_options(p, **declared(p, out))
    return out


def _parse(cfg: QualityConfig) -> None:
    unknown = [p for p in cfg.policies if p not in POLICIES] + [t for t in cfg.tasks if t not in TASKS]
    if unknown:
        raise KVStoreError(
            f"unknown policy/task {', '.join(unknown)}; policies: {', '.join(POLICIES)}; tasks: {', '.join(TASKS)}"
        )
    if not cfg.modes or set(cfg.modes) - set(MODES):
        raise KVStoreError(f"modes must be among {', '.join(MODES)}, got {', '.join(cfg.modes)}")
    if any(not 0 < d <= 1 for d in cfg.densities):
        raise KVStoreError(f"densities must be in (0, 1], got {cfg.densities}")


def main(
    policies: str,
    densities: str,
    tasks: str,
    items: int | None,
    seeds: int | None,
    context_tokens: int | None,
    model: str,
    threads: int,
    quick: bool,
    cache_option: list[str] | None,
    modes: str,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` quality: its options and help are in benchmarks.commands.quality."""
    base = QualityConfig(model=model, threads=threads, **(QUICK if quick else {}))
    overrides = {
        "policies": tuple(policies.split(",")) if policies else None,
        "densities": tuple(float(d) for d in densities.split(",")) if densities else None,
        "tasks": tuple(tasks.split(",")) if tasks else None,
        "items": items,
        "seeds": seeds,
        "context_tokens": context_tokens,
        "cache_options": parse_options(cache_option or []) or None,
        "modes": tuple(m.strip() for m in modes.split(",") if m.strip()),
    }
    cfg = QualityConfig(**(base.__dict__ | {k: v for k, v in overrides.items() if v is not None}))
    _parse(cfg)
    torch.set_num_threads(cfg.threads)

    mdl, tok, info = load_model(cfg.model)
    console.print(f"{info.name} ({info.dtype}, {cfg.threads} thread(s)): {len(cfg.specs())} runs per item")

    def summaries(rows: list[dict]) -> tuple[list[dict], list[dict]]:
        return (
            with_average(summarize(rows), list(cfg.tasks)),
            with_average(summarize(rows, "evidence_kept"), list(cfg.tasks)),
        )

    def save(rows: list[dict]) -> None:
        summary, kept = summaries(rows)
        payload = {"benchmark": "quality", "config": cfg.__dict__, "summary": summary, "evidence_kept": kept}
        write_json(json_path, payload | {"rows": rows})

    t0 = time.perf_counter()
    rows = run(cfg, mdl, tok, on_row=save)
    summary, kept = summaries(rows)
    wide = Console(width=max(console.width, 140))  # tables stay whole when the output is a file
    for d in cfg.densities:
        wide.print(density_table(summary, d, cfg.labels(), list(cfg.tasks)))
        wide.print(density_table(kept, d, cfg.labels(), list(cfg.tasks), "Evidence tokens still held"))
    console.print(f"{len(rows)} runs in {time.perf_counter() - t0:.0f}s")
    if plot_path:
        plot(summary, cfg.labels(), list(cfg.tasks), plot_path)
        console.print(f"wrote {plot_path}")
