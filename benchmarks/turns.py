"""`nexus-agent bench turns`: a simulated agent session under true eviction, re-prefill and a full cache.

One deterministic agent session (a long system prompt, then turns of a reply and a tool observation) is played
three times, interleaved turn by turn on the same model: true eviction (nexus, one cache for the session),
re-prefill (nexus, a new cache each turn over the whole history) and the full cache. Replies are forced (given
text appended as assistant tokens), so the three runs see exactly the same tokens; a turn's latency is the
prefill the model must do before it could answer. All ratios come from this one run.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import console, table, write_json
from benchmarks.plans import TurnsPlan
from kvstore.defaults import parse_budget
from kvstore.models.registry import load_model
from kvstore.session.session import Session, SessionConfig

RUNS = {  # run name -> (policy, protocol)
    "true-eviction": ("nexus", "true-eviction"),
    "re-prefill": ("nexus", "re-prefill"),
    "full": ("full", "true-eviction"),
}
_NAMES = ["parse_config", "load_rows", "merge", "TaskRunner", "cache", "validate", "path", "items", "result", "index"]
_WORDS = "the a file test fails because value is wrong when empty list returns None so check first line".split()


def synthetic(rng: random.Random, kind: str, n_tokens: int, tokenizer) -> str:
    """Deterministic agent-like text of about n_tokens: code listings (observations, prompt) or short replies."""
    lines: list[str] = []
    text = ""
    while len(tokenizer(text, add_special_tokens=False)["input_ids"]) < n_tokens:
        for _ in range(8):
            a, b = rng.choice(_NAMES), rng.choice(_NAMES)
            if kind == "reply":
                lines.append(f"The {a} {' '.join(rng.choices(_WORDS, k=6))}; I will inspect {b}.")
            else:
                lines.append(f"{len(lines) + 1:4d}    def {a}_{rng.randint(0, 99)}(self, {b}):  # {rng.choice(_WORDS)}")
        text = "\n".join(lines)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def script(plan: TurnsPlan, tokenizer) -> tuple[list[dict], list[list[dict]]]:
    """The opening messages and, per turn, the messages appended after it (forced reply + observation)."""
    rng = random.Random(plan.seed)
    opening = [
        {
            "role": "system",
            "content": "You are a coding agent.\n" + synthetic(rng, "code", plan.prompt_tokens, tokenizer),
        },
        {"role": "user", "content": "Fix the failing test in tests/test_rows.py."},
    ]
    turns = []
    for t in range(plan.turns):
        reply = synthetic(rng, "reply", plan.reply_tokens, tokenizer) + f"\n<function=execute_bash>step {t}</function>"
        turns.append(
            [
                {"role": "assistant", "content": reply},
                {"role": "tool", "content": synthetic(rng, "code", plan.obs_tokens, tokenizer)},
            ]
        )
    return opening, turns


def open_sessions(model, tokenizer, name: str, plan: TurnsPlan, budget) -> dict[str, Session]:
    """One session per run, each on the same model."""
    sessions = {}
    for run, (policy, protocol) in RUNS.items():
        config = SessionConfig(
            model=name, policy=policy, budget=None if policy == "full" else budget, protocol=protocol, seed=plan.seed
        )
        sessions[run] = Session(model, tokenizer, config)
    return sessions


def run_bench(model, tokenizer, name: str, plan: TurnsPlan, budget: int | float) -> dict[str, Any]:
    """Play the session under the three runs, interleaved turn by turn (so machine load hits all alike).

    Raises KVStoreError before any model work if the session would not fit the model's positions.
    """
    opening, turns = script(plan, tokenizer)
    probe = Session(model, tokenizer, SessionConfig(model=name, policy="full"))
    for messages in [opening, *turns]:
        probe.append(messages)  # tokenizes only: refuses a plan longer than the model's positions
    sessions = open_sessions(model, tokenizer, name, plan, budget)
    runs: dict[str, list[dict]] = {run: [] for run in sessions}
    for s in sessions.values():
        s.append(opening)
    for messages in turns:
        for run, s in sessions.items():
            stats = s.prefill()
            runs[run].append(stats.to_dict())
            console.print(f"  {run:>13} {stats.summary()}", style="dim", highlight=False)
        for s in sessions.values():
            s.append(messages)
    return {
        "benchmark": "turns",
        "model": name,
        "budget": budget,
        "plan": asdict(plan),
        "runs": runs,
        "same_tokens": len({tuple(s.tokens) for s in sessions.values()}) == 1,
        "totals": totals(runs),
    }


def totals(runs: dict[str, list[dict]]) -> dict[str, float]:
    te, rp, full = runs["true-eviction"], runs["re-prefill"], runs["full"]
    total = {r: sum(t["prefill_tokens"] for t in runs[r]) for r in runs}
    return {
        "last_turn_latency_ratio": rp[-1]["prefill_s"] / max(te[-1]["prefill_s"], 1e-9),
        "total_prefill_token_ratio": total["re-prefill"] / max(total["true-eviction"], 1),
        "total_prefill_s": {r: sum(t["prefill_s"] for t in runs[r]) for r in runs},
        "true_eviction_bytes_vs_full": te[-1]["held_bytes"] / max(full[-1]["held_bytes"], 1),
        "re_prefill_bytes_vs_full": rp[-1]["held_bytes"] / max(full[-1]["held_bytes"], 1),
        "history_tokens": te[-1]["history_tokens"],
    }


def print_report(result: dict[str, Any]) -> None:
    runs = result["runs"]
    names = list(RUNS)

    def cells(i: int, key: str, fmt: str) -> str:
        return " / ".join(format(runs[r][i][key], fmt) for r in names)

    rows = [
        [
            i + 1,
            cells(i, "prefill_tokens", "d"),
            cells(i, "prefill_s", ".2f"),
            cells(i, "held_tokens", "d"),
            " / ".join(f"{runs[r][i]['held_bytes'] / 2**20:.1f}" for r in names),
        ]
        for i in range(len(runs[names[0]]))
    ]
    cols = ["turn", "prefill tokens", "prefill s", "cache tokens/layer", "cache MiB"]
    console.print(table(f"{result['model']}: {' / '.join(names)} (budget {result['budget']})", cols, rows))
    t = result["totals"]
    n = len(rows)
    console.print(
        f"turn-{n} latency: re-prefill / true-eviction = {t['last_turn_latency_ratio']:.1f}x; "
        f"total prefill tokens: re-prefill / true-eviction = {t['total_prefill_token_ratio']:.1f}x; "
        f"cache bytes vs full at turn {n}: true-eviction {t['true_eviction_bytes_vs_full']:.1%}, "
        f"re-prefill {t['re_prefill_bytes_vs_full']:.1%}; total prefill s "
        + ", ".join(f"{r} {s:.1f}" for r, s in t["total_prefill_s"].items())
        + f"; same tokens in all runs: {'yes' if result['same_tokens'] else 'NO'}"
    )


def main(
    model: str,
    turns: int,
    budget: str,
    prompt_tokens: int,
    obs_tokens: int,
    reply_tokens: int,
    seed: int,
    device: str | None,
    dtype: str | None,
    json_path: Path | None,
) -> None:
    """The run of `nexus-agent bench` turns_cmd: its options and help are in benchmarks.commands.turns_cmd."""

    nexus_budget = parse_budget(budget)
    plan = TurnsPlan(
        turns=turns, prompt_tokens=prompt_tokens, obs_tokens=obs_tokens, reply_tokens=reply_tokens, seed=seed
    )
    loaded, tokenizer, info = load_model(model, device=device, dtype=dtype)
    result = run_bench(loaded, tokenizer, model, plan, nexus_budget)
    result["model_info"] = asdict(info)
    print_report(result)
    write_json(json_path, result)
