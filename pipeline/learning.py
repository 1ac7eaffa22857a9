"""The memory learns its agent: `solve` runs of the default memory that found no memory profile for their opening
keep their conversations in the profile store's pool, and once two of them share a system prompt, a profile is
calibrated from those two (kvstore.calibrate, with the run's own model, in its process) into the store. Every later
session of that agent and model then uses it (--memory-profile auto, the default). In `bench replay` a profile of
two conversations did as well as one of twelve (docs/memory.md).

The pool is `<profile store>/pool/<model>/`: copies of the runs' trajectory.jsonl, the newest KEEP per model. The
two conversations a profile was learned from leave the pool. `--no-learn`, `--memory-profile none` or another
profile path turn learning off; so does a run whose session matched a profile (it has one already).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.home import profile_store

KEEP = 8  # conversations kept per model in the pool
POOL = "pool"


def should_learn(cfg: RunConfig, profile_status: str | None) -> bool:
    """Whether this finished run's conversation may teach the store: a local run of the default memory with
    learning on, whose session found no profile for its opening."""
    return cfg.learns and not (profile_status or "").startswith("matched")


def learn_from_run(cfg: RunConfig, model, tokenizer, trajectory: Path, say: Callable[[str], None]) -> str | None:
    """Keep the run's conversation in the pool and, when the pool holds another of the same agent (system prompt)
    and model, calibrate a profile from the two into the store. One line for people: what happened (None: the run
    left no conversation to learn from)."""
    from filelock import FileLock

    from kvstore.errors import KVStoreError
    from kvstore.profile import store_name
    from pipeline.conversations import calibrate_recorded, load_conversation

    try:
        this = load_conversation(trajectory)
    except (KVStoreError, OSError, ValueError):
        return None
    if _system(this.messages) is None or not any(m["role"] == "assistant" for m in this.messages):
        return None
    pool = profile_store() / POOL / _safe(cfg.model)
    pool.mkdir(parents=True, exist_ok=True)
    with FileLock(str(pool / ".lock")):  # runs finishing at once: one calibrates, the other finds the profile
        kept = pool / f"{time.time_ns():020d}--{_safe(this.name)}.jsonl"  # sorts by age
        shutil.copyfile(trajectory, kept)
        files = sorted(pool.glob("*.jsonl"), reverse=True)  # newest first
        for old in files[KEEP:]:
            old.unlink(missing_ok=True)
        same = [(f, c) for f in files[:KEEP] if (c := this if f == kept else _same_agent(f, this.messages))]
        if len(same) < 2:
            return (
                "memory profile: none for this agent and model yet; this run's conversation is kept, and the next "
                "run of this agent learns one from the two (--no-learn turns this off)"
            )
        pair = [replace(c, name=f.stem.partition("--")[2]) for f, c in same[:2]]  # the run's name, not the pool's
        say(f"learning a memory profile for this agent from {len(pair)} runs' conversations (once)")
        meta = {"model": cfg.model, "learned": [c.name for c in pair]}
        try:
            profile = calibrate_recorded(model, tokenizer, pair, say, meta=meta)
        except KVStoreError as e:
            return f"memory profile: could not learn one from the last two runs ({e}); their conversations are kept"
        dest = profile_store() / store_name(profile)
        profile.save(dest)
        for f, _ in same[:2]:
            f.unlink(missing_ok=True)
    return f"memory profile: learned {profile.summary} -> {dest}; later runs of this agent use it"


def pool_counts(store: Path) -> dict[str, int]:
    """{model: conversations kept} of the store's pool, models with none left out."""
    counts = {d.name: len(list(d.glob("*.jsonl"))) for d in sorted((store / POOL).glob("*")) if d.is_dir()}
    return {model: n for model, n in counts.items() if n}


def _same_agent(path: Path, messages: list[dict[str, str]]):
    """The pooled conversation at `path` when it has the system prompt of `messages`, else None."""
    from kvstore.errors import KVStoreError
    from pipeline.conversations import load_conversation

    try:
        found = load_conversation(path)
    except (KVStoreError, OSError, ValueError):
        path.unlink(missing_ok=True)  # a damaged copy teaches nothing
        return None
    return found if _system(found.messages) == _system(messages) else None


def _system(messages: list[dict[str, str]]) -> str | None:
    return next((m["content"] for m in messages if m["role"] == "system"), None)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80] or "model"
