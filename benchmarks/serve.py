"""`nexus-agent bench serve`: N concurrent agent sessions against one server, batched vs one at a time, and how many
sessions fit under a fixed KV memory cap with nexus at 20% vs the full cache.

Two servers share one loaded model in this process and run one after the other, phase by phase, so machine load
hits both alike: `batched` (max_batch 16) and `serial` (max_batch 1: one session decodes at a time). For each N in
the plan, N clients each replay one agent conversation (shared traces, else synthetic) for a few turns, streaming
greedy replies; the same replies come back from both servers (checked). Reported per N: aggregate tokens/s
(completion tokens / wall time, prefill included), the servers' pure decode tokens/s (decode tokens / time in
decode steps), time to first token, and the resident memory (RSS) of this process (servers and clients) before and
after the phase, so that memory a load leaves behind shows. The fit test opens sessions one by one under a KV cap
until the server has to park one: the sessions that were resident then are the ones that fit. The stall test
(benchmarks/serve_stall.py) measures what a long newcomer's prefill costs the sessions already decoding, with the
prefill interleaved chunk by chunk vs run whole. The admission test (benchmarks/serve_admission.py) runs many more
clients than resident sessions: conversations finished, seconds without tokens, latency p99, RSS.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.common import console, table, write_json
from benchmarks.memtrack import rss_mib
from benchmarks.plans import AdmissionPlan, ServePlan
from benchmarks.serve_admission import admission_line, measure_admission
from benchmarks.serve_client import Timed, stream_chat
from benchmarks.serve_stall import StallPlan, measure_stall, stall_line
from benchmarks.serve_workload import Conversation, conversations
from kvstore.models.registry import load_model
from kvstore.session.config import MemorySettings
from pipeline.backends import set_threads
from server.app import Server
from server.config import ServeConfig


def replay(url: str, conv: Conversation, plan: ServePlan) -> list[Timed]:
    """One client: the conversation's turns, each request carrying the whole conversation so far."""
    messages, answers = list(conv.opening), []
    for obs in conv.observations[: plan.turns]:
        answers.append(stream_chat(url, messages, plan.reply_tokens))
        messages += [{"role": "assistant", "content": answers[-1].text}, {"role": "user", "content": obs}]
    return answers


def phase(server, convs: list[Conversation], plan: ServePlan) -> dict[str, Any]:
    """All conversations at once against `server`; aggregate throughput and latency, then its sessions closed."""
    before, rss_before = dict(server.metrics.counters), rss_mib()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(convs)) as pool:
        answers = list(pool.map(lambda c: replay(server.url, c, plan), convs))
    wall = time.perf_counter() - t0
    after = server.metrics.counters
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    flat = [a for conv in answers for a in conv]
    tokens = sum(a.completion_tokens for a in flat)
    for sid in [e["id"] for e in server.sessions_info()]:
        server.registry.close(sid)
    return {
        "clients": len(convs),
        "wall_s": wall,
        "completion_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "decode_tokens_per_s": delta.get("decode_rows_total", 0) / max(delta.get("decode_seconds_total", 0), 1e-9),
        "mean_batch": delta.get("decode_rows_total", 0) / max(delta.get("decode_steps_total", 0), 1),
        "ttft_mean_s": statistics.mean(a.ttft_s for a in flat),
        "ttft_p50_s": statistics.median(a.ttft_s for a in flat),
        "ttft_max_s": max(a.ttft_s for a in flat),
        "rss_before_mib": rss_before,
        "rss_after_mib": rss_mib(),
        "replies": [[a.text for a in conv] for conv in answers],
    }


def fit(model, tokenizer, name: str, policy: str, budget, convs: list[Conversation], plan: ServePlan) -> dict:
    """Open sessions one by one under the KV cap until one must be parked; how many were resident then."""

    cap = int(plan.fit_cap_mib * 2**20)
    config = ServeConfig(port=0, memory=MemorySettings(model=name, policy=policy, budget=budget), memory_cap=cap,
                         max_batch=1, max_sessions=plan.fit_max + 1)  # fmt: skip
    server = Server(model, tokenizer, config).start()
    try:
        resident, held = 0, []
        for conv in convs[: plan.fit_max]:
            answer = stream_chat(server.url, conv.opening, 1)
            if server.metrics.counters.get("sessions_parked_total", 0) > 0:
                break
            resident += 1
            held.append(answer.nexus["turn"]["held_bytes"])
        mean_held = statistics.mean(held) if held else 0.0
        return {"policy": policy, "budget": budget, "cap_bytes": cap, "sessions": resident,
                "mean_held_bytes": mean_held, "hit_cap": resident < plan.fit_max}  # fmt: skip
    finally:
        server.close()


def run_bench(
    model, tokenizer, name: str, plan: ServePlan, stall: StallPlan | None = None, admission: AdmissionPlan | None = None
) -> dict[str, Any]:
    """The whole benchmark on a loaded model; a JSON-able result (`stall`: also the newcomer-stall measurement;
    `admission`: also the many-clients admission test)."""

    top = max(plan.clients)
    n = max(top, plan.fit_max, admission.clients if admission else 0)
    convs, source = conversations(n, plan.turns, plan.prompt_tokens, plan.obs_tokens, tokenizer)
    common = {"port": 0, "memory": MemorySettings(model=name, budget=plan.density), "max_sessions": 2 * top + 2}
    servers = {"batched": ServeConfig(**common, max_batch=16), "serial": ServeConfig(**common, max_batch=1)}
    started = {k: Server(model, tokenizer, c).start() for k, c in servers.items()}
    phases: list[dict[str, Any]] = []
    rss_start = rss_mib()
    try:
        for n in plan.clients:
            row = {mode: phase(server, convs[:n], plan) for mode, server in started.items()}
            row["same_replies"] = row["batched"].pop("replies") == row["serial"].pop("replies")
            row["clients"] = n
            phases.append(row)
            console.print(f"  {n:>2} clients: " + _line(row), highlight=False)
    finally:
        for server in started.values():
            server.close()
    rss = {"start_mib": rss_start, "end_mib": rss_mib()}  # the model loaded and servers up; after every phase
    fits = [fit(model, tokenizer, name, "nexus", plan.density, convs, plan),
            fit(model, tokenizer, name, "full", None, convs, plan)]  # fmt: skip
    result = {"benchmark": "serve", "model": name, "workload": source, "plan": asdict(plan), "phases": phases,
              "rss": rss, "fit": fits, "fit_ratio": fits[0]["sessions"] / max(fits[1]["sessions"], 1)}  # fmt: skip
    if stall is not None:
        result["stall"] = measure_stall(model, tokenizer, name, stall, plan.prompt_tokens)
        console.print("  " + stall_line(result["stall"]), highlight=False)
    if admission is not None:
        result["admission"] = measure_admission(model, tokenizer, name, convs, admission)
        console.print("  " + admission_line(result["admission"]), highlight=False)
    return result


def _line(row: dict[str, Any]) -> str:
    b, s = row["batched"], row["serial"]
    return (
        f"batched {b['tokens_per_s']:.1f} tok/s (decode {b['decode_tokens_per_s']:.1f}, batch {b['mean_batch']:.1f}) "
        f"vs serial {s['tokens_per_s']:.1f} tok/s (decode {s['decode_tokens_per_s']:.1f}); "
        f"TTFT {b['ttft_mean_s']:.2f} s vs {s['ttft_mean_s']:.2f} s; same replies: {row['same_replies']}; "
        f"RSS {_mib(b['rss_before_mib'])} -> {_mib(s['rss_after_mib'])}"
    )


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} MiB"


def print_report(result: dict[str, Any]) -> None:
    rows = []
    for r in result["phases"]:
        b, s = r["batched"], r["serial"]
        rows.append([r["clients"], f"{b['tokens_per_s']:.1f} / {s['tokens_per_s']:.1f}",
                     f"{b['tokens_per_s'] / max(s['tokens_per_s'], 1e-9):.2f}x",
                     f"{b['decode_tokens_per_s']:.1f} / {s['decode_tokens_per_s']:.1f}",
                     f"{b['decode_tokens_per_s'] / max(s['decode_tokens_per_s'], 1e-9):.2f}x", f"{b['mean_batch']:.1f}",
                     f"{b['ttft_mean_s']:.2f} / {s['ttft_mean_s']:.2f}",
                     f"{b['ttft_max_s']:.2f} / {s['ttft_max_s']:.2f}",
                     "yes" if r["same_replies"] else "NO",
                     f"{_mib(b['rss_before_mib'])} -> {_mib(s['rss_after_mib'])}"])  # fmt: skip
    cols = ["clients", "tok/s batched / serial", "ratio", "decode tok/s b / s", "ratio", "mean batch",
            "TTFT mean s b / s", "TTFT max s b / s", "same replies", "RSS before -> after"]  # fmt: skip
    console.print(table(f"{result['model']}: bench serve ({result['workload']} workload)", cols, rows))
    rss = result["rss"]
    console.print(f"process RSS (servers and clients): {_mib(rss['start_mib'])} with the servers up, "
                  f"{_mib(rss['end_mib'])} after every phase", highlight=False)  # fmt: skip
    nexus, full = result["fit"]
    console.print(
        f"under a KV cap of {nexus['cap_bytes'] / 2**20:.0f} MiB: nexus {nexus['budget']} fits {nexus['sessions']} "
        f"sessions ({nexus['mean_held_bytes'] / 2**20:.1f} MiB each), the full cache {full['sessions']} "
        f"({full['mean_held_bytes'] / 2**20:.1f} MiB each): {result['fit_ratio']:.1f}x more sessions",
        highlight=False,
    )
    if "stall" in result:
        console.print(stall_line(result["stall"]), highlight=False)
    if "admission" in result:
        console.print(admission_line(result["admission"]), highlight=False)


def main(
    model: str,
    quick: bool,
    clients: str,
    turns: int,
    prompt_tokens: int,
    reply_tokens: int,
    fit_cap: float,
    stall_tokens: int,
    prefill_chunk: int,
    admission_clients: int,
    admission_sessions: int,
    threads: int | None,
    device: str | None,
    dtype: str | None,
    json_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` serve_bench: its options and help are in benchmarks.commands.serve_bench."""

    stall = StallPlan(newcomer_tokens=stall_tokens, chunk=prefill_chunk) if stall_tokens else None
    admission = (
        None
        if not admission_clients
        else AdmissionPlan(
            clients=admission_clients,
            max_sessions=admission_sessions,
            turns=turns,
            reply_tokens=reply_tokens,
            chunk=prefill_chunk,
        )
    )
    if quick:
        plan = ServePlan.quick()
        stall = stall and StallPlan(
            newcomer_tokens=min(stall_tokens, 1200), chunk=prefill_chunk, active_reply_tokens=48
        )
        admission = admission and replace(admission, clients=16, max_sessions=4, turns=2, reply_tokens=8)
    else:
        sizes = tuple(int(c) for c in clients.split(","))
        plan = ServePlan(clients=sizes, turns=turns, prompt_tokens=prompt_tokens, reply_tokens=reply_tokens,
                         fit_cap_mib=fit_cap)  # fmt: skip
    set_threads(threads)
    loaded, tokenizer, info = load_model(model, device=device, dtype=dtype)
    result = run_bench(loaded, tokenizer, model, plan, stall, admission)
    result["model_info"] = asdict(info)
    print_report(result)
    write_json(json_path, result)
