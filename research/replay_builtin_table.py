"""The table of docs/memory.md's "Shipped profiles" measurement from `bench replay --json` files (partial ones too):
per spec, over the conversations every spec finished (the rest are listed as left out), the token-pooled KL and its
ratio to the best baseline's (H2O, SnapKV), the first reply's KL and its ratio to the next-reply oracle's, and top-1.

    python research/replay_builtin_table.py OUT.md a.json b.json ...
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

BASELINES = ("h2o", "snapkv")
ORACLE = "oracle:next-reply-top-K"


def pooled(turns: list[dict]) -> tuple[float, float, int]:
    n = sum(t["tokens"] for t in turns)
    return sum(t["kl"] for t in turns) / n, sum(t["top1"] for t in turns) / n, n


def main(out: Path, files: list[Path]) -> None:
    runs = [r for f in files for r in json.loads(f.read_text())["runs"]]
    budgets = sorted({r["budget"] for r in runs}, key=str)
    lines = []
    for budget in budgets:
        by = defaultdict(dict)  # spec -> conversation -> turns
        for r in runs:
            if r["budget"] == budget:
                by[r["spec"]][r["conversation"]] = r["turns"]
        specs = sorted(by)
        done = sorted(set.intersection(*(set(c) for c in by.values())))
        left = sorted(set.union(*(set(c) for c in by.values())) - set(done))
        rows = {}
        for s in specs:
            turns = [t for c in done for t in by[s][c]]
            first = [t for c in done for t in by[s][c] if t["turn"] == 1]
            rows[s] = (*pooled(turns), pooled(first)[0])
        best = min(((rows[s][0], s) for s in BASELINES if s in rows), default=None)  # None: no baseline at this budget
        oracle_first = rows[ORACLE][3] if ORACLE in rows else None
        lines.append(f"budget {budget}: {len(done)} conversations ({', '.join(done)})")
        if left:
            lines.append(f"left out (not every spec finished): {', '.join(left)}")
        lines.append("")
        lines.append("| spec | KL | KL / best baseline's | first-reply KL | first reply / oracle's | top-1 |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for s in sorted(rows, key=lambda s: rows[s][0]):
            kl, top1, _, first = rows[s]
            vs_oracle = f"{first / oracle_first:.2f}" if oracle_first else "-"
            vs_best = f"{kl / best[0]:.2f}" if best else "-"
            lines.append(f"| {s} | {kl:.4f} | {vs_best} | {first:.4f} | {vs_oracle} | {top1:.3f} |")
        lines.append(f"\nbest baseline: {best[1] if best else 'none at this budget (give its files too)'}\n")
    text = "\n".join(lines)
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
