"""Summaries of a quality run: mean (and spread over seeds) per policy x task x density, tables and the plot."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from rich.table import Table

SHORT = {
    "single_needle": "single",
    "multi_key": "mkey",
    "multi_value": "mvalue",
    "two_hop": "2hop",
    "variable_tracking": "vartrack",
    "multi_turn": "turns",
}  # column labels that fit a terminal


def summarize(rows: list[dict], key: str = "score") -> list[dict]:
    """One record per (policy, density, task) of `key` (rows without it are skipped): mean over items per seed,
    then mean and std over seeds."""
    per_seed: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r.get(key) is not None:
            per_seed[(r["policy"], r["density"], r["task"], r["seed"])].append(r[key])
    cells: dict[tuple, list[float]] = defaultdict(list)
    counts: dict[tuple, int] = defaultdict(int)
    for (policy, density, task, _seed), scores in per_seed.items():
        cells[(policy, density, task)].append(statistics.fmean(scores))
        counts[(policy, density, task)] += len(scores)
    return [
        {
            "policy": p,
            "density": d,
            "task": t,
            "mean": statistics.fmean(v),
            "std": statistics.pstdev(v) if len(v) > 1 else 0.0,
            "seeds": len(v),
            "items": counts[(p, d, t)],
        }
        for (p, d, t), v in sorted(cells.items(), key=lambda kv: (kv[0][1] or 0.0, kv[0][0], kv[0][2]))
    ]


def with_average(summary: list[dict], tasks: list[str]) -> list[dict]:
    """Add an "avg" task per (policy, density): the mean of the task means (std: mean of the task stds)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in summary:
        groups[(s["policy"], s["density"])].append(s)
    out = list(summary)
    for (p, d), group in groups.items():
        # query-aware runs ("+q") have no multi_turn task: their average is over the context tasks
        need = set(tasks) - ({"multi_turn"} if p.endswith("+q") else set())
        if {g["task"] for g in group} >= need:
            mean = statistics.fmean(g["mean"] for g in group)
            std = statistics.fmean(g["std"] for g in group)
            out.append({"policy": p, "density": d, "task": "avg", "mean": mean, "std": std, "seeds": group[0]["seeds"]})
    return out


def density_table(
    summary: list[dict], density: float, policies: list[str], tasks: list[str], what: str = "Accuracy"
) -> Table:
    """Policy x task at one density (full attention, which has no density, shown as the reference row)."""
    cell = {(s["policy"], s["task"]): s for s in summary if s["density"] in (density, None)}
    t = Table(title=f"{what} at density {density:.0%} (turns: token budget = density x conversation)")
    t.add_column("policy", no_wrap=True)
    for task in [*tasks, "avg"]:
        t.add_column(SHORT.get(task, task), justify="right", no_wrap=True)
    for p in policies:
        row = [p]
        for task in [*tasks, "avg"]:
            s = cell.get((p, task))
            row.append("-" if s is None else _fmt(s))
        t.add_row(*row)
    return t


def _fmt(s: dict) -> str:
    return f"{s['mean']:.2f}±{s['std']:.2f}" if s["seeds"] > 1 else f"{s['mean']:.2f}"


def plot(summary: list[dict], policies: list[str], tasks: list[str], path: Path) -> None:
    """Accuracy vs density per policy: the average over tasks, then one panel per task (full: dashed line)."""

    matplotlib.use("Agg")

    panels = ["avg", *tasks]
    cols = 4
    fig, axes = plt.subplots((len(panels) + cols - 1) // cols, cols, figsize=(4 * cols, 3.2 * len(panels) / cols + 1))
    for ax, task in zip(axes.flat, panels, strict=False):
        for p in policies:
            pts = sorted((s["density"], s["mean"], s["std"]) for s in summary if s["policy"] == p and s["task"] == task)
            if p.startswith("full") and pts:
                ax.axhline(pts[0][1], color="black", linestyle="--" if p == "full" else ":", label=p)
            elif pts:
                xs, ys, es = zip(*pts, strict=False)
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=p)
        ax.set_title(task)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("density")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].set_ylabel("accuracy")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", fontsize=8, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
