"""`nexus-agent bench replay`: fidelity of each memory on recorded agent conversations.

Each conversation, rendered as the model would see it (benchmarks.replay_trace: the recorded system message, tools,
tool calls and reasoning through the chat template; `--system project` for this project's prompt and call format,
`--system agent` for the built-in agent's whole opening, which its shipped memory profiles match), is
replayed teacher-forced through a Session in true-eviction mode, once on the full cache (the
reference) and once per spec x budget x seed; every assistant token's next-token distribution is compared with the
full cache's: mean KL(full || policy), extra NLL of the recorded token, top-1 agreement (benchmarks.replay_run).
"""

from __future__ import annotations

import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from rich.console import Console

from benchmarks.common import console, write_json
from benchmarks.machine import machine
from benchmarks.plans import BOUND
from benchmarks.replay_bound import check_model, query_top_b
from benchmarks.replay_data import default_traces
from benchmarks.replay_oracle import ReplyAttention, oracle_label, oracle_session, parse_horizons
from benchmarks.replay_profiles import check_cross_fit, cross_fit, first_statement_variants, learn_first
from benchmarks.replay_report import curves, plot, run_label, summarize, summary_table, target_rows, target_table
from benchmarks.replay_run import Spec, budget_tokens, compare, reference, session_for
from benchmarks.replay_trace import Replayed, check_system, load_replayed
from kvstore import POLICIES
from kvstore.cache.config import parse_policy_spec
from kvstore.defaults import DEFAULT_POLICY, DEFAULT_PROTOCOL, parse_budget
from kvstore.errors import KVStoreError
from kvstore.policies import uses_profile
from kvstore.session.config import PROTOCOLS
from kvstore.session.teacher import Plan, plan
from pipeline.conversations import Conversation, conversation_files

# one conversation, its first ~3k tokens (the shared traces' openings are 2.1-4.2k tokens), three specs, one budget
QUICK = {"traces": 1, "max_tokens": 3072, "budgets": (0.5,), "specs": ("streaming", "nexus", "nexus-agent")}


@dataclass
class ReplayConfig:
    """What one replay run covers."""

    specs: tuple[Spec, ...]  # memory configurations (policy + options + protection)
    budgets: tuple[float | int, ...] = (0.25, 0.5)  # shares of the replayed length (float) or tokens per layer (int)
    max_tokens: int | None = None  # tokens replayed per conversation; None = the model's positions
    seeds: int = 1  # cache seeds per spec (reservoir selectors draw differently per seed)
    traces: list[Path] = field(default_factory=list)  # conversation files
    profile: Path | None = None  # memory profile every replayed session gets (runs labelled SPEC+profile)
    bound: bool = False  # also replay the query-specific bound at every budget (benchmarks.replay_bound)
    oracle: tuple[str, ...] = ()  # also replay these set oracles at every budget: "next", "future" (replay_oracle)
    oracle_slack: int = 0  # the oracles' prefill_slack (0: they evict after every chunk; 4096: once per message)
    fold_profiles: dict[Path, Path] = field(default_factory=dict)  # --cross-fit / --learn: each trace's own profile
    learn: int = 0  # --learn N: the first N traces without a profile, the rest with one learned from them
    system: str = "recorded"  # the recorded system message, or "project": this project's (benchmarks.replay_trace)


def parse_spec(text: str) -> Spec:
    """`POLICY[@key=value,...]`: CacheConfig options, protect=system+task|system|none,
    protocol=true-eviction|re-prefill, or profile=none (this spec runs without the run's memory profile, so one run
    compares a memory with and without it). research/'s variants: run `python research/nexus_agent.py bench replay`."""
    session = {"protect": "none", "protocol": DEFAULT_PROTOCOL}
    policy_text, _, option_text = text.partition("@")
    given = [o for o in option_text.split(",") if o.strip()]
    kept = [o for o in given if o.replace(" ", "") != "profile=none"]
    # an unknown policy or a bad option fails here, one message
    policy, options = parse_policy_spec(policy_text + ("@" + ",".join(kept) if kept else ""), session)
    if session["protocol"] not in PROTOCOLS:
        raise KVStoreError(f"spec {text!r}: protocol must be one of {', '.join(PROTOCOLS)}")
    spec = Spec(policy, tuple(sorted(options.items())), session["protect"], text.strip(), session["protocol"])
    return replace(spec, profiled=len(kept) == len(given))


def spec_label(spec: Spec, profiled: bool, learned: bool = False) -> str:
    """`run_label` for a replayed spec: a policy that ignores memory profiles (the baselines) keeps its plain name,
    since a profile changes nothing it does."""
    reads = uses_profile(spec.policy) and spec.profiled
    return run_label(spec.name, profiled and reads, learned and reads)


def replay_budget(text: str) -> float | int:
    """One of --budgets, read as every budget is (kvstore.defaults.parse_budget): a share of the replayed length in
    (0, 1] ("0.25", "25%") or tokens per layer ("2048")."""
    try:
        value = parse_budget(text)
    except KVStoreError:
        value = None
    if value is None:  # 'none' compares nothing
        raise KVStoreError(f"budget {text!r}: a share in (0, 1] or a whole number of tokens")
    return value


def skip_reason(conv: Conversation, limit: int) -> str:
    """Why `plan` found nothing to replay in a conversation."""
    if not any(m["role"] == "user" for m in conv.messages):
        return "no user message: nothing opens the conversation"
    if not any(m["role"] == "assistant" for m in conv.messages):
        return "no reply recorded (the recording ended before the first)"
    return f"not even the opening and the first reply fit in {limit} tokens"


def prepare(path: Path, cfg: ReplayConfig, tokenizer, limit: int, result: dict) -> tuple[Replayed, Plan] | None:
    """A conversation rendered for the replay and its plan; None (recorded in `result["failed"]` with the reason,
    and said) when nothing of it can be replayed. What the trace holds that could not be rendered is said too."""
    rep = load_replayed(path, tokenizer, cfg.system)
    conv = rep.conversation
    for warning in rep.warnings:
        console.print(f"[yellow]{conv.name}: {warning}")
    p = plan(conv.messages, rep.renderer, limit)
    if p is None:
        reason = skip_reason(conv, limit)
        result["failed"].append({"conversation": conv.name, "spec": None, "budget": None, "error": reason})
        console.print(f"[yellow]{conv.name}: {reason}; skipped")
        return None
    return rep, p


def run(cfg: ReplayConfig, model, tokenizer, on_progress=None) -> dict:
    """Replay every conversation: the reference once, then every spec x budget x seed against it."""
    limit = min(cfg.max_tokens or 10**9, int(model.config.max_position_embeddings))
    result: dict = {"conversations": [], "runs": [], "failed": []}
    for path in cfg.traces:
        run_profile = cfg.fold_profiles.get(path, cfg.profile)
        run_profile = None if run_profile is None else str(run_profile)
        prepared = prepare(path, cfg, tokenizer, limit, result)
        if prepared is None:
            continue
        (rep, p), conv = prepared, prepared[0].conversation
        t0 = time.perf_counter()
        full = session_for(model, tokenizer, Spec("full"), None, 0, renderer=rep.renderer)
        record = ReplyAttention(len(full.cache.layers)) if cfg.oracle else None
        with record.recording(model) if record is not None else nullcontext():
            ref = reference(full, p, record)
        replies = sum(m["role"] == "assistant" for m in p.rest)
        info = {"name": conv.name, "tokens": p.tokens, "messages": 1 + len(p.rest), "replies": replies}
        info |= {"scored_tokens": sum(len(t) for t in ref.targets), "reference_s": time.perf_counter() - t0}
        info |= {"reasoning_chars": rep.reasoning_chars, "warnings": rep.warnings}
        result["conversations"].append(info)
        for budget in cfg.budgets:
            tokens = budget_tokens(budget, p.tokens)
            for spec in cfg.specs:
                profile = run_profile if spec.profiled else None
                for seed in range(cfg.seeds):
                    t1 = time.perf_counter()
                    label = spec_label(spec, profile is not None, cfg.learn > 0)
                    run_ = {"spec": label, "budget": budget, "budget_tokens": tokens, "seed": seed}
                    try:
                        session = session_for(model, tokenizer, spec, tokens, seed, profile, rep.renderer)
                        turns = compare(session, p, ref)
                    except KVStoreError as e:  # e.g. a budget that cannot hold the protected opening
                        result["failed"].append(run_ | {"conversation": conv.name, "error": str(e)})
                        console.print(f"[yellow]{conv.name} {spec.name} @ {budget}: {e}")
                        continue
                    run_ |= {"conversation": conv.name, "seconds": time.perf_counter() - t1}
                    if profile is not None and uses_profile(spec.policy):  # a fold's profile by its file name
                        shown = Path(profile).name if path in cfg.fold_profiles else profile
                        run_ |= {"profile": shown, "profile_status": session.profile_status}
                    result["runs"].append(run_ | {"turns": [t.to_dict() for t in turns]})
                    if on_progress is not None:  # a stopped run keeps every finished replay
                        on_progress(result)
            oracles = [(oracle_label(h, cfg.oracle_slack), h) for h in cfg.oracle]
            for label, horizon in ([(BOUND, None)] if cfg.bound else []) + oracles:
                t1 = time.perf_counter()
                if horizon is None:
                    with query_top_b(model, tokens):
                        full = session_for(model, tokenizer, Spec("full"), None, 0, None, rep.renderer)
                        turns = compare(full, p, ref)
                else:
                    session = oracle_session(model, tokenizer, tokens, record, horizon, cfg.oracle_slack)
                    session.renderer = rep.renderer  # the trace's template tools, as every replayed session
                    turns = compare(session, p, ref)
                run_ = {"spec": label, "budget": budget, "budget_tokens": tokens, "seed": 0}
                run_ |= {"conversation": conv.name, "seconds": time.perf_counter() - t1}
                result["runs"].append(run_ | {"turns": [t.to_dict() for t in turns]})
                if on_progress is not None:
                    on_progress(result)
        console.print(f"{conv.name}: {p.tokens} tokens, {replies} replies, {time.perf_counter() - t0:.0f}s")
    return result


def finish(result: dict, cfg_info: dict, json_path: Path | None, plot_path: Path | None, table_path: Path | None):
    """Summaries, curves, the table (terminal and file), the JSON and the plot."""
    rows = summarize(result["runs"])
    defaults = (DEFAULT_POLICY, run_label(DEFAULT_POLICY, True), run_label(DEFAULT_POLICY, False, True))
    targets = [t for d in defaults for t in target_rows(rows, d)]
    result |= {"config": cfg_info, "summary": rows, "targets": targets}
    result["curves"] = {"tokens_seen": curves(result["runs"]), "turn": curves(result["runs"], "turn", 1)}
    n = len(result["conversations"])
    tokens = sum(c["scored_tokens"] for c in result["conversations"])
    # the dtype moves top-1 more than the CPU does (research/memory-notebook.md, "bf16 or fp32"): name it
    model = Path(str(cfg_info.get("model"))).name  # a registry name, or a local directory's name
    title = f"bench replay: {model} in {cfg_info.get('dtype')}, {n} conversations, {tokens} tokens"
    tables = [summary_table(rows, title)] + ([target_table(targets)] if targets else [])
    console.print(*tables)
    if table_path is not None:
        table_path.parent.mkdir(parents=True, exist_ok=True)
        with table_path.open("w") as fh:
            Console(file=fh, width=160).print(*tables)
    write_json(json_path, result)
    if plot_path is not None and rows:
        plot(rows, result["runs"], plot_path)
        console.print(f"wrote {plot_path}")


def main(
    traces,
    model,
    specs,
    budgets,
    max_tokens,
    limit,
    seeds,
    threads,
    dtype,
    profile,
    bound,
    oracle,
    oracle_slack,
    cross_fit_folds,
    calibrate_on,
    learn,
    system,
    quick,
    json_out,
    plot_out,
    table_out,
) -> None:
    """bench replay as commands.replay parsed it (its options and their meaning are there)."""
    from kvstore.models.registry import load_model

    torch.set_num_threads(threads)
    files = conversation_files(traces) if traces else default_traces()
    if not files:
        raise KVStoreError("no conversations: give files, or set NEXUS_SHARED_DATA to the shared data folder")
    try:
        horizons = parse_horizons(oracle)
    except ValueError as e:
        raise KVStoreError(str(e)) from None
    if specs is None:
        spec_list = [p for p in POLICIES if p != "full"]
    else:  # --specs '' replays only what --bound and --oracle ask for
        spec_list = [s for s in specs.split(";") if s.strip()]
        if not spec_list and not (bound or horizons):
            raise KVStoreError("--specs names no memory: give at least one, or --bound / --oracle with --specs ''")
    budget_list = [replay_budget(b) for b in budgets.split(",") if b.strip()]
    if quick:
        files, max_tokens = files[: QUICK["traces"]], min(max_tokens or QUICK["max_tokens"], QUICK["max_tokens"])
        spec_list, budget_list = specs and spec_list or list(QUICK["specs"]), list(QUICK["budgets"])
    files = files[:limit] if limit else files
    specs_ = tuple(parse_spec(s) for s in spec_list)
    cfg = ReplayConfig(
        specs_, tuple(budget_list), max_tokens, seeds, files, profile, bound, horizons, oracle_slack, learn=learn
    )
    cfg.system = check_system(system)
    if sum(x is not None and x != 0 for x in (profile, cross_fit_folds, learn)) > 1:
        raise KVStoreError("give one of --profile, --cross-fit and --learn")
    if learn and not learn < len(files):
        raise KVStoreError(f"--learn {learn}: give fewer than the {len(files)} conversations")
    if learn == 1:
        first_statement_variants(files)  # before the model loads
    if profile is not None:
        from kvstore.profiles.profile import MemoryProfile

        MemoryProfile.load(profile)  # a missing or corrupt file fails here, before any replay
    if cross_fit_folds is not None:
        check_cross_fit(files, cross_fit_folds, calibrate_on)  # before the model loads
    m, tok, info = load_model(model, dtype=dtype)
    if bound or horizons:
        check_model(m)  # before any replay, not after the policies' runs
    profiled = profile is not None or cross_fit_folds is not None
    cfg_info = {"model": model, "dtype": info.dtype, "specs": [spec_label(s, profiled, learn > 0) for s in specs_]}
    cfg_info["budgets"] = budget_list
    cfg_info |= {"max_tokens": max_tokens, "seeds": seeds, "traces": [str(f) for f in files], "bound": bound}
    cfg_info["oracle"], cfg_info["oracle_slack"] = list(horizons), oracle_slack
    cfg_info["system"] = system
    cfg_info["machine"] = machine(next(m.parameters()).device)

    def checkpoint(result: dict) -> None:  # a stopped run keeps the replays it finished
        write_json(json_out, result | {"config": cfg_info, "partial": True})

    with tempfile.TemporaryDirectory(prefix="nexus-cross-fit-") as where:
        if cross_fit_folds is not None:
            cfg.fold_profiles, record = cross_fit(
                files, cross_fit_folds, calibrate_on, m, tok, max_tokens, Path(where), cfg.system
            )
            cfg_info["cross_fit"] = {"folds": cross_fit_folds, "calibrate_on": calibrate_on, "profiles": record}
        if learn:
            learned = learn_first(files, learn, m, tok, max_tokens, Path(where), cfg.system)
            cfg.fold_profiles, cfg_info["learn"] = learned
        finish(run(cfg, m, tok, checkpoint if json_out else None), cfg_info, json_out, plot_out, table_out)
