"""How much a replay's ratios hang on single conversations: for each ratio of the issue-64 targets, the pooled value
over the conversations every spec of it finished, a 90% bootstrap interval over conversations (the conversations
drawn with replacement, each ratio pooled again), the ratio without the one conversation that adds most to the
spec's excess over its reference, that conversation, and the median of the per-conversation ratios.

    python research/replay_spread.py OUT.md a.json b.json ... [--budget 0.25] [--default SPEC] [--none SPEC]
        [--relabel OLD NEW]...

Ratios: the default's whole-conversation KL over H2O's, its first reply over the next-reply oracle's, and the
no-profile default's first reply over H2O's. `--relabel` renames a spec in every file (a later run of the default
under a name of its own, e.g. `'nexus-agent+profile [task text]'`), applied before the specs are looked up.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import defaultdict
from pathlib import Path

ORACLE = "oracle:next-reply-top-K"
DRAWS = 2000


def conversation_sums(files: list[Path], budget: float, relabel: dict[str, str]) -> dict[str, dict[str, tuple]]:
    """spec -> conversation -> (KL sum, tokens, first-reply KL sum) at `budget`; the first file to give a pair wins."""
    by: dict[str, dict[str, tuple]] = defaultdict(dict)
    for f in files:
        for r in json.loads(f.read_text(encoding="utf-8"))["runs"]:
            if r["budget"] != budget:
                continue
            turns = r["turns"]
            first = sum(t["kl"] for t in turns if t["turn"] == 1)
            sums = (sum(t["kl"] for t in turns), sum(t["tokens"] for t in turns), first)
            by[relabel.get(r["spec"], r["spec"])].setdefault(r["conversation"], sums)
    return by


def spread(num: dict[str, float], den: dict[str, float], rng: random.Random) -> dict:
    """The pooled ratio sum(num) / sum(den) over the conversations both have, with its spread."""
    convs = sorted(set(num) & set(den))
    pooled = sum(num[c] for c in convs) / sum(den[c] for c in convs)
    draws = []
    for _ in range(DRAWS):
        pick = [rng.choice(convs) for _ in convs]
        d = sum(den[c] for c in pick)
        if d > 0:
            draws.append(sum(num[c] for c in pick) / d)
    draws.sort()
    worst = max(convs, key=lambda c: num[c] - pooled * den[c])  # the most excess at the pooled rate
    rest = [c for c in convs if c != worst]
    without = sum(num[c] for c in rest) / sum(den[c] for c in rest)
    per = [num[c] / den[c] for c in convs if den[c] > 0]
    return {
        "n": len(convs),
        "pooled": pooled,
        "low": draws[int(0.05 * len(draws))],
        "high": draws[int(0.95 * len(draws)) - 1],
        "without_worst": without,
        "worst": worst,
        "median": statistics.median(per),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--budget", type=float, default=0.25)
    ap.add_argument("--default", default="nexus-agent+profile")
    ap.add_argument("--none", default="nexus-agent@profile=none")
    ap.add_argument("--relabel", nargs=2, action="append", default=[], metavar=("OLD", "NEW"))
    a = ap.parse_args()
    by = conversation_sums(a.files, a.budget, dict(a.relabel))
    rng = random.Random(0)
    kl = {s: {c: v[0] for c, v in convs.items()} for s, convs in by.items()}
    first = {s: {c: v[2] for c, v in convs.items()} for s, convs in by.items()}
    ratios = [
        (f"KL, {a.default} / h2o", kl.get(a.default), kl.get("h2o")),
        (f"first reply, {a.default} / oracle", first.get(a.default), first.get(ORACLE)),
        (f"first reply, {a.none} / h2o", first.get(a.none), first.get("h2o")),
    ]
    lines = [
        f"budget {a.budget}; files: {', '.join(f.name for f in a.files)}",
        "",
        "| ratio | conversations | pooled | 90% interval | without the worst (which) | median per conversation |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, num, den in ratios:
        if not num or not den:
            lines.append(f"| {name} | - | (a spec is missing) | | | |")
            continue
        s = spread(num, den, rng)
        lines.append(
            f"| {name} | {s['n']} | {s['pooled']:.2f} | {s['low']:.2f}-{s['high']:.2f} | "
            f"{s['without_worst']:.2f} ({s['worst']}) | {s['median']:.2f} |"
        )
    text = "\n".join(lines)
    a.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
