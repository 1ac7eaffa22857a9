"""How much of a `bench replay` result's KL lies in replies that copy earlier text of their conversation.

A reply token "quotes" a source when it lies inside a run of N tokens (default 16) that also occurs in that source
before the reply: the task statement (the opening's last message), an earlier reply of the agent, or an earlier tool
output. Line ends are matched as LF (SWE-bench issues often end lines with CRLF, replies never). A reply quotes a source
when more than a share S (default 0.3) of its tokens do. For each spec and budget the script prints the share of the KL,
of the top-1 misses and of the scored tokens in the replies that quote each source. The conversations are re-rendered
with the replay's model tokenizer and cut as the replay cut them (its `max_tokens`).

    python research/replay_quotes.py RESULT.json TRACES... [--n 16] [--share 0.3]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from kvstore.models.registry import resolve
from kvstore.session.render import ChatRenderer
from kvstore.session.teacher import plan
from pipeline.conversations import conversation_files, load_conversation

SOURCES = ("task", "reply", "tool")


def runs_of(ids: list[int], n: int) -> set[tuple[int, ...]]:
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


def quoted_share(ids: list[int], source: set[tuple[int, ...]], n: int) -> float:
    """Share of `ids` inside an n-token run that occurs in `source`."""
    covered = [False] * len(ids)
    for i in range(len(ids) - n + 1):
        if tuple(ids[i : i + n]) in source:
            covered[i : i + n] = [True] * n
    return sum(covered) / max(len(ids), 1)


def reply_quotes(messages: list[dict], renderer: ChatRenderer, max_tokens: int, n: int) -> dict[int, tuple]:
    """Per replayed reply (numbered from 1 as `bench replay` numbers turns): its quoted share of each source."""
    p = plan(messages, renderer, max_tokens)
    if p is None:
        return {}

    def encode(text: str) -> list[int]:
        return renderer.encode(text.replace("\r\n", "\n"))

    seen = {"task": runs_of(encode(p.opening[-1]["content"]), n), "reply": set(), "tool": set()}
    shares, turn = {}, 0
    for m in p.rest:
        ids = encode(m["content"])
        if m["role"] == "assistant":
            turn += 1
            shares[turn] = tuple(quoted_share(ids, seen[k], n) for k in SOURCES)
        seen["reply" if m["role"] == "assistant" else "tool"] |= runs_of(ids, n)
    return shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--share", type=float, default=0.3)
    a = ap.parse_args()
    from transformers import AutoTokenizer

    result = json.loads(a.result.read_text())
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(str(resolve(result["config"]["model"]))))
    max_tokens = result["config"].get("max_tokens") or 1 << 30
    quotes = {}
    for f in conversation_files(a.traces):
        c = load_conversation(f)
        quotes[c.name] = reply_quotes(c.messages, renderer, max_tokens, a.n)
    totals: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for run in result["runs"]:
        if run["conversation"] not in quotes:
            continue
        t = totals[(run["spec"], run["budget"])]
        for turn in run["turns"]:
            shares = quotes[run["conversation"]].get(turn["turn"], (0.0,) * len(SOURCES))
            row = {"kl": turn["kl"], "miss": turn["tokens"] - turn["top1"], "tokens": turn["tokens"]}
            labels = [k for k, s in zip(SOURCES, shares, strict=True) if s > a.share]
            for label in ["all"] + labels + (["any"] if labels else []):
                for k, v in row.items():
                    t[label, k] += v
    print(f"replies quoting more than {a.share:.0%} of their tokens in {a.n}-token runs: share of KL / misses / tokens")
    for (spec, budget), t in sorted(totals.items()):
        cells = "  ".join(
            f"{label} {t[label, 'kl'] / t['all', 'kl']:.0%} / {t[label, 'miss'] / max(t['all', 'miss'], 1):.0%}"
            f" / {t[label, 'tokens'] / t['all', 'tokens']:.0%}"
            for label in (*SOURCES, "any")
        )
        print(f"{spec:>28} {budget:.2f}  KL {t['all', 'kl'] / t['all', 'tokens']:.4f}  {cells}")


if __name__ == "__main__":
    main()
