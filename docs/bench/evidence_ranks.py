"""Where do the evidence blocks rank under the Nexus score, scored at the end of the context (no eviction yet)?"""
import torch, statistics
torch.set_num_threads(1)
import kvstore
from kvstore.models import load_model
from kvstore.scoring import window_block_scores, nexus_weights
from cli.bench.quality_tasks import make_item
from cli.bench.quality_run import evidence_spans, _renderer
model, tok, _ = load_model("smollm2-135m")
r = _renderer(tok)
for task in ["single_needle", "two_hop", "multi_turn"]:
    for idx in range(2):
        item = make_item(task, 0, idx, tok, 1024)
        ids, spans, off = [], [], 0
        for i, b in enumerate(item.turns):
            t = r.encode_messages(b, first=i == 0)
            spans += [[off + x for x in s] for s in evidence_spans(tok, r, b, i == 0, item)]
            ids += t; off += len(t)
        cache = kvstore.make_cache(model, "nexus", len(ids) + 256, seed=0)
        kvstore.prefill(model, cache, torch.tensor([ids]), 512)
        pct_a, pct_s, pct_c, mass = [], [], [], []
        for layer in cache.layers:
            ctx = layer._context()
            s_hat = window_block_scores(ctx.queries[0], ctx.keys[0], 32, ctx.scaling)  # [W, N]
            a = s_hat.mean(0)
            s = nexus_weights(s_hat, 3, 0.5, 0.0)
            c = nexus_weights(s_hat, 3, 1e9, 0.0)  # ~ walk part dominates
            n = a.shape[0]
            cand = list(range(1, n - 2))  # not sink / recent / tail
            blocks = sorted({p // 32 for sp in spans for p in sp} & set(cand))
            for vec, out in ((a, pct_a), (s, pct_s), (c, pct_c)):
                order = torch.tensor(cand)[vec[cand].argsort(descending=True)].tolist()
                out += [1 - order.index(bk) / len(order) for bk in blocks]  # 1 = top
            mass.append(float(a[blocks].sum() / a[cand].sum()) / (len(blocks) / len(cand)))
        print(f"{task}#{idx} N={n} evidence blocks {blocks}: percentile direct {statistics.fmean(pct_a):.2f} "
              f"nexus {statistics.fmean(pct_s):.2f} walk {statistics.fmean(pct_c):.2f}; "
              f"direct mass vs uniform {statistics.fmean(mass):.2f}x (top-K at 20% keeps ~top {4/len(cand):.0%})", flush=True)
