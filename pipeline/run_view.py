"""A finished (or still running) run folder read back as one plain record: the task, model, memory and result
(report.json) and each step (trajectory.jsonl) with its call, observation and cache statistics. `nexus-agent show`
renders it; a script gets it as JSON. Before it, only reading trajectory.jsonl by hand showed a run afterwards.

    view = read_run(Path("runs/nexus-demo__pagekit-1-20261206-031649-a1b2"))   # RunError: not a run folder
    view["result"]["status"], [s["call"] for s in view["steps"]]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.trajectory import load_trajectory
from pipeline.errors import RunError
from pipeline.files import REPORT, TRAJECTORY

_MEMORY = ("policy", "budget", "protocol", "protect", "profile")  # report["config"] fields that say the run's memory
_RESULT = ("status", "resolved", "exit_reason", "steps", "patch_lines", "agent_s", "grade_s", "wall_s", "error")
_CACHE = ("prefill_tokens", "generated_tokens", "evicted_tokens", "held_tokens", "held_bytes", "prefill_s", "decode_s")


def read_run(folder: Path) -> dict[str, Any]:
    """The run in `folder` (a solve folder or one task of an eval); RunError, one line, when it is none."""
    if folder.exists() and not folder.is_dir():
        raise RunError(f"{folder} is a file, not a run folder (give the folder that holds {TRAJECTORY})")
    if not folder.is_dir():
        raise RunError(f"{folder}: no such run folder")
    if not _is_run(folder):
        raise RunError(_not_a_run(folder))

    report = _report(folder)
    # a run that failed before its first step (an eval task's error) has its report and no trajectory
    traj = load_trajectory(folder / TRAJECTORY) if (folder / TRAJECTORY).is_file() else None  # AgentError: corrupt
    header = traj.header if traj else {}
    config = report.get("config") or header.get("config") or {}
    return {
        "folder": str(folder),
        "task": report.get("instance_id") or header.get("task_id"),
        "model": report.get("model") or header.get("model") or report.get("model_name_or_path"),
        "memory": {k: config.get(k) for k in _MEMORY if k in config},
        "result": {k: report.get(k) for k in _RESULT if k in report} if report else None,
        "truncated": traj.truncated if traj else False,
        "steps": [_step(s) for s in traj.steps] if traj else [],
    }


def _is_run(folder: Path) -> bool:
    """A run folder holds its trajectory, or (a run that failed before its first step) only its report."""
    return (folder / TRAJECTORY).is_file() or (folder / REPORT).is_file()


def _report(folder: Path) -> dict[str, Any]:
    """report.json, or {} while the run has not written it (it is written last)."""
    path = folder / REPORT
    if not path.is_file():
        return {}
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise RunError(f"{path} is unreadable or corrupt ({type(exc).__name__})") from None
    if not isinstance(report, dict):
        raise RunError(f"{path} is not a run's report (a JSON object)")
    return report


def _step(rec: dict[str, Any]) -> dict[str, Any]:
    """One step: its call, the tool's output with its exit code, the model's reply, times and cache statistics."""
    stats = rec.get("stats") or {}
    observation = str(rec.get("observation") or "")
    first = observation.splitlines()[0] if observation else ""
    return {
        "step": rec.get("step"),
        "call": rec.get("call"),
        "exit_code": first.removeprefix("Exit code: ") if first.startswith("Exit code: ") else None,
        "observation": observation,
        "reply": rec.get("reply"),
        "model_s": rec.get("model_s"),
        "env_s": rec.get("env_s"),
        "context_tokens": rec.get("context_tokens"),
        "cache": {k: stats[k] for k in _CACHE if k in stats},
    }


def _not_a_run(folder: Path) -> str:
    """Why `folder` is no run folder, and for an eval's folder, which of its folders are."""
    tasks = sorted(p.name for p in folder.iterdir() if p.is_dir() and _is_run(p))
    if tasks:
        listed = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        return f"{folder} is a batch of runs (an eval's --out): show one of its tasks, {folder}/<id> ({listed})"
    return f"{folder} is not a run folder: no {TRAJECTORY} or {REPORT} in it"
