"""Where do the evidence blocks rank among the candidate blocks under the Nexus score, scored at the end of the
context (when the question has not been seen), before any eviction?

Run from the repository root: `python research/evidence_ranks.py`. Prints, per item, the mean percentile of the
evidence blocks (1 = top) under the direct score a, the Nexus score a + 0.5 c~, and the walk c~ alone, averaged over
the 30 layers, and the direct-score mass of the evidence blocks relative to a uniform share.
"""

from __future__ import annotations

import statistics

import torch

import kvstore
from benchmarks.quality_run import _renderer, evidence_spans
from benchmarks.quality_tasks import make_item
from kvstore.attention.scoring import nexus_weights, window_block_scores
from kvstore.models.registry import load_model

BLOCK = 32


def percentile(vec: torch.Tensor, cand: list[int], blocks: list[int]) -> list[float]:
    order = torch.tensor(cand)[vec[cand].argsort(descending=True)].tolist()
    return [1 - order.index(b) / len(order) for b in blocks]


def main() -> None:
    torch.set_num_threads(1)
    model, tok, _ = load_model("smollm2-135m")
    renderer = _renderer(tok)
    for task in ("single_needle", "two_hop", "multi_turn"):
        for index in range(2):
            item = make_item(task, 0, index, tok, 1024)
            ids, spans = [], []
            for i, batch in enumerate(item.turns):
                spans += [[len(ids) + t for t in s] for s in evidence_spans(tok, renderer, batch, i == 0, item)]
                ids += renderer.encode_messages(batch, first=i == 0)
            cache = kvstore.make_cache(model, "nexus", len(ids) + 256, seed=0)  # budget above the prompt: no eviction
            kvstore.prefill(model, cache, torch.tensor([ids]), 512)
            direct, nexus, walk, mass = [], [], [], []
            for layer in cache.layers:
                ctx = layer.score_context()
                s_hat = window_block_scores(ctx.queries[0], ctx.keys[0], BLOCK, ctx.scaling)  # [W, N_k]
                a = s_hat.mean(0)  # [N_k]
                cand = list(range(1, a.shape[0] - 2))  # not the sink, the recent block, the tail
                blocks = sorted({p // BLOCK for span in spans for p in span} & set(cand))
                direct += percentile(a, cand, blocks)
                nexus += percentile(nexus_weights(s_hat, 3, 0.5, 0.0), cand, blocks)
                walk += percentile(nexus_weights(s_hat, 3, 1e9, 0.0), cand, blocks)
                mass.append(float(a[blocks].sum() / a[cand].sum()) / (len(blocks) / len(cand)))
            print(
                f"{task}#{index} N_k={a.shape[0]} evidence blocks {blocks}: percentile direct "
                f"{statistics.fmean(direct):.2f} nexus {statistics.fmean(nexus):.2f} walk {statistics.fmean(walk):.2f}"
                f"; direct mass vs uniform {statistics.fmean(mass):.2f}x (20% density keeps the top "
                f"{4 / len(cand):.0%} of candidates)",
                flush=True,
            )


if __name__ == "__main__":
    main()
