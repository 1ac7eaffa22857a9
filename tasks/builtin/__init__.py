"""Built-in offline tasks: small Python repositories with a real bug, shipped as package data.

Each task is a folder here holding `task.json` (the SWE-bench record: issue, gold patch, test patch, test lists,
test_cmd, and the base commit that `tasks.repos.prepare_repo` recreates) and `repo/` (the files at that commit).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from tasks.schema import Task, TaskError

BUILTIN_DIR = Path(__file__).resolve().parent
BUILTIN_OWNER = "nexus-demo"
SKIPPED_NAMES = frozenset({"__pycache__", ".pytest_cache", ".git"})


@cache
def _task_dirs() -> dict[str, Path]:
    """instance_id -> the task's folder, for every folder with a task.json."""
    dirs = {}
    for task_json in sorted(BUILTIN_DIR.glob("*/task.json")):
        ident = json.loads(task_json.read_text(encoding="utf-8"))["instance_id"]
        dirs[ident] = task_json.parent
    return dirs


def builtin_tasks() -> list[Task]:
    """Every built-in task, sorted by instance_id."""
    out = []
    for _, folder in sorted(_task_dirs().items()):
        rec = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        out.append(Task.from_record(rec, source="builtin"))
    return out


def is_builtin(task: Task) -> bool:
    """Whether the task's repository is one of the packaged ones."""
    return task.repo.startswith(f"{BUILTIN_OWNER}/") and task.instance_id in _task_dirs()


def builtin_repo_files(instance_id: str) -> dict[str, bytes]:
    """The base-commit files of a built-in task's repository: relative POSIX path -> content."""
    folder = _task_dirs().get(instance_id)
    if folder is None:
        raise TaskError(f"{instance_id} is not a built-in task")
    root = folder / "repo"
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not SKIPPED_NAMES.intersection(rel.parts) and path.suffix != ".pyc":
            files[rel.as_posix()] = path.read_bytes()
    if not files:
        raise TaskError(f"built-in task {instance_id}: its repository files are missing from {root}")
    return files
