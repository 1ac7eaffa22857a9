"""`nexus-agent profiles`: the memory profiles a session can use (the profile store, or another folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from cli.console import console as make_console
from cli.errors import json_flag


def profiles_cmd(
    folder: Path = typer.Argument(None, help="a folder of profiles (default: the profile store)"),
    as_json: bool = json_flag("Print the rows as a JSON list (for scripts)."),
    builtin: bool = typer.Option(
        False, "--builtin", help="The profiles shipped for the built-in agent (--memory-profile builtin, the default)."
    ),
) -> None:
    """List memory profiles, by default the store's (what sessions use with --memory-profile auto); with --builtin
    the package's shipped ones, each with whether a run would use it or why it is refused.

    One row per profile file: the model it was calibrated with, its template tokens (the fixed opening text),
    how many conversations it averages, and when it was written. A damaged file is listed as such (a
    session given the store would stop on it: remove it)."""
    from kvstore.errors import KVStoreError
    from pipeline.profiles.listing import profile_files, profile_rows
    from pipeline.profiles.store import profile_store

    if builtin:
        from pipeline.profiles.builtin import SHIPPED

        if folder is not None:
            raise KVStoreError(f"--builtin lists the shipped profiles and takes no folder (given {folder})")
        folder = SHIPPED
    where = folder if folder is not None else profile_store()
    if folder is not None and folder.is_file():
        raise KVStoreError(f"{folder} is a file; give the folder that holds it (profiles lists folders)")
    if folder is not None and not folder.is_dir():
        raise KVStoreError(f"{folder}: no such folder")
    rows = profile_rows(profile_files(where))
    if builtin:
        rows = [r | {"builtin": _verdict(r)} for r in rows]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    console = make_console()
    if folder is None:
        _pool_line(console, where)
    if not rows:
        hint = (
            " (make one with: nexus-agent calibrate TRACES..., or a run with --learn-profile)" if folder is None else ""
        )
        console.print(f"no memory profiles in {where}{hint}", highlight=False)
        return
    console.print(_table(rows, where))
    for r in rows if builtin else []:
        console.print(f"{r['file']}: {r['builtin']}", highlight=False, soft_wrap=True)


def _verdict(row: dict[str, Any]) -> str:
    """Whether a run of the shipped profile's model uses it (pipeline.profiles.builtin.resolve_builtin), or why not."""
    from pipeline.profiles.builtin import resolve_builtin

    said: list[str] = []
    model = row.get("model")
    if row["damaged"] or model is None or resolve_builtin(str(model), say=said.append) is None:
        return said[0] if said else "not in the manifest: no run uses it"
    return f"used by runs of {model} (checksum and the agent's template match)"


def _table(rows: list[dict[str, Any]], where: Path) -> Table:
    table = Table(title=f"{len(rows)} memory profile{'' if len(rows) == 1 else 's'} in {where}")
    for column in ("file", "model", "layers x kv heads", "template tokens", "conversations", "written"):
        table.add_column(column, justify="right" if column in ("template tokens", "conversations") else "left")
    for r in rows:
        written = r["written"].replace("T", " ")[:16]
        if r["damaged"]:
            table.add_row(r["file"], "[red]damaged: not a memory profile[/red]", "", "", "", written)
            continue
        shape = f"{r['num_layers']} x {r['num_kv_heads']}"
        template = f"{r['prefix_tokens']} + {r['suffix_tokens']}"
        table.add_row(r["file"], str(r["model"] or "?"), shape, template, str(r["conversations"]), written)
    return table


def _pool_line(console: Console, store: Path) -> None:
    """The conversations solve runs and chats keep to learn profiles from (pipeline.profiles.learn), per model, when
    there are any."""
    from pipeline.profiles.learn import POOL, pool_counts

    waiting = pool_counts(store)
    if waiting:
        said = ", ".join(f"{model}: {n} conversation{'' if n == 1 else 's'}" for model, n in waiting.items())
        line = f"kept by solve runs and chats to learn a profile from: {said} ({store / POOL})"
        console.print(line, highlight=False, soft_wrap=True)
