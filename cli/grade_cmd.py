"""`nexus-agent grade ID --patch FILE|gold|empty`: grade one patch like SWE-bench and print the verdict."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cli.console import console as make_console
from cli.live import STATUS_STYLE
from cli.options import raw_options
from cli.safe_text import safe_markup, safe_text
from pipeline.files import atomic_write, check_writable


@raw_options("repo_cache")
def grade_cmd(
    instance_id: str = typer.Argument(..., help="The task's instance_id."),
    patch: str = typer.Option(..., "--patch", "-p", help="A diff file, 'gold' (the task's patch) or 'empty'."),
    dataset: str = typer.Option(None, "--dataset", "-d", help="Task source (default: built-in tasks)."),
    sandbox: str = typer.Option("auto", "--sandbox", "-s", help="auto, docker, bwrap, or local (no isolation)."),
    json_path: Path = typer.Option(None, "--json", help="Also write the report as JSON here."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds the tests may run."),
    **given: Path | None,
) -> None:
    """Apply the patch and the task's test patch in a fresh sandbox, run the tests, report per test.

    Exit code: 0 resolved; 1 not resolved (unresolved, empty patch, patch did not apply); 2 the grading could not run
    (status error, or a bad option)."""
    from swe_env.grading import GradeConfig, grade  # lazy: docker, pyarrow, off --help
    from swe_env.sandbox.factory import SandboxConfig  # lazy: urllib, off --help
    from tasks import get_task  # lazy: urllib, off --help

    _check_options(sandbox, timeout, json_path)  # a bad option: one line, before any sandbox
    task = get_task(instance_id, dataset)
    text = _patch_text(patch, task)
    cfg = GradeConfig(
        backend=sandbox,
        sandbox=SandboxConfig(repo_cache=given["repo_cache"], install_tools=False),
        test_timeout=timeout,
    )
    console = make_console()
    with console.status(f"grading {instance_id} ({sandbox})"):
        report = grade(task, text, config=cfg)
    if json_path is not None:  # first: the report is on disk whatever the display does
        _write_json(json_path, report.to_json() + "\n")
    _print(console, report)
    if json_path is not None:
        console.print(f"report written to {safe_markup(str(json_path))}")
    raise typer.Exit(exit_code(report.status))


def exit_code(status: str) -> int:
    """The command's exit code for a grading status (the docstring's table)."""
    return 0 if status == "resolved" else 2 if status == "error" else 1


def _check_options(sandbox: str, timeout: float, json_path: Path | None) -> None:
    """Refuse, in one line, what would only fail after the sandbox opened or the tests ran: an unknown --sandbox, a
    --timeout that is not positive, a --json file that cannot be written."""
    from swe_env.sandbox import BACKENDS  # lazy: urllib, off --help
    from tasks.schema import TaskError  # lazy: urllib, off --help

    if sandbox not in BACKENDS:
        raise TaskError(f"unknown --sandbox {sandbox!r}; choose one of {', '.join(BACKENDS)}")
    if not timeout > 0:  # NaN included
        raise TaskError(f"--timeout {timeout:g}: give the seconds the tests may run, more than 0")
    if json_path is not None:
        check_writable(json_path, "--json", "the file to write the report to")


def _write_json(path: Path, text: str) -> None:
    """Write the report to --json's file; an OSError is one line, never a traceback."""
    from tasks.schema import TaskError  # lazy: urllib, off --help

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    except OSError as exc:
        raise TaskError(f"--json {path}: cannot write the report there ({exc.strerror or exc})") from None


def _patch_text(patch: str, task) -> str:
    if patch == "gold":
        return task.patch
    if patch == "empty":
        return ""
    from tasks.schema import TaskError  # lazy: urllib, off --help

    path = Path(patch)
    if path.is_dir():
        raise TaskError(f"patch file {patch} is a folder; give a diff file (or use --patch gold / --patch empty)")
    if not path.is_file():
        raise TaskError(f"patch file {patch} not found (or use --patch gold / --patch empty)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # SWE-bench patches are UTF-8 text, as predictions.jsonl carries them
        raise TaskError(f"patch file {patch} is not UTF-8 text (byte {exc.start})") from None


def _print(console: Console, report) -> None:
    style = STATUS_STYLE.get(report.status, "white")
    how = f" (backend {report.backend}, patch applied with {report.apply_method or '-'}, {report.duration_s:.1f} s)"
    console.print(Text.assemble(safe_text(report.instance_id, "bold"), ": ", safe_text(report.status, style), how))
    if report.error:  # it can quote the tests' output
        console.print(safe_text(report.error, "red"))
    table = Table("kind", "test", "result")
    for kind, results in (("FAIL_TO_PASS", report.fail_to_pass), ("PASS_TO_PASS", report.pass_to_pass)):
        for test, result in results.items():
            color = "green" if result in ("PASSED", "XFAIL") else "red" if result != "NOT_RUN" else "dim"
            table.add_row(kind, safe_text(test), safe_text(result, color))
    console.print(table)
    if report.status in ("patch_failed", "error") and report.log_excerpt:
        console.print(safe_text(report.log_excerpt[-2000:]))  # the tests' output: the agent's patch decides it
