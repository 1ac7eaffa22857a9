"""`nexus-agent calibrate`: a memory profile from recorded agent conversations (kvstore.profiles.profile,
docs/memory.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvstore.defaults import DEFAULT_MODEL


def calibrate_cmd(
    traces: Annotated[
        list[Path],
        typer.Argument(
            help="recorded conversations (.traj.json / .jsonl), or folders of them: an eval's --out, solve runs, the "
            "chat sessions folder; two or more, or one whose task statement is marked (<github_issue>, <request>, "
            "<pr_description>)"
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="profile file to write (default: into the profile store, used automatically)"),
    ] = None,
    model: Annotated[str, typer.Option(help="model registry name / HF id / local directory")] = DEFAULT_MODEL,
    max_tokens: Annotated[
        int | None, typer.Option(help="tokens replayed per conversation (default: the model's positions)")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(help="calibrate on the first N conversations (default: all; two were enough in bench replay)"),
    ] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads (default: torch's)")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 | fp16 | fp32 (default: the machine's choice)")] = None,
    builtin: Annotated[
        bool,
        typer.Option(
            "--builtin",
            help="build the shipped profile of the built-in agent for --model (what --memory-profile builtin, the "
            "default, uses): mini-swe-agent traces rendered with this project's prompts, written into the package's "
            "shipped folder and its manifest (docs/memory.md, 'Shipped profiles')",
        ),
    ] = False,
) -> None:
    """Measure what an agent's replies need of its fixed opening text (the system prompt and instructions every
    conversation shares) on the full cache, and write it as a memory profile.

    By default it goes into the profile store ($NEXUS_AGENT_HOME/profiles), where solve, eval, chat and serve find
    it for every session of this model whose opening carries the same template (--memory-profile auto); calibrating
    the same agent and model again replaces it. With --out it is written there only, for --memory-profile FILE and
    bench replay --profile FILE. In bench replay one conversation with its task statement marked made about as good
    a profile as two, and two as twelve (docs/memory.md)."""
    import torch
    from rich.console import Console

    from kvstore.errors import KVStoreError
    from kvstore.models.registry import load_model
    from pipeline.conversations import (
        calibrate_recorded,
        conversation_files,
        load_conversation,
        marked_variants,
        unmarked,
    )
    from pipeline.files import check_writable

    console = Console(stderr=True)
    if limit is not None and limit < 1:
        raise typer.BadParameter(f"--limit {limit}: give at least 1")
    if max_tokens is not None and max_tokens < 1:
        raise typer.BadParameter(f"--max-tokens {max_tokens}: give at least 1")
    if out is not None:
        check_writable(out, "--out", f"the profile file to write (e.g. {out}/profile.pt)")  # before the replay
    if threads:
        torch.set_num_threads(threads)
    files = conversation_files(traces)[:limit]
    if builtin:
        from cli.calibrate_builtin import calibrate_builtin

        calibrate_builtin(files, traces, model, max_tokens, limit, dtype, console)
        return
    conversations = [load_conversation(p) for p in files]  # a bad file fails here, before the model loads
    variants = marked_variants(conversations[0]) if len(conversations) == 1 else []
    if len(conversations) == 1 and not variants:  # one opening alone cannot tell the fixed text from the task's
        raise KVStoreError(f"a profile from one conversation needs its task's text marked: {unmarked(files[0].name)}")
    m, tok, _ = load_model(model, dtype=dtype)
    profile = calibrate_recorded(m, tok, conversations, console.print, max_tokens, {"model": model}, variants)
    if out is None:
        from kvstore.profiles.profile import store_name
        from pipeline.profiles.store import profile_store

        out = profile_store() / store_name(profile)
        used = (
            "runs with --memory-profile auto (not the default, builtin) use it for every session of this model whose "
            "opening carries this template"
        )
    else:
        used = f"use it with --memory-profile {out}"
    try:
        profile.save(out)
    except (OSError, RuntimeError) as exc:  # torch.save reports a file it cannot open as a RuntimeError
        raise KVStoreError(f"cannot write the profile to {out}: {' '.join(str(exc).split())[:200]}") from None
    console.print(f"wrote {out}: {profile.summary}; {used}")
