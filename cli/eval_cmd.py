"""`nexus-agent eval`: solve and grade many tasks (process pool or Ray), resumable, with SWE-bench predictions; the
batch itself is pipeline.eval, this module its options and display."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from cli.options import run_options
from cli.safe_text import safe_text, say_to
from pipeline.config import RunConfig


@run_options(
    "dataset", "workers", "model", "policy", "budget", "protocol", "protect", "profile", "sandbox", "max_steps", "seed",
    "temperature", "threads", "max_new_tokens", "replay_dir", "command_timeout", "test_timeout", "repo_cache", "server",
    "warmup",
)  # fmt: skip
def eval_cmd(
    cfg: RunConfig,
    out: Path = typer.Option(..., "--out", "-o", help="Run folder (resumed when it exists)."),
    instances: str = typer.Option(None, "--instances", help="Comma-separated instance ids."),
    slice_: str = typer.Option(None, "--slice", help="start:stop over the source's order."),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster address (default: a local Ray)."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="Rerun finished tasks whose status is error."),
) -> None:
    """Solve and grade each task into --out/<id>/; finished tasks (report.json present) are skipped on rerun."""
    from cli.live import EvalView
    from pipeline.eval import plan_eval, run_eval

    batch = plan_eval(cfg, out, instances, slice_, executor, ray_address, retry_errors)
    done, console = len(batch.tasks) - len(batch.todo), Console()
    console.print(
        safe_text(f"eval: {len(batch.tasks)} tasks, {done} already finished, {len(batch.todo)} to run -> {out}")
    )
    if cfg.lacks_profile and len(batch.todo) > 2:
        console.print(
            "memory profile: none for this agent and model; --warmup 1 learns one from the first task for the "
            "rest (docs/memory.md)",
            highlight=False,
        )
    try:
        with EvalView(console, len(batch.tasks), done) as view:
            summary = run_eval(batch, view.event, view.finished_one, say_to(console))
    except KeyboardInterrupt:  # the files describe exactly the finished tasks
        finished = (batch.summary or {}).get("finished", done)
        console.print(
            safe_text(
                f"stopped: {finished} of {len(batch.tasks)} tasks finished, their files complete in {out}; the same "
                "command resumes the rest"
            )
        )
        raise
    _print_summary(console, summary, out)


def _print_summary(console: Console, summary: dict, out: Path) -> None:
    t = summary["totals"]
    console.print()
    console.print(
        f"[bold]resolved {summary['resolved']}/{summary['total']}[/bold] (finished {summary['finished']}; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(summary['statuses'].items()))}) | {summary['turns']} turns, "
        f"generated {t['generated_tokens']} tok, prefilled {t['prefill_tokens']} tok, evicted {t['evicted_tokens']} "
        f"tok/layer, peak cache {t['peak_held_tokens']} tok/layer | wall {summary['wall_s_this_session']:.0f} s",
        highlight=False,
    )
    console.print(safe_text(f"predictions: {out}/predictions.jsonl, summary: {out}/summary.json"))
