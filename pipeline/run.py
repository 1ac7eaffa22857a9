"""The wiring every command shares: config -> task -> sandbox -> agent -> patch -> grade -> files on disk.

`solve` runs one task through `run_task`; `eval` runs many (in worker processes or Ray tasks) and each worker
calls the same function. A task's results are three files in its own folder; report.json is written last and
atomically, so its presence means the task finished.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.loop import AgentConfig
from pipeline.config import DEFAULT_MAX_STEPS, RunConfig
from pipeline.files import PATCH, REPORT, TRAJECTORY, atomic_write
from pipeline.report import build_report
from tasks.schema import Task


def agent_config(cfg: RunConfig, recorded: dict[str, Any] | None = None) -> AgentConfig:
    """Limits and sampling; a replay keeps the recording's limits (`recorded`) unless --max-steps is given."""
    if cfg.max_steps is None and recorded:
        base = AgentConfig(**{k: v for k, v in recorded.items() if k in AgentConfig.__dataclass_fields__})
        base.command_timeout = cfg.command_timeout
        return base
    steps = cfg.max_steps or DEFAULT_MAX_STEPS
    return AgentConfig(
        max_steps=steps,
        max_steps_absolute=steps,
        command_timeout=cfg.command_timeout,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
    )


def run_task(
    task: Task,
    cfg: RunConfig,
    out_dir: Path,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_token: Callable[[str], None] | None = None,
    on_finish: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Solve `task` in a sandbox, grade the patch, write trajectory/patch/report into `out_dir`; the report.
    `on_finish(backend)` once the report is written (solve learns a memory profile with the backend's model)."""
    from agent.environment import SandboxEnvironment
    from agent.loop import Agent
    from agent.prompts import initial_messages
    from agent.trajectory import TrajectoryWriter
    from pipeline.backends import make_backend, server_settings
    from swe_env.sandbox.factory import SandboxConfig, open_sandbox

    start = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT, PATCH, TRAJECTORY):  # a run killed earlier left these behind; they are redone
        (out_dir / stale).unlink(missing_ok=True)
    box = SandboxConfig(repo_cache=cfg.repo_cache)
    with open_sandbox(task, cfg.sandbox, box) as sandbox:  # first: a missing sandbox fails before a model loads
        backend, recorded = make_backend(cfg, task.instance_id, on_token)
        acfg = agent_config(cfg, recorded)
        writer = TrajectoryWriter(out_dir / TRAJECTORY)
        agent = Agent(backend, SandboxEnvironment(sandbox), acfg, writer, task.instance_id, on_step=on_step)
        try:
            result = agent.run(initial_messages(task.problem_statement, sandbox.workdir))
        finally:
            writer.close()
    atomic_write(out_dir / PATCH, result.patch)
    grade_report = _grade(task, result.patch, cfg)
    served = server_settings(cfg.server) if cfg.server is not None else None
    report = build_report(task, cfg, backend.name, result, grade_report, time.monotonic() - start, served)
    atomic_write(out_dir / REPORT, json.dumps(report, indent=2) + "\n")
    if on_finish is not None:
        on_finish(backend)
    return report


def _grade(task: Task, patch: str, cfg: RunConfig):
    from swe_env.grading import GradeConfig, grade
    from swe_env.sandbox.factory import SandboxConfig

    sandbox = SandboxConfig(repo_cache=cfg.repo_cache, install_tools=False)
    return grade(task, patch, config=GradeConfig(backend=cfg.sandbox, sandbox=sandbox, test_timeout=cfg.test_timeout))
