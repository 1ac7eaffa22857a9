"""The bench commands' options and help (`nexus-agent bench <name>`), apart from their torch code: `--help` imports
this module only, and each command imports its benchmark (benchmarks/<name>.py) when it runs. The gpu command
keeps its options apart too (benchmarks/gpu_options.py; benchmarks/gpu.py hands over to argparse).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from benchmarks.plans import BOUND, MODES, AdmissionPlan, ServePlan, TurnsPlan
from benchmarks.quality_tasks import TASKS
from benchmarks.serve_stall import StallPlan
from kvstore.defaults import DEFAULT_MODEL, ENGINES


def overhead(
    contexts: Annotated[
        str, typer.Option(help="Comma-separated context lengths for the random model ('' to skip it).")
    ] = "2048,8192,32768",
    shape: Annotated[
        str,
        typer.Option(
            help="The random model: 'tiny' (4 narrow layers, fp32) or a real shape in bf16: qwen3-8b, qwen3-32b."
        ),
    ] = "tiny",
    layers: Annotated[int, typer.Option(min=0, help="Decoder layers of a real shape (0 = all of them).")] = 0,
    device: Annotated[str, typer.Option(help="Device of the random model: cpu or cuda.")] = "cpu",
    triton: Annotated[
        bool, typer.Option(help="Use the fused Triton kernels where they run (CUDA); --no-triton: the torch paths.")
    ] = True,
    model: Annotated[str, typer.Option(help="Real model to measure too ('' to skip).")] = DEFAULT_MODEL,
    real_contexts: Annotated[
        str, typer.Option(help="Context lengths for the real model (within its limit).")
    ] = "2048,7168",
    policies: Annotated[str, typer.Option(help="Comma-separated policies ('' = every registered one).")] = "",
    repeats: Annotated[int, typer.Option(min=1, help="Timed repetitions (median reported).")] = 9,
    threads: Annotated[int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
) -> None:
    """Time every policy's eviction step and attention statistics beside one decode step and one 512-token prefill
    chunk; print the amortized overhead per decoded token, the share of a prefill chunk and the peak extra memory."""
    from benchmarks.overhead import main  # lazy: torch, off --help

    main(
        contexts=contexts,
        shape=shape,
        layers=layers,
        device=device,
        triton=triton,
        model=model,
        real_contexts=real_contexts,
        policies=policies,
        repeats=repeats,
        threads=threads,
        json_path=json_path,
    )


def turns_cmd(
    model: Annotated[str, typer.Option(help="Registry name, HF id or local model directory.")] = DEFAULT_MODEL,
    turns: Annotated[int, typer.Option(min=1, help="Agent turns.")] = TurnsPlan.turns,
    budget: Annotated[str, typer.Option(help="Nexus budget: tokens per layer (1024) or density (0.2 / 20%).")] = "1024",
    prompt_tokens: Annotated[int, typer.Option(min=1, help="Tokens of the opening prompt.")] = TurnsPlan.prompt_tokens,
    obs_tokens: Annotated[int, typer.Option(min=1, help="Tokens per tool observation.")] = TurnsPlan.obs_tokens,
    reply_tokens: Annotated[int, typer.Option(min=1, help="Tokens per forced reply.")] = TurnsPlan.reply_tokens,
    seed: Annotated[int, typer.Option(help="Seed of the text and the caches.")] = 0,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, ... (default: a GPU when present).")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 | fp16 | fp32 (default: bf16 where supported).")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
) -> None:
    """Simulated agent session: per-turn prefill and cache size under true eviction, re-prefill and full cache."""
    from benchmarks.turns import main  # lazy: torch, off --help

    main(
        model=model,
        turns=turns,
        budget=budget,
        prompt_tokens=prompt_tokens,
        obs_tokens=obs_tokens,
        reply_tokens=reply_tokens,
        seed=seed,
        device=device,
        dtype=dtype,
        json_path=json_path,
    )


def quality(
    policies: Annotated[str, typer.Option(help="Comma-separated policies (default: all, ablations included).")] = "",
    densities: Annotated[str, typer.Option(help="Comma-separated densities (shares of the context kept).")] = "",
    tasks: Annotated[str, typer.Option(help=f"Comma-separated tasks of {', '.join(TASKS)}.")] = "",
    items: Annotated[int | None, typer.Option(min=1, help="Items per task.")] = None,
    seeds: Annotated[int | None, typer.Option(min=1, help="Seeds for the stochastic policies.")] = None,
    context_tokens: Annotated[int | None, typer.Option(min=128, help="Context length in tokens.")] = None,
    model: Annotated[str, typer.Option(help="Model registry name, HF id or local directory.")] = DEFAULT_MODEL,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads.")] = 1,
    quick: Annotated[
        bool, typer.Option(help="A few items at tiny sizes: checks the machinery, not the numbers.")
    ] = False,
    cache_option: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE CacheConfig knob for evicting policies (repeatable).")
    ] = None,
    modes: Annotated[
        str, typer.Option(help="unaware (question after compression), aware (question inside), or both.")
    ] = ",".join(MODES),
    json_path: Annotated[Path | None, typer.Option("--json", help="Write rows + summary as JSON here.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Write the accuracy-vs-density PNG here.")] = None,
) -> None:
    """Eviction quality: RULER-style retrieval over stdlib sources and multi-turn recall, every policy."""
    from benchmarks.quality import main  # lazy: torch, off --help

    main(
        policies=policies,
        densities=densities,
        tasks=tasks,
        items=items,
        seeds=seeds,
        context_tokens=context_tokens,
        model=model,
        threads=threads,
        quick=quick,
        cache_option=cache_option,
        modes=modes,
        json_path=json_path,
        plot_path=plot_path,
    )


def speed(
    model: Annotated[str, typer.Option(help="Model registry name, HF id, local directory, or 'tiny'.")] = DEFAULT_MODEL,
    contexts: Annotated[str, typer.Option(help="Comma-separated prompt lengths.")] = "1024,2048,4096,7168",
    steps: Annotated[int, typer.Option(min=2, help="Decoded tokens per measurement.")] = 64,
    memory_context: Annotated[int, typer.Option(min=64, help="Prompt length of the memory comparison.")] = 7168,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads.")] = 1,
    rss: Annotated[bool, typer.Option(help="Also measure RSS high-water marks in fresh subprocesses.")] = True,
    quick: Annotated[bool, typer.Option(help="Tiny random model, short contexts (checks the machinery).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")] = None,
) -> None:
    """Decode tokens/s and step latency (nexus vs full), prefill peak memory, cache bytes; ratios from one run."""
    from benchmarks.speed import main  # lazy: torch, off --help

    main(
        model=model,
        contexts=contexts,
        steps=steps,
        memory_context=memory_context,
        threads=threads,
        rss=rss,
        quick=quick,
        json_path=json_path,
    )


def decode_cmd(
    model: Annotated[str, typer.Option(help="Model registry name, HF id, local directory, or 'tiny'.")] = DEFAULT_MODEL,
    dtype: Annotated[str | None, typer.Option(help="Model dtype (default: bf16 where native, else fp32).")] = None,
    contexts: Annotated[str, typer.Option(help="Comma-separated prompt lengths.")] = "1024,2048,4096",
    policies: Annotated[str, typer.Option(help="Comma-separated POLICY[@key=value] specs.")] = "full,nexus-agent,h2o",
    density: Annotated[float, typer.Option(min=0.01, max=1.0, help="Budget of evicting policies.")] = 0.25,
    engines: Annotated[str, typer.Option(help="KV storage engines compared: eager, static.")] = ",".join(ENGINES),
    steps: Annotated[int, typer.Option(min=2, help="Decoded tokens per measurement.")] = 64,
    batch: Annotated[int, typer.Option(min=1, help="Sessions of the batched decode (1: batch 1 only).")] = 4,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads.")] = 1,
    shape: Annotated[str | None, typer.Option(help="Random weights of a real shape: qwen3-8b, qwen3-32b.")] = None,
    layers: Annotated[int | None, typer.Option(min=1, help="Decoder layers of --shape (default: all).")] = None,
    device: Annotated[str, typer.Option(help="Where the model and caches live: cpu, cuda.")] = "cpu",
    quick: Annotated[bool, typer.Option(help="Tiny random model, short contexts (checks the machinery).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")] = None,
) -> None:
    """Decode tokens/s and ms/step per policy and KV engine, batch 1 and N, against the memory-bandwidth bound."""
    from benchmarks.decode import main  # lazy: torch, off --help

    main(
        model=model,
        dtype=dtype,
        contexts=contexts,
        policies=policies,
        density=density,
        engines=engines,
        steps=steps,
        batch=batch,
        threads=threads,
        shape=shape,
        layers=layers,
        device=device,
        quick=quick,
        json_path=json_path,
    )


def reservoir_cmd(
    model: Annotated[str, typer.Option(help="model registry name / HF id / local directory")] = "smollm2-135m",
    tokens: Annotated[int, typer.Option(help="prefix of the conversation whose scores are used")] = 2048,
    share: Annotated[float, typer.Option(help="K as a share of the blocks")] = 0.25,
    ns: Annotated[str, typer.Option(help="uniforms averaged per candidate, comma-separated")] = "1,5,25,100,1000",
    means: Annotated[str, typer.Option(help="weight scales: 'raw' and/or mean values")] = "raw,1,0.1",
    draws: Annotated[int, typer.Option(help="reservoir draws per layer")] = 20,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
) -> None:
    """Reservoir kept set vs top-K at the real weight scale, and rescaled."""
    from benchmarks.reservoir_scale import main  # lazy: torch, off --help

    main(model=model, tokens=tokens, share=share, ns=ns, means=means, draws=draws, json_out=json_out)


def serve_bench(
    model: Annotated[str, typer.Option(help="Registry name, HF id or local model directory.")] = DEFAULT_MODEL,
    quick: Annotated[bool, typer.Option("--quick", help="A small plan (CI): 1 and 4 clients, short turns.")] = False,
    clients: Annotated[str, typer.Option(help="Comma-separated concurrent sessions per phase.")] = "1,4,16,64",
    turns: Annotated[int, typer.Option(min=1, help="Requests per session.")] = ServePlan.turns,
    prompt_tokens: Annotated[int, typer.Option(min=1, help="Tokens of each task message.")] = ServePlan.prompt_tokens,
    reply_tokens: Annotated[int, typer.Option(min=1, help="max_tokens of each reply.")] = ServePlan.reply_tokens,
    fit_cap: Annotated[float, typer.Option(help="KV cap of the fit test in MiB.")] = ServePlan.fit_cap_mib,
    stall_tokens: Annotated[
        int, typer.Option(min=0, help="Newcomer prompt of the stall test, interleaved vs whole prefill (0: skip).")
    ] = StallPlan.newcomer_tokens,
    prefill_chunk: Annotated[
        int, typer.Option(min=1, help="Prefill chunk of the stall and admission tests.")
    ] = StallPlan.chunk,
    admission_clients: Annotated[
        int, typer.Option(min=0, help="Clients of the admission test, all at once (0: skip).")
    ] = AdmissionPlan.clients,
    admission_sessions: Annotated[
        int, typer.Option(min=1, help="--max-sessions of the admission test's server.")
    ] = AdmissionPlan.max_sessions,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads (default: all cores, 1 if busy).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, ... (default: a GPU when present).")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 | fp16 | fp32 (default: bf16 where supported).")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
) -> None:
    """N concurrent agent sessions on one server: batched vs one at a time, TTFT, sessions that fit a KV cap."""
    from benchmarks.serve import main  # lazy: torch, off --help

    main(
        model=model,
        quick=quick,
        clients=clients,
        turns=turns,
        prompt_tokens=prompt_tokens,
        reply_tokens=reply_tokens,
        fit_cap=fit_cap,
        stall_tokens=stall_tokens,
        prefill_chunk=prefill_chunk,
        admission_clients=admission_clients,
        admission_sessions=admission_sessions,
        threads=threads,
        device=device,
        dtype=dtype,
        json_path=json_path,
    )


def replay(
    traces: Annotated[
        list[Path] | None, typer.Argument(help="conversation files (.traj.json / .jsonl) or folders of them")
    ] = None,
    model: Annotated[str, typer.Option(help="model registry name / HF id / local directory")] = "smollm2-135m",
    specs: Annotated[
        str | None,
        typer.Option(
            help="';'-separated 'nexus;nexus@window=64,protect=system' ('' with --bound/--oracle: only those)"
        ),
    ] = None,
    budgets: Annotated[str, typer.Option(help="shares of the replayed length or tokens, comma-separated")] = "0.25,0.5",
    max_tokens: Annotated[int | None, typer.Option(help="tokens replayed per conversation (default: all)")] = None,
    limit: Annotated[int | None, typer.Option(help="replay only the first N conversations")] = None,
    seeds: Annotated[int, typer.Option(help="cache seeds per spec")] = 1,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads")] = 1,
    dtype: Annotated[
        str | None,
        typer.Option(help="bf16 | fp16 | fp32 (default: bf16 on a GPU or a CPU with native bf16, else fp32)"),
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="memory profile (nexus-agent calibrate) for every replayed session")
    ] = None,
    bound: Annotated[
        bool, typer.Option(help=f"also replay the query-specific bound ({BOUND}): each query its B best past tokens")
    ] = False,
    oracle: Annotated[
        str | None,
        typer.Option(
            help="also replay set oracles: evicting caches that rank by the attention the next reply ('next') or "
            "every reply still to come ('future') gives on the full cache; 'next,future' for both"
        ),
    ] = None,
    oracle_slack: Annotated[
        int,
        typer.Option(
            min=0,
            help="the oracles' prefill_slack: 0 evicts after every prefill chunk, as the baselines do; 4096 evicts "
            "each message once, as the default memory does (runs labelled ORACLE@prefill_slack=N)",
        ),
    ] = 0,
    cross_fit_folds: Annotated[
        int | None,
        typer.Option(
            "--cross-fit",
            help="split the conversations into K folds (in order) and replay each fold with a memory profile "
            "calibrated outside it (runs labelled SPEC+profile)",
        ),
    ] = None,
    calibrate_on: Annotated[
        int, typer.Option(help="with --cross-fit: the conversations each fold's profile is calibrated on")
    ] = 2,
    learn: Annotated[
        int,
        typer.Option(
            min=0,
            help="replay the first N conversations without a memory profile and the rest with one calibrated on "
            "those N, as solve's and chat's learning (N = 1: the first trace's task statement marked) and eval "
            "--warmup N run (runs labelled SPEC+learned); 0: off",
        ),
    ] = 0,
    system: Annotated[
        str,
        typer.Option(
            help="recorded: each trace's own system message, tools and tool calls through the chat template; "
            "project: this project's system prompt and call format; agent: also the built-in agent's task message "
            "(what its shipped memory profiles match)"
        ),
    ] = "recorded",
    quick: Annotated[bool, typer.Option(help="1 conversation, 3072 tokens, 3 specs, budget 0.5")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="write the PNG plot")] = None,
    table_out: Annotated[Path | None, typer.Option("--table", help="write the summary table as text")] = None,
) -> None:
    """Replay recorded agent conversations under each memory and budget; fidelity to the full cache."""
    from benchmarks.replay import main  # lazy: torch, off --help

    main(
        traces=traces,
        model=model,
        specs=specs,
        budgets=budgets,
        max_tokens=max_tokens,
        limit=limit,
        seeds=seeds,
        threads=threads,
        dtype=dtype,
        profile=profile,
        bound=bound,
        oracle=oracle,
        oracle_slack=oracle_slack,
        cross_fit_folds=cross_fit_folds,
        calibrate_on=calibrate_on,
        learn=learn,
        system=system,
        quick=quick,
        json_out=json_out,
        plot_out=plot_out,
        table_out=table_out,
    )
