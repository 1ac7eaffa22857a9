"""`nexus-agent eval`: solve and grade many tasks (process pool or Ray), resumable, with SWE-bench predictions; the
batch itself is pipeline.eval, this module its options and display."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from cli.console import console as make_console
from cli.errors import Interrupted, json_flag
from cli.options import run_options
from cli.safe_text import safe_text, say_to
from pipeline.config import RunConfig

EXIT_TASK_ERRORS = 1  # some task's run failed (it is retried by the next run of the same command)


@run_options(
    "dataset", "workers", "model", "policy", "budget", "protocol", "protect", "profile", "sandbox", "max_steps", "seed",
    "temperature", "threads", "max_new_tokens", "replay_dir", "command_timeout", "test_timeout", "repo_cache", "server",
    "api_key", "server_timeout", "warmup", "constrain", "call_format",
)  # fmt: skip
def eval_cmd(
    cfg: RunConfig,
    out: Path = typer.Option(..., "--out", "-o", help="Run folder (resumed when it exists)."),
    instances: str = typer.Option(None, "--instances", help="Comma-separated instance ids."),
    slice_: str = typer.Option(None, "--slice", help="start:stop over the source's order."),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster address (default: a local Ray)."),
    retry_errors: bool = typer.Option(False, "--retry-errors", hidden=True, help="No effect: errors are retried."),
    as_json: bool = json_flag("Print the summary (summary.json's content) as JSON on stdout; progress goes to stderr."),
) -> None:
    """Solve and grade each task into --out/<id>/; a rerun of the same command skips the finished tasks and runs the
    rest, including those whose run failed (an error is not a result: it is left out of predictions.jsonl). A rerun
    on other --instances keeps the results of the tasks it does not select in predictions.jsonl and summary.json. A
    folder whose run had other settings, or whose memory ran with defaults this version changed, is refused (exit 2).

    Exit code: 0 when every selected task finished, 1 when some task's run failed (listed with its reason at the
    end), 2 for a bad option or --out folder (nothing runs), 130 when interrupted (Ctrl-C: the finished tasks' files
    are complete; the same command continues)."""
    from pipeline.eval import plan_eval  # lazy: torch, transformers, off --help

    console = make_console(stderr=as_json)  # with --json, stdout carries the summary alone
    with plan_eval(cfg, out, instances, slice_, executor, ray_address) as batch:
        summary = _run_batch(console, batch)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(console, summary, out, len(batch.tasks))
    if summary["errors"]:
        raise typer.Exit(EXIT_TASK_ERRORS)


def _run_batch(console: Console, batch) -> dict:
    """Say what the batch will do, run it with the live view; its summary. Ctrl-C: one line on what is left."""
    from cli.live import plural  # lazy: rich.live (+65 modules), off --help
    from pipeline.eval_files import finished, read_report  # lazy: torch, transformers, off --help

    cfg, out = batch.cfg, batch.out
    retried = sum(read_report(out, t.instance_id) is not None for t in batch.todo)
    again = f" ({retried} of them failed before and run again)" if retried else ""
    done = len(batch.tasks) - len(batch.todo)
    console.print(
        safe_text(
            f"eval: {plural(len(batch.tasks), 'task')}, {done} finished earlier, {len(batch.todo)} to run{again} "
            f"-> {out}"
        )
    )
    if cfg.lacks_profile and len(batch.todo) > 2:
        console.print(
            "memory profile: none (the default); --warmup 1 learns one from the first task for the rest of this batch "
            "(docs/memory.md)",
            highlight=False,
        )
    try:
        return _run(console, batch, done)
    except KeyboardInterrupt:  # the files describe exactly the finished tasks
        ended = sum(finished(read_report(out, t.instance_id)) for t in batch.tasks)
        raise Interrupted(
            f"interrupted: {ended} finished, {len(batch.tasks) - ended} left; rerun the same command to continue"
        ) from None


def _run(console: Console, batch, done: int) -> dict:
    from cli.live import EvalView  # lazy: rich.live (+65 modules), off --help
    from pipeline.eval import run_eval  # lazy: torch, transformers, off --help

    with EvalView(console, len(batch.tasks), done, batch.cfg.workers) as view:
        return run_eval(batch, view.event, view.finished_one, say_to(console))


def _print_summary(console: Console, summary: dict, out: Path, selected: int) -> None:
    from cli.live import plural  # lazy: rich.live (+65 modules), off --help

    t = summary["totals"]
    console.print()
    console.print(
        f"[bold]resolved {summary['resolved']}/{summary['total']}[/bold] (finished {summary['finished']}; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(summary['statuses'].items()))}) | "
        f"{plural(summary['turns'], 'turn')}, "
        f"generated {t['generated_tokens']} tok, prefilled {t['prefill_tokens']} tok, evicted {t['evicted_tokens']} "
        f"tok/layer, peak cache {t['peak_held_tokens']} tok/layer | wall {summary['wall_s_this_session']:.0f} s",
        highlight=False,
    )
    console.print(safe_text(f"predictions: {out}/predictions.jsonl, summary: {out}/summary.json"))
    if summary["total"] > selected:  # an earlier run of this --out on other tasks: its results are kept
        others = summary["total"] - selected
        kept = f"(both also hold {plural(others, 'task')} finished earlier in {out}, not selected now)"
        console.print(safe_text(kept))
    errors = summary["errors"]
    if errors:
        head = f"{plural(len(errors), 'task')} failed to run (not results; the same command runs them again):"
        console.print(safe_text(head))
        for ident, reason in errors.items():
            console.print(safe_text(f"  {ident}: {' '.join(reason.split())[:300]}", "red"))
