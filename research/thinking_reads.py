"""Where a reasoning agent's replies look (issue 54): on the full cache, the share of each reply's attention that goes
to the sink, the opening, the thinking and the calls of earlier replies (the latest one apart), the tool output, and
the reply's own tokens, beside the share of the held tokens each part is. Old thinking that is read much less than
its size says a memory could let it go first.

    python research/thinking_reads.py TRACE... [--max-tokens 4096]

Attention is averaged over layers and query heads (each kv head's group), summed over the reply's queries.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.replay_oracle import ReplyAttention
from benchmarks.replay_run import reference
from benchmarks.replay_trace import load_replayed
from kvstore import Session, SessionConfig
from kvstore.models.registry import load_model
from kvstore.session.teacher import plan

PARTS = ("sink", "opening", "old thinking", "last thinking", "old calls", "last call", "tool output", "own reply")
SINK = 16


def think_end(tokenizer, ids: list[int]) -> int:
    """How many of a reply's tokens are its thinking (up to and with `</think>`); 0 without one."""
    text = ""
    for i, t in enumerate(ids):
        text += tokenizer.decode([t])
        if "</think>" in text:
            return i + 1
    return 0


def labels(tokenizer, tokens: list[int], opening: int, record: ReplyAttention, turn: int) -> torch.Tensor:
    """Per position before the reply `turn` ends: the index of its part (PARTS)."""
    start = record.starts[turn]
    lab = torch.full((record.ends[turn],), PARTS.index("tool output"))
    lab[:opening] = PARTS.index("opening")
    lab[:SINK] = PARTS.index("sink")
    lab[start:] = PARTS.index("own reply")
    for t in range(1, turn):
        s, e = record.starts[t], record.ends[t]
        k = think_end(tokenizer, tokens[s:e])
        last = t == turn - 1
        lab[s : s + k] = PARTS.index("last thinking" if last else "old thinking")
        lab[s + k : e] = PARTS.index("last call" if last else "old calls")
    return lab


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, _ = load_model(args.model, device="cpu")
    mass, size, queries = torch.zeros(len(PARTS)), torch.zeros(len(PARTS)), 0
    for path in args.traces:
        rep = load_replayed(path, tok)
        p = plan(rep.conversation.messages, rep.renderer, args.max_tokens)
        if p is None:
            continue
        session = Session(model, tok, SessionConfig(policy="full", budget=None, protect="none"))
        record = ReplyAttention(model.config.num_hidden_layers)
        with torch.inference_mode(), record.recording(model):
            reference(session, p, record)
        tokens = list(session.tokens)
        cm, cs, cq = torch.zeros(len(PARTS)), torch.zeros(len(PARTS)), 0
        for turn in sorted(record.tables)[1:]:  # from the second reply on: there is earlier thinking
            lab = labels(tok, tokens, len(p.opening_ids), record, turn)
            att = torch.stack(record.tables[turn]).mean((0, 1))  # [end]: summed over the reply's queries
            n = record.ends[turn] - record.starts[turn]
            cm += torch.zeros(len(PARTS)).index_add_(0, lab, att)
            cs += torch.bincount(lab[: record.starts[turn]], minlength=len(PARTS)).float() * n  # held, per query
            cq += n
        if cq:
            print(
                f"{rep.conversation.name[:28]} ({len(record.tables)} replies, {cq} queries): "
                + " ".join(
                    f"{p_}={float(m / cq):.3f}/{float(s / cs.sum()):.3f}"
                    for p_, m, s in zip(PARTS, cm, cs, strict=True)
                )
            )
        mass, size, queries = mass + cm, size + cs, queries + cq
    print(f"all ({queries} queries) -- part: share of the replies' attention / share of the earlier tokens")
    for part, m, s in zip(PARTS, mass, size, strict=True):
        print(f"  {part:14s} {float(m / queries):.3f} / {float(s / size.sum()):.3f}")


if __name__ == "__main__":
    main()
