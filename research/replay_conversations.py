"""Per conversation, the default memory against a baseline in a `bench replay` result: each conversation's KL and
top-1 for both, the KL ratio, and the spread of each over the conversations (min, median, max), per budget.

The pooled tables of `bench replay` weigh each conversation by its scored tokens; this shows whether a pooled figure
holds conversation by conversation, which matters when the conversations are few and unequal (the reasoning traces:
1 to 8 replies each at 4,096 tokens).

    python research/replay_conversations.py RESULT.json [--default nexus-agent] [--baseline h2o]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def pooled(turns: list[dict]) -> tuple[float, float, int]:
    """(mean KL, top-1 agreement, scored tokens) over a run's turns."""
    n = sum(t["tokens"] for t in turns)
    return sum(t["kl"] for t in turns) / max(n, 1), sum(t["top1"] for t in turns) / max(n, 1), n


def per_conversation(result: dict, default: str, baseline: str) -> dict[str, list[dict]]:
    """budget -> one row per conversation replayed under both specs (seed 0): KL, top-1, tokens and the KL ratio."""
    runs = {(r["spec"], str(r["budget"]), r["conversation"]): r for r in result["runs"] if r.get("seed", 0) == 0}
    out: dict[str, list[dict]] = {}
    for spec, budget, name in sorted(runs):
        other = runs.get((baseline, budget, name))
        if spec != default or other is None:
            continue
        (kl, top1, n), (base_kl, base_top1, _) = pooled(runs[spec, budget, name]["turns"]), pooled(other["turns"])
        ratio = kl / base_kl if base_kl else None
        row = {"conversation": name, "tokens": n, "kl": kl, "top1": top1, "base_kl": base_kl, "base_top1": base_top1}
        out.setdefault(budget, []).append(row | {"ratio": ratio})
    return out


def spread(values: list[float]) -> str:
    """`min / median / max` of the values."""
    return f"{min(values):.4f} / {statistics.median(values):.4f} / {max(values):.4f}" if values else "n/a"


def report(rows_by_budget: dict[str, list[dict]], default: str, baseline: str) -> list[str]:
    lines = []
    for budget, rows in sorted(rows_by_budget.items(), key=lambda kv: float(kv[0])):
        lines += [f"budget {budget}: {default} against {baseline}, {len(rows)} conversations"]
        lines += ["  conversation                               tokens   KL      top-1   base KL  base top-1  ratio"]
        for r in rows:
            ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(
                f"  {r['conversation'][:40]:40} {r['tokens']:6d}   {r['kl']:.4f}  {r['top1']:.3f}   "
                f"{r['base_kl']:.4f}   {r['base_top1']:.3f}       {ratio}"
            )
        ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
        lines.append(
            f"  min / median / max  KL {spread([r['kl'] for r in rows])}  top-1 {spread([r['top1'] for r in rows])}"
        )
        lines.append(f"  {baseline:>18}  KL {spread([r['base_kl'] for r in rows])}  top-1 "
                     f"{spread([r['base_top1'] for r in rows])}")  # fmt: skip
        better = sum(r["kl"] < r["base_kl"] for r in rows)
        lines.append(f"  KL ratio {spread(ratios)}; {default} has the lower KL on {better} of {len(rows)}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path)
    parser.add_argument("--default", default="nexus-agent")
    parser.add_argument("--baseline", default="h2o")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text())
    print("\n".join(report(per_conversation(result, args.default, args.baseline), args.default, args.baseline)))
    for f in result.get("failed", []):
        print(f"skipped: {f['conversation']}: {f['error']}" if f.get("spec") is None else f"failed: {f}")


if __name__ == "__main__":
    main()
