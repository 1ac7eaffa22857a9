"""python offline2.py RECDIR W.pt[,W2.pt...] [names...]: on recordings with the future attention (record.py's 6-tuples),
the share of the oracle's kept attention mass that each table's top k keeps, against the default's; per group, mean."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import default_logit, expand, recordings

tables = {}
for p in sys.argv[2].split(","):
    d = torch.load(p)
    tables[Path(p).stem] = (d["w"].float(), d.get("expand", False))
files = recordings(sys.argv[1], sys.argv[3:])
METRICS = ("mass", "peak_mass", "top_peak_kept", "sq_mass")
tot = {(n, m): 0.0 for n in ["default", *tables] for m in METRICS}
groups = 0
for f in files:
    for layer, x, _y, mass, peak, k in torch.load(f)["rows"]:
        x = x.float()
        best = mass.topk(k, -1).values.sum(-1).clamp_min(1e-12)  # [Hkv]
        best_p = peak.topk(k, -1).values.sum(-1).clamp_min(1e-12)
        best_sq = (mass**2).topk(k, -1).values.sum(-1).clamp_min(1e-24)
        top_p = peak.argmax(-1, keepdim=True)
        scores = {"default": default_logit(x)}
        for name, (w, ex) in tables.items():
            xx = expand(x) if ex else x
            scores[name] = (xx * w[layer][:, None, :]).sum(-1)
        for name, s in scores.items():
            idx = s.topk(k, -1).indices
            tot[(name, "mass")] += float((mass.gather(-1, idx).sum(-1) / best).sum())
            tot[(name, "peak_mass")] += float((peak.gather(-1, idx).sum(-1) / best_p).sum())
            tot[(name, "sq_mass")] += float(((mass.gather(-1, idx) ** 2).sum(-1) / best_sq).sum())
            tot[(name, "top_peak_kept")] += float((idx == top_p).any(-1).float().sum())
        groups += x.shape[0]
print(groups, "groups;", "table", *METRICS)
for name in ["default", *tables]:
    print(name, *(f"{tot[(name, m)] / groups:.4f}" for m in METRICS))
