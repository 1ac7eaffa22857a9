"""python cmp_rec.py RECDIR RUN.json...: a ranked replay against the default runs record.py made (RECDIR/*.pt), per
conversation."""

import json
import sys
from pathlib import Path

import torch

rec = Path(sys.argv[1])
for f in sys.argv[2:]:
    d = json.load(open(f))
    kl = t1 = n = dkl = dt1 = 0
    lower = up = down = 0
    for r in d["runs"]:
        k = sum(t["kl"] for t in r["turns"])
        a = sum(t["top1"] for t in r["turns"])
        kl, t1, n = kl + k, t1 + a, n + sum(t["tokens"] for t in r["turns"])
        ref = torch.load(rec / f"{r['conversation']}.pt")
        dkl, dt1 = dkl + ref["kl"], dt1 + ref["top1"]
        lower, up, down = lower + (k < ref["kl"]), up + (a > ref["top1"]), down + (a < ref["top1"])
    print(
        f"{f}: {len(d['runs'])} convs, {n} tokens: KL {kl / n:.4f} top1 {t1 / n:.4f} | default KL {dkl / n:.4f} "
        f"top1 {dt1 / n:.4f} | KL lower in {lower}; top1 up {up} down {down}"
    )
