"""python offline.py RECDIR W.pt [names...]: top-k precision of the oracle's label per recorded group, default vs W."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import default_logit, expand, recordings

d = torch.load(sys.argv[2])
W, ex = d["w"], d.get("expand", False)
files = recordings(sys.argv[1], sys.argv[3:])
tot = {"default": 0.0, "W": 0.0}
groups = 0
for f in files:
    for layer, x, y in torch.load(f)["rows"]:
        x = x.float()
        for h in range(x.shape[0]):
            k = int(y[h].sum())
            if k == 0 or k == len(y[h]):
                continue
            s_def = default_logit(x[h])
            xx = expand(x[h]) if ex else x[h]
            s_w = xx @ W[layer, h]
            for name, s in (("default", s_def), ("W", s_w)):
                tot[name] += float(y[h][s.topk(k).indices].float().mean())
            groups += 1
print(sys.argv[2], {k: round(v / groups, 4) for k, v in tot.items()}, groups)
