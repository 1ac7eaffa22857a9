"""Merge `nexus-agent bench replay --json` files of one configuration (e.g. the traces split over two processes or
machines, the budgets split over processes, or new specs replayed later on the same traces) into one result: the
same table, target check, JSON and plot the bench writes. The files must agree on model, dtype, tokens and seeds;
their specs and budgets (and the bound of `--bound`, the oracle of `--oracle`) are joined, and a conversation
replayed by several files is listed once. A `--learn` or `--cross-fit` replay joins its baselines replayed without
one (the result keeps its record); two such records must agree.

    python research/replay_merge.py OUT_PREFIX a.json b.json ...   # writes OUT_PREFIX.json, .txt and .png

`--relabel OLD NEW` before files renames spec OLD to NEW in the files that follow it (several may be given): a later
run of a spec whose meaning changed since the earlier files (the default memory after a change, `nexus-agent+profile`)
joins them under a name of its own, e.g. `--relabel nexus-agent+profile 'nexus-agent+profile [names]' new.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.replay import finish


def load(path: Path) -> dict:
    """One `bench replay --json` file, or a clear error for a missing, corrupt or foreign one."""
    try:
        part = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SystemExit(f"error: {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {path}: not JSON ({e.msg}, line {e.lineno})") from None
    except UnicodeDecodeError as e:
        raise SystemExit(f"error: {path}: not UTF-8 text (byte {e.start})") from None
    if not isinstance(part, dict) or not {"config", "runs"} <= part.keys():
        raise SystemExit(f"error: {path}: not a `bench replay --json` result (no config or runs)")
    return part


# How a replay's profiled runs got their profiles (`--learn`, `--cross-fit`). A file without it may join one with it:
# its runs read no such profile (baselines keep their plain names, the default without a profile is `nexus-agent`,
# the profiled runs `...+learned` / `...+profile`), so the labels keep them apart. Two records must agree.
PROFILES = ("learn", "cross_fit")


def run_key(run: dict) -> tuple:
    """What names one run (or recorded failure) of a replay: spec, budget, conversation and seed."""
    return run["spec"], run["budget"], run["conversation"], run.get("seed", 0)


def relabeled(part: dict, names: dict[str, str]) -> dict:
    """A loaded file with its specs renamed by `names` (old -> new)."""
    for run in part["runs"] + part.get("failed", []):
        run["spec"] = names.get(run["spec"], run["spec"])
    part["config"]["specs"] = [names.get(s, s) for s in part["config"]["specs"]]
    return part


def merge(paths: list[Path], relabels: list[dict[str, str]] | None = None) -> tuple[dict, dict]:
    """The merged result and its config; relabels[i] renames specs of paths[i] (old -> new)."""
    parts = [relabeled(load(p), names) for p, names in zip(paths, relabels or [{}] * len(paths), strict=True)]
    joined = ("traces", "specs", "budgets", "merged_from", "bound", "oracle")  # what the files may add to each other
    configs = [{k: v for k, v in p["config"].items() if k not in joined + PROFILES} for p in parts]
    if any(c != configs[0] for c in configs):
        raise SystemExit("error: the files were run with different settings (model, dtype, tokens, seeds, ...)")
    profiles = {}
    for key in PROFILES:
        records = [p["config"][key] for p in parts if p["config"].get(key) is not None]
        if any(r != records[0] for r in records):
            raise SystemExit(f"error: the files learned or cross-fitted their profiles differently ({key} differs)")
        if records:
            profiles[key] = records[0]
    result = {key: [x for p in parts for x in p.get(key, [])] for key in ("runs", "failed")}
    keys = [run_key(r) for r in result["runs"]]
    if len(set(keys)) < len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise SystemExit(f"error: {twice[0]} at budget {twice[1]} on {twice[2]} is in more than one file")
    conversations: dict[str, dict] = {}
    for c in (c for p in parts for c in p.get("conversations", [])):
        conversations.setdefault(c["name"], c)
    result["conversations"] = list(conversations.values())
    specs = list(dict.fromkeys(s for p in parts for s in p["config"]["specs"]))
    traces = list(dict.fromkeys(t for p in parts for t in p["config"]["traces"]))
    budgets = sorted({b for p in parts for b in p["config"]["budgets"]}, key=float)
    merged_from = sum(p["config"].get("merged_from", 1) for p in parts)  # a merged file counts its own parts
    info = configs[0] | profiles | {"specs": specs, "traces": traces, "budgets": budgets, "merged_from": merged_from}
    info["bound"] = any(p["config"].get("bound") for p in parts)  # one file replayed the query-specific bound
    info["oracle"] = list(dict.fromkeys(h for p in parts for h in p["config"].get("oracle") or []))  # set oracles
    if any(p.get("partial") for p in parts) and incomplete(result, info):
        info["partial"] = True  # a run was stopped before its last conversation, and no other file replayed the rest
    return result, info


def incomplete(result: dict, info: dict) -> bool:
    """Whether a trace of the merged result has no conversation, or a conversation lacks a run (or a recorded failure)
    of some spec at some budget and seed: what a stopped run leaves unless another file replayed the rest."""
    if len(result["conversations"]) < len(info["traces"]):
        return True
    done = {run_key(r) for r in result["runs"] + result["failed"]}
    names = [c["name"] for c in result["conversations"]]
    seeds = range(info.get("seeds", 1))
    wanted = {(s, b, c, seed) for s in info["specs"] for b in info["budgets"] for c in names for seed in seeds}
    return not wanted <= done


def arguments(argv: list[str]) -> tuple[Path, list[Path], list[dict[str, str]]]:
    """OUT_PREFIX, the files, and for each file the relabels (`--relabel OLD NEW`) given before it."""
    if len(argv) < 2:
        raise SystemExit(__doc__)
    paths, relabels, names = [], [], {}
    rest = argv[1:]
    while rest:
        if rest[0] == "--relabel":
            if len(rest) < 3:
                raise SystemExit("error: --relabel takes two specs: OLD NEW")
            names = names | {rest[1]: rest[2]}
            rest = rest[3:]
            continue
        paths.append(Path(rest[0]))
        relabels.append(names)
        rest = rest[1:]
    if not paths:
        raise SystemExit(__doc__)
    return Path(argv[0]), paths, relabels


def main(argv: list[str]) -> None:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    prefix, paths, relabels = arguments(argv)
    result, info = merge(paths, relabels)
    finish(result, info, prefix.with_suffix(".json"), prefix.with_suffix(".png"), prefix.with_suffix(".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
