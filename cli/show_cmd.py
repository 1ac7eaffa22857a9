"""`nexus-agent show RUN_DIR`: a run afterwards, step by step (pipeline.run_view reads it; this module renders)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from cli.console import console as make_console
from cli.errors import json_flag
from cli.live import STATUS_STYLE, exit_words, plural
from cli.safe_text import safe_text
from pipeline.run_view import read_run


def show_cmd(
    folder: Path = typer.Argument(..., help="A run folder: solve's --out (runs/...), or one task of an eval's --out."),
    as_json: bool = json_flag("Print the run as one JSON object (full observations)."),
    lines: int = typer.Option(8, "--lines", min=0, help="Lines of each tool output shown (the rest is counted)."),
    full: bool = typer.Option(False, "--full", help="Whole tool outputs and the model's replies."),
    pager: bool = typer.Option(True, "--pager/--no-pager", help="Page the output on a terminal (less)."),
) -> None:
    """Show a run: its task, model, memory and result, then each step with its call (command and arguments), the
    tool's output (cut to --lines), times and the cache after it. Works while the run is still going (no result
    yet) and on an eval's task folders; --json gives the same for scripts."""

    view = read_run(folder)
    if as_json:
        typer.echo(json.dumps(view, indent=2, ensure_ascii=False))
        return
    console = make_console()
    if pager and console.is_terminal:
        os.environ.setdefault("LESS", "-RFX")  # less shows the colours, and leaves a run of one screen printed
        with console.pager(styles=True):
            _render(console, view, None if full else lines, full)
    else:
        _render(console, view, None if full else lines, full)


def _render(console: Console, view: dict[str, Any], lines: int | None, replies: bool) -> None:
    console.print(Text.assemble(safe_text(view["task"] or "?", "bold"), safe_text(f"  ({view['folder']})")))
    console.print(safe_text(f"model: {view['model']} | memory: {_memory(view['memory'])}"))
    console.print(_result(view["result"], len(view["steps"])))
    if view["truncated"]:
        console.print(safe_text("(the trajectory's last line was cut: the run was killed while writing it)", "yellow"))
    for step in view["steps"]:
        console.print()
        _render_step(console, step, lines, replies)


def _memory(memory: dict[str, Any]) -> str:
    if not memory:
        return "-"
    words = [f"{k} {v}" for k, v in memory.items() if k != "policy" and v is not None]
    return ", ".join([str(memory.get("policy", "?")), *words])


def _result(result: dict[str, Any] | None, steps: int) -> Text:
    if not result:
        return safe_text(f"result: none yet (no report.json: running, or stopped) after {plural(steps, 'step')}")
    status = str(result.get("status"))
    how = f" ({exit_words(result.get('exit_reason'))} after {plural(result.get('steps') or 0, 'step')})"
    if result.get("error"):
        how += f": {' '.join(str(result['error']).split())[:300]}"
    times = f" | patch {plural(result.get('patch_lines') or 0, 'line')} | wall {result.get('wall_s') or 0:.1f} s"
    return Text.assemble("result: ", safe_text(status, STATUS_STYLE.get(status, "white")), safe_text(how + times))


def _render_step(console: Console, step: dict[str, Any], lines: int | None, replies: bool) -> None:
    """The call on one line (a multi-line argument, such as an edit's text, as a block below it), times, cache,
    then the reply (with --full) and the tool's output."""
    call = step["call"] or {}
    params = call.get("params") or {}
    blocks = {k: str(v) for k, v in params.items() if "\n" in str(v)}
    inline = [f"{k}={_one_line(v, 200)}" for k, v in params.items() if k not in blocks]
    head = f"step {step['step']}: " + (" ".join([str(call.get("name")), *inline]) if call else "no valid tool call")
    if step["exit_code"] is not None:
        head += f" -> exit {step['exit_code']}"
    console.print(safe_text(head, "bold"))
    console.print(safe_text(f"  model {step['model_s'] or 0:.1f} s, tool {step['env_s'] or 0:.1f} s | {_cache(step)}"))
    for key, text in blocks.items():
        _block(console, key, text, lines)
    if replies:
        _block(console, "reply", step["reply"] or "", None)
    _block(console, "output", step["observation"], lines)


def _one_line(value: Any, width: int) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _cache(step: dict[str, Any]) -> str:
    c = step["cache"]
    if not c:
        return "cache: - (no statistics: a replay or a server)"
    return (
        f"cache: prefill {c.get('prefill_tokens', 0)} tok, generated {c.get('generated_tokens', 0)} tok, held "
        f"{c.get('held_tokens', 0)} tok/layer ({(c.get('held_bytes') or 0) / 2**20:.1f} MiB), evicted "
        f"{c.get('evicted_tokens', 0)} tok/layer"
    )


def _block(console: Console, title: str, text: str, lines: int | None) -> None:
    """`text` indented under `title`, cut to `lines` lines (None: all) with the rest counted."""
    body = text.splitlines()
    shown = body if lines is None else body[:lines]
    console.print(safe_text(f"  {title}:", "dim"))
    for line in shown:
        console.print(safe_text(f"    {line}"))
    if len(shown) < len(body):
        console.print(safe_text(f"    … {plural(len(body) - len(shown), 'more line')} (--full shows them)", "dim"))
