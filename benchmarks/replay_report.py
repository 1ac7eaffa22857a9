"""Summaries, tables and the plot of `bench replay` (token-pooled fidelity per spec x budget, curves)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.common import table

CURVE_BIN = 512  # tokens seen per point of the curves over the conversation
# the baselines the targets compare the default memory with (docs/baselines.md)
BASELINES = ("streaming", "snapkv", "pyramidkv", "h2o", "morphkv", "ada-snapkv")


def _pool(turns: list[dict]) -> dict:
    n = sum(t["tokens"] for t in turns)
    if not n:
        return {"tokens": 0, "kl": 0.0, "nll": 0.0, "top1": 0.0}
    return {
        "tokens": n,
        "kl": sum(t["kl"] for t in turns) / n,
        "nll": sum(t["nll"] for t in turns) / n,
        "top1": sum(t["top1"] for t in turns) / n,
    }


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (spec, budget): token-pooled means over every conversation and seed, plus the mean of the
    per-conversation KLs and the worst conversation's top-1."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        groups[(r["spec"], r["budget"])].append(r)
    rows = []
    for (spec, budget), rs in groups.items():
        per_conv = [_pool(r["turns"]) for r in rs]
        rows.append(
            {
                "spec": spec,
                "budget": budget,
                **_pool([t for r in rs for t in r["turns"]]),
                "conv_mean_kl": sum(c["kl"] for c in per_conv) / len(per_conv),
                "worst_top1": min(c["top1"] for c in per_conv),
                "runs": len(rs),
            }
        )
    return sorted(rows, key=lambda r: (str(r["budget"]), r["kl"]))


def curves(runs: list[dict], key: str = "start", bin_size: int = CURVE_BIN) -> dict[str, dict[str, list]]:
    """spec -> budget -> [[x, kl, top1, tokens], ...]: fidelity pooled per bin of tokens seen (key "start") or per
    turn index (key "turn", bin 1)."""
    bins: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for t in r["turns"]:
            bins[(r["spec"], str(r["budget"]))][t[key] // bin_size * bin_size].append(t)
    out: dict[str, dict[str, list]] = defaultdict(dict)
    for (spec, budget), by_x in bins.items():
        pts = [[x, *(lambda p: [p["kl"], p["top1"], p["tokens"]])(_pool(ts))] for x, ts in sorted(by_x.items())]
        out[spec][budget] = pts
    return dict(out)


PROFILE_SUFFIXES = ("+profile", "+learned")  # what run_label appends to a spec's name


def run_label(spec: str, profiled: bool, learned: bool = False) -> str:
    """A spec's name in tables and JSON: `SPEC+profile` when the sessions had a memory profile, `SPEC+learned` for
    every run of a --learn replay (the first conversations without one, the others with the one learned from them)."""
    return f"{spec}+learned" if learned else f"{spec}+profile" if profiled else spec


def label_spec(label: str) -> str:
    """The spec a run label names: `run_label`'s suffix removed."""
    return next((label.removesuffix(x) for x in PROFILE_SUFFIXES if label.endswith(x)), label)


def target_rows(rows: list[dict], default: str) -> list[dict]:
    """Per budget: the default memory's token-pooled KL and top-1 against the best baseline's KL (lowest), with
    the KL ratio (None where the best baseline's KL is 0, e.g. at a budget that evicts nothing); budgets where the
    default or no baseline was replayed are left out."""
    out = []
    for budget in sorted({r["budget"] for r in rows}, key=float):
        mine = next((r for r in rows if r["budget"] == budget and r["spec"] == default), None)
        # a baseline ignores memory profiles: older files label its runs `h2o+profile` / `h2o+learned` too
        base = [r for r in rows if r["budget"] == budget and label_spec(r["spec"]) in BASELINES]
        if mine is None or not base:
            continue
        best = min(base, key=lambda r: r["kl"])
        ratio = mine["kl"] / best["kl"] if best["kl"] else None
        out.append(
            {"budget": budget, "default": default, "kl": mine["kl"], "top1": mine["top1"]}
            | {"best_baseline": best["spec"], "best_kl": best["kl"], "best_top1": best["top1"], "ratio": ratio}
        )
    return out


def target_table(targets: list[dict]):
    cols = ["budget", "default", "KL", "top-1", "best baseline", "its KL", "its top-1", "KL ratio"]
    keys = ("budget", "default", "kl", "top1", "best_baseline", "best_kl", "best_top1", "ratio")
    body = [["n/a" if t[k] is None else t[k] for k in keys] for t in targets]
    return table("the default memory against the best baseline", cols, body)


def summary_table(rows: list[dict], title: str):
    cols = ["spec", "budget", "mean KL", "extra NLL", "top-1", "conv mean KL", "worst top-1", "tokens", "runs"]
    body = [
        [r[k] for k in ("spec", "budget", "kl", "nll", "top1", "conv_mean_kl", "worst_top1", "tokens", "runs")]
        for r in rows
    ]
    return table(title, cols, body)


def plot(rows: list[dict], runs: list[dict], path: Path) -> None:
    """Three panels: mean KL vs budget, top-1 vs budget (one line per spec), KL over tokens seen (smallest budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    specs = sorted({r["spec"] for r in rows})
    color = {spec: plt.get_cmap("tab20")(i % 20) for i, spec in enumerate(specs)}  # one colour per spec everywhere
    budgets = sorted({r["budget"] for r in rows}, key=float)
    for spec in specs:
        pts = sorted((float(r["budget"]), r["kl"], r["top1"]) for r in rows if r["spec"] == spec)
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=spec, color=color[spec])
        axes[1].plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=spec, color=color[spec])
    low = str(budgets[0]) if budgets else None
    for spec, by_budget in curves(runs).items():
        if low in by_budget:
            pts = by_budget[low]
            axes[2].plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=spec, color=color[spec])
    axes[0].set(xlabel="budget (share of the replayed length)", ylabel="mean KL(full || policy), nats", yscale="log")
    axes[1].set(xlabel="budget (share of the replayed length)", ylabel="top-1 agreement with the full cache")
    axes[2].set(xlabel="tokens seen", ylabel=f"mean KL at budget {low}", yscale="log")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle("bench replay: fidelity of each memory on recorded agent conversations (teacher-forced)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
