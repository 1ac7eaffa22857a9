"""Batch executors for `eval`: a local process pool or Ray tasks. Both run `work` on each job.

`work` runs in the worker (a pool process or a Ray worker): it reports events through `sink.put(dict)` (start,
step) and returns the task's report. A failure inside one task becomes that task's report with status "error",
so one broken instance never stops the batch.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.trajectory import tool_of
from pipeline.backends import run_label
from pipeline.config import RunConfig
from pipeline.executors.progress import PrefillWatch
from pipeline.files import REPORT, atomic_write
from pipeline.run import run_task
from tasks.schema import Task


class Sink(Protocol):
    def put(self, item: Any) -> None: ...


@dataclass(frozen=True)
class Job:
    """One task to solve and grade into its own folder."""

    task: Task
    config: RunConfig
    out_dir: Path


def work(job: Job, sink: Sink | None = None) -> dict[str, Any]:
    """Solve and grade one task (called in the worker); the report (an "error" report when the run failed)."""

    worker = f"{os.uname().nodename}:{os.getpid()}"
    ident = job.task.instance_id

    def emit(kind: str, **data: Any) -> None:
        if sink is not None:
            sink.put({"kind": kind, "worker": worker, "instance_id": ident, **data})

    def on_step(rec: dict[str, Any]) -> None:
        watch.event({"kind": "step"})
        s = rec.get("stats") or {}
        emit("step", step=rec["step"], tool=tool_of(rec), held_tokens=s.get("held_tokens", 0),
             evicted_tokens=s.get("evicted_tokens", 0))  # fmt: skip

    def on_event(ev: dict[str, Any]) -> None:  # what the task does now: the model, a tool (with its call), grading
        watch.event(ev)
        if ev["kind"] == "model":
            emit("phase", step=ev["step"], phase="model")
        elif ev["kind"] == "tool":
            emit("phase", step=ev["step"], phase="tool", tool=ev["tool"], params=ev.get("params") or {})
        elif ev["kind"] in ("sandbox", "loading", "backend", "grading"):  # "backend" holds the backend: not sent
            emit("phase", phase=ev["kind"])

    emit("start")
    try:
        with PrefillWatch(emit) as watch:
            report = run_task(job.task, job.config, job.out_dir, on_step=on_step, on_event=on_event)
    except Exception as exc:  # one task's crash is its report; the batch goes on
        report = error_report(job, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8))
    emit("done", status=report["status"])
    return report


def error_report(job: Job, error: str, trace: str = "") -> dict[str, Any]:
    """Write and return the report of a task whose run failed."""

    report = {
        "instance_id": job.task.instance_id, "model_name_or_path": run_label(job.config), "status": "error",
        "resolved": False, "exit_reason": "error", "error": error, "traceback": trace, "steps": 0, "turns": [],
        "totals": {}, "config": job.config.to_dict(),
    }  # fmt: skip
    atomic_write(job.out_dir / REPORT, json.dumps(report, indent=2) + "\n")
    return report
