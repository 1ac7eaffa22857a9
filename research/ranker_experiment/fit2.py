"""python fit2.py RECDIR OUT.pt MODE [names...]: one model per (layer, kv head) on the rows record.py wrote, ranking by
its prediction; only the recordings whose file names contain one of `names`, if given. MODE:
- logit: logistic regression on the label (top-k by the future replies' summed attention);
- logit-x: the same on the features and their products with the roles (rankpol.expand);
- wlogit: the same label, each row weighted by 1 + its future attention over the step's mean;
- peaktop: logistic regression on the top-k by the most any single future reply query gave the token;
- logsum / logpeak: least squares on the log of the summed / peak future attention;
- wlogit-pool / wlogit-layer: wlogit with one weight vector for every head / per layer (fewer weights, for few
  conversations);
- wlogit-shrink: wlogit per head, its weights pulled towards the pooled fit's (an L2 penalty on the difference)."""

import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import NAMES, F, expand, recordings  # noqa: E402

L2 = 1e-3
SHRINK = 0.05  # wlogit-shrink's penalty on the distance to the pooled weights (per row, standardised inputs)


def logistic(z, t, weight, reg, centre=None, l2: float = L2) -> torch.Tensor:
    """Weights of an L2-regularised logistic regression of t on z (rows weighted), by L-BFGS; the penalty pulls the
    weights towards `centre` (zero if None)."""
    centre = torch.zeros(z.shape[1]) if centre is None else centre
    w = centre.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")
    weight = weight / weight.mean()

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w, t, weight=weight)
        loss = loss + l2 * (reg * (w - centre) ** 2).sum()
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


def standardise(x: torch.Tensor, one: int):
    """(mean, sd) of the columns, the constant and constant columns left as they are."""
    mu, sd = x.mean(0), x.std(0)
    const = sd < 1e-6
    mu[const], sd[const] = 0.0, 1.0
    mu[one], sd[one] = 0.0, 1.0
    return mu, sd


def raw_weights(w, mu, sd, one: int) -> torch.Tensor:
    """Weights on the standardised inputs back to the raw inputs."""
    raw = w / sd
    raw[one] -= (w * mu / sd).sum()
    return raw


def fit_group(mode, x, t, wt, reg, one):
    """(raw weights, weights on the standardised inputs, (mean, sd)) of one group of rows."""
    mu, sd = standardise(x, one)
    z = (x - mu) / sd
    if mode in ("logsum", "logpeak"):
        w = torch.linalg.solve(z.T @ z + L2 * len(t) * torch.diag(reg), z.T @ t)
    else:
        w = logistic(z, t, wt, reg)
    return raw_weights(w, mu, sd, one), w, (mu, sd)


def main() -> None:
    rec, out, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    files = recordings(rec, sys.argv[4:])
    wide = mode == "logit-x"
    base = mode.split("-")[0] if mode.startswith("wlogit") else mode
    data = defaultdict(lambda: ([], [], []))
    for f in files:
        for row in torch.load(f)["rows"]:
            layer, x, y = row[:3]
            for h in range(x.shape[0]):
                extra = (row[3][h], row[4][h], row[5]) if len(row) > 3 else (None, None, None)
                t, w = target(base, y[h], *extra)
                xh = x[h].float()
                data[(layer, h)][0].append(expand(xh) if wide else xh)
                data[(layer, h)][1].append(t)
                data[(layer, h)][2].append(w)
    data = {k: tuple(torch.cat(v) for v in vs) for k, vs in data.items()}
    layers, heads = 1 + max(k[0] for k in data), 1 + max(k[1] for k in data)
    width = F + 15 if wide else F
    table = torch.zeros(layers, heads, width)
    one = NAMES.index("one")
    reg = torch.ones(width)
    reg[one] = 0
    torch.set_num_threads(2)
    if mode in ("wlogit-pool", "wlogit-shrink"):
        groups = {"all": sorted(data)}
    elif mode == "wlogit-layer":
        groups = {layer: [k for k in sorted(data) if k[0] == layer] for layer in range(layers)}
    else:
        groups = {k: [k] for k in sorted(data)}
    for keys in groups.values():
        x, t, wt = (torch.cat([data[k][i] for k in keys]) for i in range(3))
        raw, w, (mu, sd) = fit_group(base, x, t, wt, reg, one)
        for k in keys:
            table[k] = raw
        if mode == "wlogit-shrink":  # per head, pulled towards the pooled weights (same standardisation)
            for k in keys:
                x, t, wt = data[k]
                w_h = logistic((x - mu) / sd, t, wt, reg, centre=w, l2=SHRINK)
                table[k] = raw_weights(w_h, mu, sd, one)
    torch.save({"w": table, "names": NAMES, "files": [f.name for f in files], "mode": mode, "expand": wide}, out)
    print("saved", out, mode, tuple(table.shape))


if __name__ == "__main__":
    main()
