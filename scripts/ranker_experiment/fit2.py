"""python fit2.py RECDIR OUT.pt MODE [names...]: one model per (layer, kv head) on the rows record.py wrote, ranking by
its prediction; only the recordings whose file names contain one of `names`, if given. MODE:
- logit: logistic regression on the label (top-k by the future replies' summed attention);
- logit-x: the same on the features and their products with the roles (rankpol.expand);
- wlogit: the same label, each row weighted by 1 + its future attention over the step's mean;
- peaktop: logistic regression on the top-k by the most any single future reply query gave the token;
- logsum / logpeak: least squares on the log of the summed / peak future attention."""

import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import NAMES, F, expand  # noqa: E402

L2 = 1e-3


def logistic(z: torch.Tensor, t: torch.Tensor, weight: torch.Tensor, reg: torch.Tensor) -> torch.Tensor:
    """Weights of an L2-regularised logistic regression of t on z (rows weighted), by L-BFGS."""
    w = torch.zeros(z.shape[1], requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")
    weight = weight / weight.mean()

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w, t, weight=weight)
        loss = loss + L2 * (reg * w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def target(mode: str, y, tot, peak, k):
    """(target, row weights) of one head's rows in one step."""
    ones = torch.ones(y.shape, dtype=torch.float32)
    if mode in ("logit", "logit-x"):
        return y.float(), ones
    if mode == "wlogit":
        return y.float(), 1 + tot / tot.mean().clamp_min(1e-12)
    if mode == "peaktop":
        return torch.zeros_like(tot).scatter_(0, peak.topk(k).indices, 1.0), ones
    return ((tot if mode == "logsum" else peak) + 1e-5).log(), ones


def main() -> None:
    rec, out, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    files = sorted(rec.glob("*.pt"))
    if sys.argv[4:]:
        files = [f for f in files if any(o in f.name for o in sys.argv[4:])]
    wide = mode == "logit-x"
    data = defaultdict(lambda: ([], [], []))
    for f in files:
        for row in torch.load(f)["rows"]:
            layer, x, y = row[:3]
            for h in range(x.shape[0]):
                extra = (row[3][h], row[4][h], row[5]) if len(row) > 3 else (None, None, None)
                t, w = target(mode, y[h], *extra)
                xh = x[h].float()
                data[(layer, h)][0].append(expand(xh) if wide else xh)
                data[(layer, h)][1].append(t)
                data[(layer, h)][2].append(w)
    layers, heads = 1 + max(k[0] for k in data), 1 + max(k[1] for k in data)
    width = F + 15 if wide else F
    table = torch.zeros(layers, heads, width)
    one = NAMES.index("one")
    reg = torch.ones(width)
    reg[one] = 0
    torch.set_num_threads(2)
    for (layer, h), (xs, ts, ws) in sorted(data.items()):
        x, t, wt = torch.cat(xs), torch.cat(ts), torch.cat(ws)
        mu, sd = x.mean(0), x.std(0)
        const = sd < 1e-6
        mu[const], sd[const] = 0.0, 1.0
        mu[one], sd[one] = 0.0, 1.0
        z = (x - mu) / sd
        if mode.startswith("log") and mode not in ("logit", "logit-x"):
            w = torch.linalg.solve(z.T @ z + L2 * len(t) * torch.diag(reg), z.T @ t)
        else:
            w = logistic(z, t, wt, reg)
        raw = w / sd
        raw[one] -= (w * mu / sd).sum()
        table[layer, h] = raw
    torch.save({"w": table, "names": NAMES, "files": [f.name for f in files], "mode": mode, "expand": wide}, out)
    print("saved", out, mode, tuple(table.shape))


if __name__ == "__main__":
    main()
