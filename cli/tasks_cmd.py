"""`nexus-agent tasks list|show`: browse the tasks of any source (built-in, a local file, a HF dataset)."""

from __future__ import annotations

import json

import typer
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table

from cli.console import console
from cli.errors import json_flag
from cli.safe_text import safe_text

tasks_app = typer.Typer(
    no_args_is_help=True, help="Browse tasks: built-in, a local JSON/JSONL/parquet file, or a HF dataset."
)

DATASET_HELP = "Task source: 'builtin' (default), a .json/.jsonl/.parquet file, or a HF dataset 'owner/name[:split]'."


def _first_line(text: str, width: int | None = 80) -> str:
    """The first line of `text` with words, cut to `width` characters (None: whole)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


@tasks_app.command("list")
def list_tasks(
    dataset: str = typer.Option(None, "--dataset", "-d", help=DATASET_HELP),
    as_json: bool = json_flag("Print a JSON list, one object per task (id, repo, tests, issue)."),
) -> None:
    """One row per task: id, repo, number of FAIL_TO_PASS / PASS_TO_PASS tests, the issue's first line. Piped or
    redirected, the table keeps whole ids and lines (no terminal width to fit)."""
    from tasks import load_tasks  # lazy: urllib, off --help

    tasks = load_tasks(dataset)
    if as_json:
        typer.echo(json.dumps([_summary(t) for t in tasks], indent=2))
        return
    out = console()
    width = 80 if out.is_terminal else None  # piped or redirected: whole lines, as the help says
    table = Table(title=f"{len(tasks)} task{'s' * (len(tasks) != 1)} from {dataset or 'builtin'}")
    widest = min(max(len(t.instance_id) for t in tasks), 60)  # ids whole on a terminal: they are what users copy
    table.add_column("instance_id", no_wrap=True, min_width=widest)
    for column in ("repo", "#F2P", "#P2P", "issue"):
        table.add_column(column, justify="right" if column.startswith("#") else "left")
    for task in tasks:
        counts = (str(len(task.fail_to_pass)), str(len(task.pass_to_pass)))
        issue = safe_text(_first_line(task.problem_statement, width))
        table.add_row(safe_text(task.instance_id), safe_text(task.repo), *counts, issue)
    out.print(table)


def _summary(task) -> dict:
    """A task's row for scripts: what `list` shows, the issue's first line whole."""
    return {
        "instance_id": task.instance_id, "repo": task.repo, "fail_to_pass": len(task.fail_to_pass),
        "pass_to_pass": len(task.pass_to_pass), "issue": _first_line(task.problem_statement, None),
        "source": task.source or "builtin",
    }  # fmt: skip


@tasks_app.command("show")
def show_task(
    instance_id: str = typer.Argument(..., help="The task's instance_id."),
    dataset: str = typer.Option(None, "--dataset", "-d", help=DATASET_HELP),
    as_json: bool = json_flag("Print the SWE-bench record as JSON."),
) -> None:
    """The full record of one task: metadata, the issue, the test lists and the patches."""
    from tasks import get_task  # lazy: urllib, off --help

    task = get_task(instance_id, dataset)
    if as_json:
        typer.echo(json.dumps(task.to_record(), indent=2))
        return
    out = console()
    meta = Table.grid(padding=(0, 2))
    for key in ("instance_id", "repo", "base_commit", "version", "created_at", "docker_image", "test_cmd", "source"):
        meta.add_row(f"[bold]{key}[/bold]", safe_text(getattr(task, key) or "-"))
    out.print(meta)
    out.print(Panel(safe_text(task.problem_statement.strip()), title="issue", expand=False))
    for title, tests in (("FAIL_TO_PASS", task.fail_to_pass), ("PASS_TO_PASS", task.pass_to_pass)):
        out.print(f"[bold]{title}[/bold] ({len(tests)})")
        for test in tests:
            out.print(safe_text(f"  {test}"))
    for title, patch in (("gold patch", task.patch), ("test patch", task.test_patch)):
        out.print(Rule(title), width=out.width if out.is_terminal else 80)  # a file gets a rule, not 100k dashes
        out.print(safe_text(patch.rstrip() or "(none)"))
