"""`bench serve`'s admission test: many more clients than resident sessions (`--max-sessions`), in multi-turn
conversations, against one server: does every conversation finish, are tokens generated in every second, what is
the turn latency's tail, and what resident memory does the load leave behind.

Each client streams its turns (greedy), each request carrying the whole conversation so far; every text piece is
time-stamped as it arrives. Reported: conversations finished and failed (with the first error), the whole seconds
from the first token to the last with no token arriving (an admission stall; before the first token the first
prefill runs, reported as `first_token_s`), turn latency p50 / p99 / max and time to first token p99, and
this process's RSS before the clients start, right after they finish, and 10 s later (the server returns freed
memory to the system once idle, server/heap.py).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from benchmarks.memtrack import rss_mib
from benchmarks.plans import AdmissionPlan
from benchmarks.serve_client import ServedError, Timed, stream_chat
from benchmarks.serve_workload import Conversation
from kvstore.session.config import MemorySettings
from server.app import Server
from server.config import ServeConfig

SETTLE_S = 10.0  # seconds after the clients close before the last RSS reading


def converse(url: str, conv: Conversation, plan: AdmissionPlan, stamps: list[float]) -> tuple[list[Timed], str]:
    """One client's turns; ("", answers) when all were answered, else the first error with the answers before it."""
    messages, answers = list(conv.opening), []
    for obs in (conv.observations * plan.turns)[: plan.turns]:
        try:
            answers.append(stream_chat(url, messages, plan.reply_tokens, on_piece=lambda _: stamps.append(time.time())))
        except (ServedError, OSError) as exc:
            return answers, str(exc)
        messages += [{"role": "assistant", "content": answers[-1].text}, {"role": "user", "content": obs}]
    return answers, ""


def measure_admission(model, tokenizer, name: str, convs: list[Conversation], plan: AdmissionPlan) -> dict[str, Any]:
    """Run `plan.clients` conversations at once on a server of `plan.max_sessions` resident sessions."""

    config = ServeConfig(port=0, memory=MemorySettings(model=name), max_sessions=plan.max_sessions,
                         max_batch=plan.max_batch, chunk_size=plan.chunk,
                         queue_timeout_s=plan.queue_timeout_s)  # fmt: skip
    server = Server(model, tokenizer, config).start()
    try:
        stamps: list[float] = []
        rss_before, t0 = rss_mib(), time.time()
        with ThreadPoolExecutor(plan.clients) as pool:
            done = list(pool.map(lambda c: converse(server.url, c, plan, stamps), convs[: plan.clients]))
        wall, rss_after = time.time() - t0, rss_mib()
        time.sleep(SETTLE_S)
        return summary(done, sorted(stamps), t0, wall, server.metrics.counters, plan) | {
            "rss_before_mib": rss_before, "rss_after_mib": rss_after, "rss_settled_mib": rss_mib(),
        }  # fmt: skip
    finally:
        server.close()


def summary(done, stamps: list[float], t0: float, wall: float, counters: dict, plan: AdmissionPlan) -> dict[str, Any]:
    """The figures of one run (module doc)."""
    turns = [a for answers, _ in done for a in answers]
    errors = [e for _, e in done if e]
    seen = {int(s - t0) for s in stamps}
    first = int(stamps[0] - t0) if stamps else int(wall)
    silent = [s for s in range(first, int(wall)) if s not in seen]  # whole seconds after the first token without one
    return {
        "plan": asdict(plan), "wall_s": wall, "conversations": len(done), "finished": len(done) - len(errors),
        "failed": len(errors), "first_error": errors[0] if errors else None, "turns": len(turns),
        "seconds_without_tokens": len(silent), "silent_seconds": silent[:20],
        "first_token_s": stamps[0] - t0 if stamps else None,
        "latency_p50_s": _quantile([a.total_s for a in turns], 0.5),
        "latency_p99_s": _quantile([a.total_s for a in turns], 0.99),
        "latency_max_s": max((a.total_s for a in turns), default=None),
        "ttft_p99_s": _quantile([a.ttft_s for a in turns], 0.99),
        "sessions_parked": counters.get("sessions_parked_total", 0), "tokens": len(stamps),
    }  # fmt: skip


def _quantile(values: list[float], q: float) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def admission_line(r: dict[str, Any]) -> str:
    p, f = r["plan"], _seconds
    return (
        f"admission: {p['clients']} clients x {p['turns']} turns on --max-sessions {p['max_sessions']}: "
        f"{r['finished']}/{r['conversations']} conversations finished in {r['wall_s']:.1f} s, "
        f"{r['seconds_without_tokens']} s without tokens after the first at {f(r['first_token_s'])}, "
        f"latency p50 {f(r['latency_p50_s'])} p99 "
        f"{f(r['latency_p99_s'])} max {f(r['latency_max_s'])}, TTFT p99 {f(r['ttft_p99_s'])}, "
        f"{r['sessions_parked']:.0f} parks; RSS {_mib(r['rss_before_mib'])} before, {_mib(r['rss_after_mib'])} "
        f"after, {_mib(r['rss_settled_mib'])} {SETTLE_S:.0f} s later"
        + (f"; first error: {r['first_error']}" if r["failed"] else "")
    )


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} MiB"
