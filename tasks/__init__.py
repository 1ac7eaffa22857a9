"""Task sources (built-in demo tasks, SWE-bench / R2E-Gym files and datasets) and their repositories."""

from __future__ import annotations

import difflib

from tasks.schema import Task, TaskError
from tasks.sources import load_tasks

__all__ = ["Task", "TaskError", "get_task", "load_tasks"]


def get_task(instance_id: str, source: str | None = None) -> Task:
    """The task with this instance_id in `source` (see load_tasks); an unknown id suggests close matches."""
    tasks = load_tasks(source)
    for task in tasks:
        if task.instance_id == instance_id:
            return task
    ids = [t.instance_id for t in tasks]
    close = difflib.get_close_matches(instance_id, ids, n=3, cutoff=0.8)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    where = source or "builtin"
    listing = "nexus-agent tasks list" + (f" --dataset {source}" if source else "")
    raise TaskError(f"no task {instance_id!r} in {where} ({len(ids)} tasks){hint} (list them: {listing})")
