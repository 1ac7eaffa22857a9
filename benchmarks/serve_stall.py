"""The stall a long newcomer's prefill inflicts on the sessions already decoding, interleaved vs whole.

Two servers on one loaded model, one after the other: `interleaved` (the newcomer's prefill runs one chunk per
scheduler loop, between the decode steps of the others) and `whole` (all of it at admission). In each, a few
clients stream long greedy replies; once all are decoding, a newcomer with a long prompt arrives. Measured: the
newcomer's time to first token, and for the clients still decoding when it got its first token, the longest gap
between two of their tokens across its prefill (the stall) and how many tokens they received meanwhile.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks.serve_client import stream_chat
from benchmarks.serve_workload import conversations
from kvstore.session.config import MemorySettings
from server.config import ServeConfig


@dataclass
class StallPlan:
    """The stall measurement of `bench serve`."""

    active: int = 2  # clients decoding when the newcomer arrives
    active_reply_tokens: int = 96  # max_tokens of their replies (greedy; long enough to outlast the prefill)
    newcomer_tokens: int = 3000  # tokens of the newcomer's task message
    chunk: int = 128  # prefill chunk of both servers (eviction runs after each chunk either way)
    density: float = 0.2  # nexus budget of every session


def measure_stall(model, tokenizer, name: str, plan: StallPlan, prompt_tokens: int) -> dict[str, Any]:
    """Both servers side by side on the same workload; per mode the figures, plus whether the replies agreed."""
    convs, source = conversations(plan.active + 1, 1, prompt_tokens, 10, tokenizer)
    newcomer = conversations(plan.active + 2, 1, plan.newcomer_tokens, 10, tokenizer)[0][-1].opening
    modes = {mode: _one(model, tokenizer, name, plan, mode == "interleaved", convs[: plan.active], newcomer)
             for mode in ("interleaved", "whole")}  # fmt: skip
    same = modes["interleaved"].pop("replies") == modes["whole"].pop("replies")
    return {"plan": plan.__dict__, "workload": source, "same_replies": same, **modes}


def _one(model, tokenizer, name: str, plan: StallPlan, interleave: bool, actives, newcomer) -> dict[str, Any]:
    from server.app import Server  # lazy: torch, transformers, off --help

    memory = MemorySettings(model=name, budget=plan.density)
    config = ServeConfig(port=0, memory=memory, chunk_size=plan.chunk, interleave_prefill=interleave)
    server = Server(model, tokenizer, config).start()
    stamps: list[list[float]] = [[] for _ in actives]
    lock = threading.Lock()

    def client(i: int):
        def stamp(_piece: str) -> None:
            with lock:
                stamps[i].append(time.perf_counter())

        return stream_chat(server.url, actives[i].opening, plan.active_reply_tokens, on_piece=stamp)

    try:
        with ThreadPoolExecutor(len(actives)) as pool:
            futures = [pool.submit(client, i) for i in range(len(actives))]
            while not all(stamps) and not any(f.done() for f in futures):
                time.sleep(0.01)
            t0 = time.perf_counter()
            new = stream_chat(server.url, newcomer, 4)
            t1 = t0 + new.ttft_s
            replies = [f.result().text for f in futures]
    finally:
        server.close()
    still = [s for s in stamps if s and s[-1] > t1]  # clients that were still decoding when the newcomer was served
    return {
        "newcomer_prefill_tokens": new.nexus["turn"]["prefill_tokens"],
        "newcomer_ttft_s": new.ttft_s,
        "clients_still_decoding": len(still),
        "stall_max_s": max((_longest_gap(s, t0, t1) for s in still), default=None),
        "tokens_during_prefill": sum(t0 <= x <= t1 for s in still for x in s),
        "replies": replies,
    }


def _longest_gap(stamps: list[float], t0: float, t1: float) -> float:
    """The longest wait between consecutive tokens over [t0, t1] (the gaps that overlap it)."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False) if b >= t0 and a <= t1]
    return max(gaps, default=t1 - t0)


def stall_line(result: dict[str, Any]) -> str:
    """One line for the terminal: the two modes side by side."""
    i, w, p = result["interleaved"], result["whole"], result["plan"]

    def part(r: dict[str, Any]) -> str:
        stall = "n/a" if r["stall_max_s"] is None else f"{r['stall_max_s']:.2f} s"
        return (f"TTFT {r['newcomer_ttft_s']:.2f} s, longest stall {stall}, {r['tokens_during_prefill']} tokens to "
                f"{r['clients_still_decoding']} decoding clients meanwhile")  # fmt: skip

    head = f"newcomer of {i['newcomer_prefill_tokens']} tokens (chunk {p['chunk']}) while {p['active']} sessions decode"
    return f"{head}: interleaved {part(i)} | whole prefill {part(w)} | same replies: {result['same_replies']}"
