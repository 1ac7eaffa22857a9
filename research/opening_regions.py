"""The parts of the opening (the sink, the system line, the task statement, the fixed instructions after it, the last 64
tokens) and what the first reply reads of each, against what the default (and the next-reply oracle) holds when it
starts, at 25% of the replayed length (issue 54, cold start). Same simulation as research/opening_rankings.py.

    python research/opening_regions.py TRACE...

Per part: `mass` (the share of the first reply's attention over the opening), `kept` (tokens held per kv head / the
part's tokens), `missed` (the share of that attention on tokens not held); averaged over layers and kv heads.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from opening_rankings import attention_rows, eager_model, first_reply, simulate  # beside this script


def regions(tok, ids: list[int], opening: int) -> dict[str, tuple[int, int]]:
    """The parts' [start, end) token ranges, the task statement found by its <pr_description> tags."""
    text, bounds = "", {}
    for i, t in enumerate(ids[:opening]):
        text += tok.decode([t])
        for key in ("<pr_description>", "</pr_description>"):
            if key in text and key not in bounds:
                bounds[key] = i
    a, b = bounds.get("<pr_description>", 0), bounds.get("</pr_description>", 0)
    return {
        "sink": (0, 16),
        "system": (16, a),
        "task": (a, b + 1),
        "instr": (b + 1, opening - 64),
        "last64": (opening - 64, opening),
    }


def main() -> None:
    model, tok = eager_model("smollm2-135m")
    for path in map(Path, sys.argv[1:]):
        found = first_reply(path, tok, 4096)
        if found is None:
            continue
        ids, opening, replayed = found
        parts = regions(tok, ids, opening)
        layers, vnorms = attention_rows(model, ids)
        budget = math.ceil(0.25 * replayed)
        print(path.name[:30], "opening", opening, "budget", budget)
        for label in ("oracle", "default"):
            mass, kept, missed = (dict.fromkeys(parts, 0.0) for _ in range(3))
            for att, vnorm in zip(layers, vnorms, strict=True):
                target = att[:, opening:, :opening].sum(1)
                target = target / target.sum(-1, keepdim=True)
                if label == "oracle":
                    keep = torch.zeros_like(target, dtype=torch.bool)
                    keep.scatter_(1, target.topk(budget, -1).indices, True)
                else:
                    keep = simulate(att, opening, budget, "acc", 0.5, vnorm)
                for r, (s, e) in parts.items():
                    mass[r] += float(target[:, s:e].sum(-1).mean()) / len(layers)
                    kept[r] += float(keep[:, s:e].float().sum(-1).mean()) / len(layers)
                    missed[r] += float((target * ~keep)[:, s:e].sum(-1).mean()) / len(layers)
            cells = [
                f"{r}: mass {mass[r]:.3f} kept {kept[r]:.0f}/{e - s} missed {missed[r]:.3f}"
                for r, (s, e) in parts.items()
            ]
            print(f"  {label:8s}", "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
