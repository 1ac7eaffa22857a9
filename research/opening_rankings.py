"""How well rankings of the opening, made before the first reply, keep what that reply reads (issue 54, cold start).

For each conversation: one full-cache forward (eager attention, fp32) over the opening and the first reply. Per layer
and kv head, the first reply's attention over the opening tokens is the target. Eviction is simulated as the
session does it: the opening arrives in 512-token chunks and after each chunk the held tokens are cut to the budget
(25% or 50% of the replayed length) by a ranking that reads only the queries seen so far, with the default's layout
(the sink block, then `recent` of the budget as the newest tokens). The figure is the share of the first reply's
attention mass (over the opening) on the tokens held when it starts, averaged over layers and kv heads; the next-reply
oracle (top-K by that attention, no sink or recent tokens) is the reference. Renormalisation after an eviction is not
simulated: the rankings read the full cache's attention rows.

    python research/opening_rankings.py TRACE... [--budgets 0.25,0.5] [--max-tokens 4096] [--chunk 512]

Memory: every layer's rows are held, 4 x layers x kv heads x N^2 bytes (4.8 GB at N = 3,665 on SmolLM2, with a
peak near 20 GB during the forward); two such runs at once were killed for memory on a 23 GiB machine.

Rankings: `acc` (the accumulated attention per query that could attend: H2O's, and the default's before the first
reply), `acc*vnorm` (times the value's norm), `acc-raw` (not divided), `windowW` (the last W queries only, as SnapKV
ranks), `acc+windowW` (both, each scaled to mean 1); `@rR`: R of the budget kept as the newest tokens.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from benchmarks.replay_trace import load_replayed
from kvstore.models.registry import load_model
from kvstore.session.teacher import plan

CHUNK, SINK = 512, 16


def eager_model(name: str):
    """(model, tokenizer) in fp32 on the CPU with eager attention, whose forward can return its attention rows."""
    torch.set_num_threads(1)
    model, tok, _ = load_model(name, device="cpu", dtype="fp32")
    model.config._attn_implementation = "eager"
    return model, tok


def first_reply(path: Path, tok, max_tokens: int) -> tuple[list[int], int, int] | None:
    """A trace's opening and first reply as the replay renders them: (their token ids, the opening's length, the
    replayed length the budgets are shares of); None without a reply inside `max_tokens`."""
    rep = load_replayed(path, tok)
    p = plan(rep.conversation.messages, rep.renderer, max_tokens)
    if p is None or not p.rest:
        return None
    first = next(i for i, m in enumerate(p.rest) if m["role"] == "assistant")
    ids = list(p.opening_ids)
    for m in p.rest[: first + 1]:
        ids += rep.renderer.encode_messages([m], first=False)
    return ids, len(ids) - len(rep.renderer.encode_messages([p.rest[first]], first=False)), p.tokens


def attention_rows(model, ids: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer [Hkv, N, N] float32: each query's attention, averaged over the query heads of each kv head (reduced
    layer by layer as the forward runs, so that all heads of all layers are never held at once); and per layer
    [Hkv, N] each value's norm."""
    hkv = model.config.num_key_value_heads
    rows: list[torch.Tensor] = []

    def keep(module, args, output):
        att = output[1][0].float()
        rows.append(att.view(hkv, -1, *att.shape[-2:]).mean(1))
        return (output[0], None, *output[2:])

    hooks = [layer.self_attn.register_forward_hook(keep) for layer in model.model.layers]
    try:
        with torch.inference_mode():
            out = model(torch.tensor([ids]), output_attentions=True, use_cache=True)
    finally:
        for h in hooks:
            h.remove()
    return rows, [layer.values[0].float().norm(dim=-1) for layer in out.past_key_values.layers]


def rankings(att: torch.Tensor, seen: int, held: torch.Tensor, vnorm: torch.Tensor) -> dict[str, torch.Tensor]:
    """Scores [Hkv, len(held)] of the held positions from the queries < seen."""
    rows = att[:, :seen, :][:, :, held]  # [Hkv, seen, T]
    count = (seen - held).clamp_min(1).float()
    acc = rows.sum(1) / count
    out = {"acc": acc, "acc-raw": rows.sum(1), "acc*vnorm": acc * vnorm[:, held]}
    for w in (16, 64, 256):
        win = rows[:, -w:].sum(1)
        out[f"window{w}"] = win
        out[f"acc+window{w}"] = acc / acc.mean(-1, keepdim=True) + win / win.mean(-1, keepdim=True).clamp_min(1e-30)
    return out


def simulate(
    att: torch.Tensor, opening: int, budget: int, name: str, recent: float, vnorm: torch.Tensor
) -> torch.Tensor:
    """The positions held per kv head [Hkv, budget] when the first reply starts (a bool mask [Hkv, opening])."""
    hkv = att.shape[0]
    held = [torch.arange(0) for _ in range(hkv)]
    for start in range(0, opening, CHUNK):
        end = min(start + CHUNK, opening)
        held = [torch.cat([h, torch.arange(start, end)]) for h in held]  # sorted: the chunk is newer than all held
        if held[0].numel() <= budget:
            continue
        n_recent = int(recent * budget)
        for k in range(hkv):
            h = held[k]
            forced = (h < SINK) | (h >= end - n_recent)
            cand = h[~forced]
            room = budget - int(forced.sum())
            if room < cand.numel():
                s = rankings(att[k : k + 1], end, cand, vnorm[k : k + 1])[name][0]
                cand = cand[s.topk(room).indices]
            held[k] = torch.sort(torch.cat([h[forced], cand])).values
    mask = torch.zeros(hkv, opening, dtype=torch.bool)
    for k in range(hkv):
        mask[k, held[k]] = True
    return mask


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--budgets", default="0.25,0.5")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--chunk", type=int, default=CHUNK, help="prefill chunk: an eviction after each")
    args = ap.parse_args()
    globals()["CHUNK"] = args.chunk
    model, tok = eager_model(args.model)
    names = [
        "acc",
        "acc*vnorm",
        "acc-raw",
        "window16",
        "window64",
        "window256",
        "acc+window16",
        "acc+window64",
        "acc+window256",
    ]
    totals: dict[tuple, list[float]] = {}
    for path in args.traces:
        found = first_reply(path, tok, args.max_tokens)
        if found is None:
            continue
        ids, opening, replayed = found
        layers, vnorms = attention_rows(model, ids)
        for b in (float(x) for x in args.budgets.split(",")):
            budget = math.ceil(b * replayed)
            row = []
            for name, recent in [("oracle", 0.0)] + [(n, 0.5) for n in names] + [("acc", 0.25), ("acc", 0.0)]:
                share = []
                for att, vnorm in zip(layers, vnorms, strict=True):
                    target = att[:, opening:, :opening].sum(1)  # [Hkv, opening]
                    if name == "oracle":
                        keep = torch.zeros_like(target, dtype=torch.bool)
                        keep.scatter_(1, target.topk(min(budget, opening), -1).indices, True)
                    else:
                        keep = simulate(att, opening, budget, name, recent, vnorm)
                    share.append(float(((target * keep).sum(-1) / target.sum(-1)).mean()))
                label = f"{name}@r{recent}"
                totals.setdefault((b, label), []).append(sum(share) / len(share))
                row.append(f"{label}={sum(share) / len(share):.3f}")
            print(f"{path.name[:28]} opening {opening} budget {budget}: " + " ".join(row), flush=True)
    for (b, label), v in sorted(totals.items()):
        print(f"{b} {label}: mean {sum(v) / len(v):.3f} over {len(v)}")


if __name__ == "__main__":
    main()
