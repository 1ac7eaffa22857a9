"""`nexus-agent calibrate --builtin`: the shipped memory profile of the built-in agent for one model
(pipeline.profiles.builtin), calibrated on recorded conversations rendered as that agent would have had them
(`bench replay --system agent`), written into the package's shipped folder with its manifest entry."""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def calibrate_builtin(files: list[Path], traces: list[Path], model: str, max_tokens, limit, dtype, console) -> None:
    from benchmarks.replay_trace import load_replayed
    from kvstore.errors import KVStoreError
    from kvstore.models.registry import load_model
    from pipeline.conversations import calibrate_recorded, task_statement
    from pipeline.profiles.builtin import (
        SHIPPED,
        SHIPPED_VERSION,
        placeholder_openings,
        record,
        shipped_name,
        template_digest,
    )

    m, tok, _ = load_model(model, dtype=dtype)
    conversations = [load_replayed(f, tok, "agent").conversation for f in files]
    unmarked = [c.name for c in conversations if task_statement(c) is None]
    if unmarked:  # the instance prompt wraps the recorded statement: without one the opening is not the agent's
        raise KVStoreError(f"--builtin: no marked task statement in {', '.join(unmarked)}")
    variants = placeholder_openings(conversations[0].messages)
    meta = {"model": model, "exact": True, "builtin": SHIPPED_VERSION, "template_sha256": template_digest()}
    profile = calibrate_recorded(m, tok, conversations, console.print, max_tokens, meta, variants)
    out = SHIPPED / shipped_name(model)
    profile.save(out)
    entry = record(model, out, profile.meta["sources"], rebuild_command(traces, model, max_tokens, limit, dtype))
    console.print(f"wrote {out}: {profile.summary}; sha256 {entry['sha256'][:16]}…, manifest updated")


def rebuild_command(traces: list[Path], model: str, max_tokens, limit, dtype) -> str:
    """The command line that rebuilds the profile: the traces under the shared data folder as $NEXUS_SHARED_DATA."""
    from benchmarks.replay_data import shared_data_dir

    shared = shared_data_dir()
    shown = []
    for t in traces:
        t = t.resolve()
        if shared is not None and t.is_relative_to(shared.resolve()):
            shown.append("$NEXUS_SHARED_DATA/" + str(t.relative_to(shared.resolve())))
        else:
            shown.append(shlex.quote(os.fspath(t)))
    parts = ["nexus-agent calibrate --builtin", f"--model {model}"]
    parts += [f"--limit {limit}"] if limit else []
    parts += [f"--max-tokens {max_tokens}"] if max_tokens else []
    parts += [f"--dtype {dtype}"] if dtype else []
    return " ".join(parts + shown)
