"""How much of the next-reply oracle a memory could reach by looking ahead: the model's own greedy draft of the next
reply, in place of the recorded reply, as the oracle's ranking (issue 64).

The next-reply oracle (benchmarks.replay_oracle) ranks the held tokens by the attention the recorded reply gives
them on the full cache. A real memory does not know that reply, but it could ask the model: decode a few tokens
of a draft reply before evicting, and rank by what the draft attends. This script measures the best case of that:
the draft decoded greedily on the full cache (generation prompt, then k tokens), its attention recorded as the
oracle records the real reply's, and the same top-K oracle replayed with it. Where the draft oracle is near the
real one, a memory that drafts before it evicts could be too; where it is far, drafting is not worth building.

    python research/draft_oracle.py OUT.json TRACE... [--drafts 8,32,128] [--budgets 0.25] [--model smollm2-135m]
        [--max-tokens 4096] [--system agent] [--threads 1]

OUT.json has `bench replay`'s "runs" rows (spec `oracle:next-reply-top-K` and `oracle:draft-K`), so the research
tables read it beside a replay's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from benchmarks.replay import ReplayConfig, prepare  # noqa: E402
from benchmarks.replay_oracle import HORIZONS, ReplyAttention, oracle_session  # noqa: E402
from benchmarks.replay_run import Spec, budget_tokens, compare, reference, session_for  # noqa: E402
from kvstore.models.registry import load_model  # noqa: E402


@torch.inference_mode()
def draft_records(
    model, tokens: list[int], record: ReplyAttention, prompt: list[int], drafts: list[int], teacher=False, chunk=512
):
    """For each k in `drafts`, a ReplyAttention whose table for each reply is what the generation prompt and a
    greedy draft of k tokens attend on the full cache before the reply, zero from the reply's start on (the draft's
    own positions are the recorded reply's), padded to the reply's end. `teacher`: the recorded reply's first k
    tokens instead of a draft (a check: at the reply's length this is the next-reply oracle)."""
    out = {k: ReplyAttention(record.num_layers) for k in drafts}
    draft = ReplyAttention(record.num_layers)
    cache, pos = DynamicCache(), 0
    dev = next(model.parameters()).device
    with draft.recording(model):
        for turn in sorted(record.starts):
            start, end = record.starts[turn], record.ends[turn]
            for at in range(pos, start, chunk):  # the history up to the reply, in chunks
                step = torch.tensor([tokens[at : min(start, at + chunk)]], device=dev)
                model(input_ids=step, past_key_values=cache, use_cache=True)
            pos = start
            draft.start(turn)
            ids = torch.tensor([prompt], device=dev)
            for i in range(max(drafts) + 1):
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0, -1]
                if i in out:  # the prompt and i drafted tokens have run
                    out[i].starts[turn], out[i].ends[turn] = start, end
                    out[i].tables[turn] = [_fit(t, start, end) for t in draft.tables[turn]]
                at = start + len(prompt) + i
                ids = torch.tensor([[tokens[at]]], device=dev) if teacher and at < end else logits.argmax()[None, None]
            draft.stop()
            cache.crop(start - cache.get_seq_length())  # this transformers crops by a negative count
    return out


def _fit(table: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """[Hkv, n] -> [Hkv, end]: the history's columns, zeros for the reply's own positions."""
    fitted = torch.zeros(table.shape[0], end, dtype=table.dtype)
    fitted[:, :start] = table[:, :start]
    return fitted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--drafts", default="8,32,128")
    ap.add_argument("--budgets", default="0.25")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--system", default="agent")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--teacher", action="store_true", help="the recorded reply's first k tokens, not a draft")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    drafts = sorted(int(k) for k in args.drafts.split(","))
    budgets = [float(b) for b in args.budgets.split(",")]
    model, tok, _ = load_model(args.model)
    limit = min(args.max_tokens, int(model.config.max_position_embeddings))
    cfg = ReplayConfig((), tuple(budgets), args.max_tokens, system=args.system)
    result = {"runs": [], "config": vars(args) | {"out": str(args.out), "traces": [str(t) for t in args.traces]}}
    for path in args.traces:
        prepared = prepare(path, cfg, tok, limit, {"failed": []})
        if prepared is None:
            continue
        rep, p = prepared
        t0 = time.perf_counter()
        full = session_for(model, tok, Spec("full"), None, 0, renderer=rep.renderer)
        record = ReplyAttention(len(full.cache.layers))
        with record.recording(model):
            ref = reference(full, p, record)
            prompt = rep.renderer.generation_prompt_ids
            records = draft_records(model, full.tokens, record, prompt, drafts, args.teacher)
        for budget in budgets:
            tokens = budget_tokens(budget, p.tokens)
            kind = "teacher" if args.teacher else "draft"
            for label, rec in [(HORIZONS["next"], record)] + [(f"oracle:{kind}-{k}", records[k]) for k in drafts]:
                session = oracle_session(model, tok, tokens, rec, "next")
                session.renderer = rep.renderer
                turns = compare(session, p, ref)
                run = {"spec": label, "budget": budget, "budget_tokens": tokens, "seed": 0}
                run |= {"conversation": rep.conversation.name, "turns": [t.to_dict() for t in turns]}
                result["runs"].append(run)
        print(f"{rep.conversation.name}: {p.tokens} tokens, {time.perf_counter() - t0:.0f}s", flush=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
