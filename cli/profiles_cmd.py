"""`nexus-agent profiles`: the memory profiles a session can use (the profile store, or another folder)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def profiles_cmd(
    folder: Path = typer.Argument(None, help="a folder of profiles (default: the profile store)"),
) -> None:
    """List memory profiles, by default the store's (what sessions use with --memory-profile auto).

    One row per profile file: the model it was calibrated with, its template tokens (the fixed opening text),
    how many conversations it averages, and when it was written. A damaged file is listed as such (a
    session given the store would stop on it: remove it)."""
    from kvstore.defaults import PROFILE_SUFFIX
    from kvstore.errors import KVStoreError
    from kvstore.profiles.profile import MemoryProfile
    from pipeline.profiles.store import profile_store

    where = folder if folder is not None else profile_store()
    if folder is not None and not folder.is_dir():
        raise KVStoreError(f"{folder}: no such folder")
    console = Console()
    files = sorted(where.glob(f"*{PROFILE_SUFFIX}")) if where.is_dir() else []
    if folder is None:
        _pool_line(console, where)
    if not files:
        hint = " (make one with: nexus-agent calibrate TRACES..., or run solve or chat once)" if folder is None else ""
        console.print(f"no memory profiles in {where}{hint}", highlight=False)
        return
    table = Table(title=f"{len(files)} memory profile{'' if len(files) == 1 else 's'} in {where}")
    for column in ("file", "model", "layers x kv heads", "template tokens", "conversations", "written"):
        table.add_column(column, justify="right" if column in ("template tokens", "conversations") else "left")
    for f in files:
        written = datetime.fromtimestamp(f.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
        try:
            p = MemoryProfile.load(f)
        except KVStoreError:
            table.add_row(f.name, "[red]damaged: not a memory profile[/red]", "", "", "", written)
            continue
        shape = f"{p.identity.get('num_layers')} x {p.identity.get('num_kv_heads')}"
        template = f"{len(p.prefix)} + {len(p.suffix)}"
        table.add_row(f.name, str(p.meta.get("model", "?")), shape, template, str(p.conversations), written)
    console.print(table)


def _pool_line(console: Console, store: Path) -> None:
    """The conversations solve runs and chats keep to learn profiles from (pipeline.profiles.learn), per model, when
    there are any."""
    from pipeline.profiles.learn import POOL, pool_counts

    waiting = pool_counts(store)
    if waiting:
        said = ", ".join(f"{model}: {n} conversation{'' if n == 1 else 's'}" for model, n in waiting.items())
        line = f"kept by solve runs and chats to learn a profile from: {said} ({store / POOL})"
        console.print(line, highlight=False, soft_wrap=True)
