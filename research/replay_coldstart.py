"""Cold-start candidates against the default and H2O in `bench replay` results (research/replay-coldstart.md).

For every spec in the given result files (merged: runs are keyed by spec, budget and conversation, seed 0), per
budget: the token-pooled KL and top-1, the pooled KL ratio to the baseline, the per-conversation KL, top-1 and KL ratio
(min / median / max), on how many conversations the spec's KL is below the default's and below the baseline's, and
the pooled KL split into the first reply and the later ones (before the first reply no memory has seen a reply query,
and the default ranks the opening as H2O does).

    python research/replay_coldstart.py A.json [B.json ...] [--default nexus-agent] [--baseline h2o] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load(paths: list[Path]) -> dict[tuple[str, float, str], list[dict]]:
    """(spec, budget, conversation) -> the run's turns, over every file (a later file's run replaces an earlier)."""
    runs = {}
    for path in paths:
        for r in json.loads(path.read_text())["runs"]:
            if r.get("seed", 0) == 0:
                runs[r["spec"], float(r["budget"]), r["conversation"]] = r["turns"]
    return runs


def pooled(turns: list[dict]) -> tuple[float, float, int, float]:
    """(mean KL, top-1 agreement, scored tokens, KL sum) over turns."""
    n = sum(t["tokens"] for t in turns)
    kl = sum(t["kl"] for t in turns)
    return kl / max(n, 1), sum(t["top1"] for t in turns) / max(n, 1), n, kl


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    if not values:
        return "n/a"
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def summary(runs, default: str, baseline: str) -> dict:
    """budget -> spec -> figures, over the conversations every spec of that budget was replayed on."""
    out = {}
    for budget in sorted({b for _, b, _ in runs}):
        specs = sorted({s for s, b, _ in runs if b == budget}, key=lambda s: (s != default, s != baseline, s))
        convs = sorted(set.intersection(*({c for s, b, c in runs if s == spec and b == budget} for spec in specs)))
        rows = {}
        for spec in specs:
            turns = [t for c in convs for t in runs[spec, budget, c]]
            kl, top1, n, _ = pooled(turns)
            first = pooled([t for t in turns if t["turn"] == 1])
            later = pooled([t for t in turns if t["turn"] > 1])
            per = {c: pooled(runs[spec, budget, c]) for c in convs}
            base = {c: pooled(runs[baseline, budget, c]) for c in convs}
            dflt = {c: pooled(runs[default, budget, c]) for c in convs}
            ratios = [per[c][0] / base[c][0] for c in convs if base[c][0] > 0]
            rows[spec] = {
                "kl": kl,
                "top1": top1,
                "tokens": n,
                "first_kl": first[0],
                "first_tokens": first[2],
                "later_kl": later[0],
                "later_tokens": later[2],
                "conv_kl": [per[c][0] for c in convs],
                "conv_top1": [per[c][1] for c in convs],
                "conv_ratio": ratios,
                "below_default": sum(per[c][0] < dflt[c][0] for c in convs),
                "above_default": sum(per[c][0] > dflt[c][0] for c in convs),
                "below_baseline": sum(per[c][0] < base[c][0] for c in convs),
                "per_conversation": {c: {"kl": per[c][0], "top1": per[c][1], "tokens": per[c][2]} for c in convs},
            }
        base_kl = rows[baseline]["kl"] if baseline in rows else None
        for r in rows.values():
            r["ratio"] = r["kl"] / base_kl if base_kl else None
        out[budget] = {"conversations": convs, "specs": rows}
    return out


def report(s: dict, default: str, baseline: str) -> list[str]:
    lines = []
    for budget, block in s.items():
        convs = block["conversations"]
        lines.append(
            f"budget {budget}: {len(convs)} conversations, {next(iter(block['specs'].values()))['tokens']} tokens"
        )
        lines.append(
            "| spec | KL / top-1 (pooled) | KL ratio to h2o | 1st reply KL | later KL | per-conv KL min/med/max "
            "| per-conv top-1 min/med/max | per-conv ratio min/med/max | KL < default's | KL < h2o's |"
        )
        lines.append("|" + " --- |" * 10)
        for spec, r in block["specs"].items():
            ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(
                f"| `{spec}` | {r['kl']:.3f} / {r['top1']:.3f} | {ratio} | {r['first_kl']:.3f} | {r['later_kl']:.3f} "
                f"| {spread(r['conv_kl'])} | {spread(r['conv_top1'])} | {spread(r['conv_ratio'], '{:.2f}')} "
                f"| {r['below_default']} of {len(convs)} ({r['above_default']} higher) "
                f"| {r['below_baseline']} of {len(convs)} |"
            )
        lines.append("")
        lines.append("per conversation, KL (top-1):")
        specs = list(block["specs"])
        lines.append("| conversation | tokens | " + " | ".join(f"`{s}`" for s in specs) + " |")
        lines.append("|" + " --- |" * (len(specs) + 2))
        for c in convs:
            cells = [block["specs"][s]["per_conversation"][c] for s in specs]
            lines.append(
                f"| {c} | {cells[0]['tokens']} | "
                + " | ".join(f"{x['kl']:.3f} ({x['top1']:.3f})" for x in cells)
                + " |"
            )
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--default", default="nexus-agent")
    ap.add_argument("--baseline", default="h2o")
    ap.add_argument("--json", type=Path, help="write the summary as JSON")
    args = ap.parse_args()
    s = summary(load(args.results), args.default, args.baseline)
    print("\n".join(report(s, args.default, args.baseline)))
    if args.json:
        args.json.write_text(json.dumps({str(b): v for b, v in s.items()}, indent=1))


if __name__ == "__main__":
    main()
