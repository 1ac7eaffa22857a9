"""A memory profile from the model's own first replies (issue 54, cold start): for each given trace only its opening
(system prompt and task) is read; the model writes a first reply to it on a full cache (greedy), and the profile is
calibrated on those openings and replies, as `nexus-agent calibrate` does on recorded ones. No recorded reply is read,
so the profile exists before the agent's first conversation.

    python research/probe_profile.py TRACE... --out probe.pt [--max-new 128] [--max-tokens 4096] [--system project]
    nexus-agent bench replay OTHER_TRACES... --profile probe.pt --specs 'nexus-agent;h2o'
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.replay_trace import load_replayed
from kvstore import Session, SessionConfig
from kvstore.models.registry import load_model
from kvstore.profiles.calibrate import opening
from pipeline.conversations import Conversation, calibrate_recorded


def probe(model, tokenizer, messages: list[dict], max_new: int) -> list[dict]:
    """The opening of `messages` and the model's greedy first reply to it (a full cache)."""
    first = opening(messages)
    session = Session(model, tokenizer, SessionConfig(policy="full", budget=None, protect="none"))
    session.append(first)
    reply = session.generate(max_new_tokens=max_new)
    return first + [{"role": "assistant", "content": reply.text}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--system", default="recorded", help="as bench replay --system: recorded | project")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, _ = load_model(args.model, device="cpu")
    conversations = []
    with torch.inference_mode():
        for path in args.traces:
            conv = load_replayed(path, tok, args.system).conversation
            messages = probe(model, tok, conv.messages, args.max_new)
            print(f"{conv.name}: {messages[-1]['content'][:120]!r}", flush=True)
            conversations.append(Conversation(conv.name, messages))
    profile = calibrate_recorded(model, tok, conversations, print, args.max_tokens, {"probe": args.max_new})
    profile.save(args.out)
    print(f"wrote {args.out}: {profile.summary}")


if __name__ == "__main__":
    main()
