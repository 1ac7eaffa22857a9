"""`nexus-agent eval`: solve and grade many tasks (process pool or Ray), resumable, with SWE-bench predictions."""

from __future__ import annotations

import time
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
    run_eval(cfg, out, instances, slice_, cfg.workers, executor, ray_address, retry_errors)


def run_eval(
    cfg: RunConfig,
    out: Path,
    instances: str | None = None,
    slice_: str | None = None,
    workers: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    retry_errors: bool = False,
) -> dict:
    """The batch: pick tasks, skip finished ones, run the rest, keep predictions/summary current; the summary."""
    from cli.live import EvalView
    from pipeline import eval_files as ef
    from pipeline.config import RunError
    from pipeline.executors import Job
    from pipeline.warmup import check, stages
    from swe_env.sandbox.owners import sweep
    from tasks import load_tasks

    if executor not in ("local", "ray"):
        raise RunError(f"unknown --executor {executor!r}; use local or ray")
    tasks = ef.select(load_tasks(cfg.dataset), instances, slice_)
    if not tasks:
        raise RunError("no tasks selected")
    _preflight(cfg, tasks)
    check(cfg, out, tasks)
    sweep()  # what a batch killed earlier left behind (temp folders, containers)
    ef.claim_out_dir(out, cfg, _served(cfg))
    todo = [t for t in tasks if not _finished(ef.read_report(out, t.instance_id), retry_errors)]
    console = Console()
    console.print(
        safe_text(f"eval: {len(tasks)} tasks, {len(tasks) - len(todo)} already finished, {len(todo)} to run -> {out}")
    )
    if cfg.lacks_profile and len(todo) > 2:
        console.print(
            "memory profile: none for this agent and model; --warmup 1 learns one from the first task for the "
            "rest (docs/memory.md)",
            highlight=False,
        )
    start, stopped = time.monotonic(), False
    try:
        with EvalView(console, len(tasks), len(tasks) - len(todo)) as view:
            for stage in stages(cfg, out, tasks, todo, say_to(console)):  # --warmup: calibrating between two stages
                jobs = [Job(t, c, ef.task_dir(out, t.instance_id)) for c, t in stage]
                for _job, report in _execute(jobs, workers, executor, ray_address, view.event):
                    view.finished_one(report)
                    ef.write_outputs(out, tasks, time.monotonic() - start)
    except KeyboardInterrupt:
        stopped = True
        raise
    finally:  # Ctrl-C included: the files describe exactly the finished tasks
        summary = ef.write_outputs(out, tasks, time.monotonic() - start)
        if stopped:
            console.print(
                safe_text(
                    f"stopped: {summary['finished']} of {summary['total']} tasks finished, their files complete in "
                    f"{out}; the same command resumes the rest"
                )
            )
    _print_summary(console, summary, out)
    return summary


def _finished(report: dict | None, retry_errors: bool) -> bool:
    return report is not None and not (retry_errors and report.get("status") == "error")


def _execute(jobs, workers: int, executor: str, ray_address: str | None, on_event):
    if not jobs:
        return iter(())
    if executor == "ray":
        from pipeline.executors.ray_exec import run_ray

        return run_ray(jobs, ray_address, workers, on_event)
    from pipeline.executors.local import run_local

    return run_local(jobs, workers, on_event)


def _preflight(cfg: RunConfig, tasks: list) -> None:
    """The errors every task would hit (no sandbox, no model, no recordings, a budget below the protected opening),
    raised once before any work."""
    import shutil

    from swe_env.sandbox.base import SandboxError

    if cfg.sandbox == "docker":
        from swe_env.dockerd import connect

        connect(timeout=10).close()
    elif cfg.sandbox == "bwrap" and shutil.which("bwrap") is None:
        from swe_env.sandbox.bwrap import INSTALL_HINT

        raise SandboxError(INSTALL_HINT)
    if cfg.replay_dir is not None:
        if not cfg.replay_dir.is_dir():
            raise FileNotFoundError(f"--replay-dir {cfg.replay_dir} is not a directory")
    else:
        from pipeline.backends import check_model_available, check_policy, check_protected_opening, served_model

        if cfg.server:
            served_model(cfg.server)
        else:
            check_policy(cfg)
            check_model_available(cfg.model)
            check_protected_opening(cfg, [t.problem_statement for t in tasks])


def _served(cfg: RunConfig) -> dict | None:
    from pipeline.backends import server_settings

    return server_settings(cfg.server) if cfg.server else None


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
