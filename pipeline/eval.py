"""An eval batch below the command line: pick the tasks, check once what every task needs, claim the --out folder,
skip the finished tasks, run the rest (process pool or Ray; with --warmup in two stages) and keep predictions.jsonl
and summary.json current after every task. `nexus-agent eval` (cli/eval_cmd.py) only shows it.

batch = plan_eval(cfg, Path("runs/batch"))   # RunError before any work when it cannot run
summary = run_eval(batch)                    # summary.json's content
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import eval_files as ef
from pipeline.backends import served
from pipeline.config import RunConfig
from pipeline.errors import RunError
from pipeline.executors import Job
from pipeline.executors.local import run_local
from pipeline.executors.ray_exec import run_ray
from pipeline.folder_lock import hold_folder
from pipeline.profiles.warmup import check, stages
from pipeline.run import preflight
from swe_env.sandbox.owners import sweep
from tasks import load_tasks
from tasks.schema import Task

EXECUTORS = ("local", "ray")


@dataclass
class EvalBatch:
    """The tasks of one eval run and where it runs them."""

    cfg: RunConfig  # the settings of every task
    out: Path  # the run folder (eval_files: one folder per task, predictions, summary)
    tasks: list[Task]  # every selected task, in order
    todo: list[Task]  # those not finished yet
    executor: str = "local"  # "local" (process pool) or "ray"
    ray_address: str | None = None  # Ray cluster address (None: a local Ray)
    summary: dict[str, Any] | None = None  # summary.json as last written (also when the run was interrupted)
    held: ExitStack = field(default_factory=ExitStack)  # the lock on `out` (pipeline.folder_lock) until close()

    def close(self) -> None:
        """Let another run use `out` (the lock also ends with this process)."""
        self.held.close()

    def __enter__(self) -> EvalBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plan_eval(
    cfg: RunConfig, out: Path, instances: str | None = None, slice_: str | None = None, executor: str = "local",
    ray_address: str | None = None,
) -> EvalBatch:  # fmt: skip
    """The batch of `--instances a,b` or `--slice a:b` of the source (default: all), its unfinished tasks (those
    without a report, and those whose run ended in an error: errors are not results); raises what every task would
    hit (no sandbox, no model, no recordings, a budget below the protected opening, --out holding another run or in
    use by one) before any work. The batch holds --out (pipeline.folder_lock) until it is closed: `with plan_eval(...)
    as batch:`."""

    if executor not in EXECUTORS:
        raise RunError(f"unknown --executor {executor!r}; use local or ray")
    tasks = ef.select(load_tasks(cfg.dataset), instances, slice_)
    if not tasks:
        raise RunError("no tasks selected")
    preflight(cfg, tasks)
    check(cfg, out, tasks)
    ef.claim_out_dir(out, cfg, _served(cfg))
    batch = EvalBatch(cfg, out, tasks, [], executor, ray_address)
    batch.held.enter_context(hold_folder(out))  # a second batch on `out` is refused here, before any work
    try:
        sweep()  # what a batch killed earlier left behind (temp folders, containers)
        batch.todo = [t for t in tasks if not ef.finished(ef.read_report(out, t.instance_id))]
    except BaseException:
        batch.close()
        raise
    return batch


def run_eval(
    batch: EvalBatch,
    on_event: Callable[[dict[str, Any]], None] = lambda _event: None,
    on_report: Callable[[dict[str, Any]], None] = lambda _report: None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the batch's unfinished tasks; the summary. `on_event`: the workers' progress events; `on_report`: each
    finished task's report; `say`: lines for people (the warm-up's calibration). Interrupted (Ctrl-C), the files
    still describe exactly the finished tasks (`batch.summary`), and the same batch resumes the rest."""

    cfg, out, start = batch.cfg, batch.out, time.monotonic()
    try:
        for stage in stages(cfg, out, batch.tasks, batch.todo, say):  # --warmup: calibrating between two stages
            jobs = [Job(t, c, ef.task_dir(out, t.instance_id)) for c, t in stage]
            for _job, report in _execute(jobs, cfg.workers, batch.executor, batch.ray_address, on_event):
                on_report(report)
                ef.write_outputs(out, batch.tasks, time.monotonic() - start)
    finally:  # Ctrl-C included: the files describe exactly the finished tasks
        batch.summary = ef.write_outputs(out, batch.tasks, time.monotonic() - start)
    return batch.summary


def _execute(jobs, workers: int, executor: str, ray_address: str | None, on_event) -> Iterator:
    if not jobs:
        return iter(())
    if executor == "ray":
        return run_ray(jobs, ray_address, workers, on_event)

    return run_local(jobs, workers, on_event)


def _served(cfg: RunConfig) -> dict | None:

    return served(cfg) if cfg.server else None  # the --model it names, with its --api-key
