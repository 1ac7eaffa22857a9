"""The wiring every command shares: config -> task -> sandbox -> agent -> patch -> grade -> files on disk.

`solve` runs one task through `run_task`; `eval` runs many (in worker processes or Ray tasks) and each worker
calls the same function. A task's results are three files in its own folder; report.json is written last and
atomically, so its presence means the task finished.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.calls import call_format
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.trajectory import TrajectoryWriter
from pipeline.config import DEFAULT_MAX_STEPS, RunConfig, run_memory
from pipeline.errors import RunError, RunSettingError
from pipeline.files import PATCH, REPORT, TRAJECTORY, atomic_write
from pipeline.folder_lock import hold_folder
from pipeline.report import build_report
from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.factory import BACKENDS, SandboxConfig, open_sandbox
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


_SERVER_OWNS = ("policy", "budget", "protocol", "protect", "device")  # a --server's settings (--model picks a model)


def preflight(cfg: RunConfig, tasks: list[Task]) -> None:
    """The errors every task would hit, raised once before anything starts (no folder made, no model loaded): an
    unknown sandbox, one this machine lacks, memory settings a --server would ignore, a --device this machine lacks,
    an unknown policy or model, no recordings, a token budget below the protected opening or the
    policy's forced blocks."""

    if cfg.sandbox not in BACKENDS:
        raise RunSettingError("sandbox", f"{cfg.sandbox!r} is unknown: use one of {', '.join(BACKENDS)}")
    _check_sandbox(cfg.sandbox)
    if cfg.replay_dir is not None and not cfg.replay_dir.is_dir():
        raise RunError(f"--replay-dir {cfg.replay_dir} is not a directory")
    if cfg.replay is not None and not cfg.replay.is_file():
        raise RunError(f"--replay {cfg.replay}: no such file")
    if cfg.replaying:
        return
    if cfg.server is not None:
        _check_served(cfg)
        return
    from pipeline.backends import (  # lazy: torch, transformers, off --help
        check_device,
        check_model_available,
        check_policy,
        check_protected_opening,
        check_tools_template,
    )

    check_device(cfg.memory.device)
    check_policy(cfg)
    _check_model_name(cfg.memory.model)
    check_model_available(cfg.memory.model)
    check_tools_template(cfg)
    check_protected_opening(cfg, [t.problem_statement for t in tasks])


def _check_sandbox(backend: str) -> None:

    if backend == "docker":
        from swe_env.dockerd import connect  # lazy: docker, urllib, off --help

        connect(timeout=10).close()
    elif backend == "bwrap" and shutil.which("bwrap") is None:
        from swe_env.sandbox.bwrap import INSTALL_HINT  # lazy: git, urllib, off --help

        raise SandboxError(INSTALL_HINT)


def _check_model_name(name: str) -> None:
    """A --model that is no registered name, no local directory and no hub id (owner/name) is refused here."""
    from kvstore.models.registry import REGISTRY  # lazy: torch, transformers, off --help

    if name in REGISTRY or "/" in name or Path(name).expanduser().exists():
        return
    raise RunError(
        f"--model {name}: not a registered model ({', '.join(sorted(REGISTRY))}), a local model directory or a "
        "hub id (owner/name)"
    )


def _check_served(cfg: RunConfig) -> None:
    """Under --server the model's cache settings are the server's: options that set them are refused (as chat
    refuses them); the server must answer and serve the --model named (or just one model)."""
    from pipeline.backends import served  # lazy: torch, transformers, off --help

    default = run_memory()
    given = [f"--{n.replace('_', '-')}" for n in _SERVER_OWNS if getattr(cfg.memory, n) != getattr(default, n)]
    if given:
        raise RunError(f"with --server the model's cache settings are the server's; drop {', '.join(given)}")
    served(cfg)


def run_task(
    task: Task,
    cfg: RunConfig,
    out_dir: Path,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_token: Callable[[str], None] | None = None,
    on_finish: Callable[[Any], None] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Solve `task` in a sandbox, grade the patch, write trajectory/patch/report into `out_dir`; the report.
    `on_finish(backend)` once the report is written (solve learns a memory profile with the backend's model);
    `on_event(event)`: progress for live views: {"kind": "sandbox"|"env_build"|"env_built"|"loading"|"backend"|"model"|
    "tool"|"grading", ...} ("backend" carries the backend, whose session a view may read prefill progress from;
    "grading" says in "tests" what grades the patch; "env_build"/"env_built": a first use building the task's Python
    env, swe_env.pyenv.build_progress). The run
    holds `out_dir` (pipeline.folder_lock): another process's run there is refused (RunError) before anything
    starts."""

    with hold_folder(out_dir):
        return _run_held(task, cfg, out_dir, on_step, on_token, on_finish, on_event)


def _run_held(task: Task, cfg: RunConfig, out_dir: Path, on_step, on_token, on_finish, on_event) -> dict[str, Any]:
    """run_task's work, in a folder this process holds."""
    from pipeline.backends import call_format_of, make_backend, served  # lazy: torch, transformers, off --help
    from swe_env.pyenv import build_progress  # lazy: urllib, off --help

    start = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT, PATCH, TRAJECTORY):  # a run killed earlier left these behind; they are redone
        (out_dir / stale).unlink(missing_ok=True)
    emit = on_event or (lambda _event: None)
    box = SandboxConfig(repo_cache=cfg.repo_cache)
    emit({"kind": "sandbox", "backend": cfg.sandbox})
    with build_progress(emit):  # a first use builds the task's env (minutes): "env_build", then "env_built"
        sandbox = open_sandbox(task, cfg.sandbox, box)
    with sandbox:  # first: a missing sandbox fails before a model loads
        emit({"kind": "loading"})
        backend, recorded = make_backend(cfg, task.instance_id, on_token)
        emit({"kind": "backend", "backend": backend})
        acfg = agent_config(cfg, recorded)
        writer = TrajectoryWriter(out_dir / TRAJECTORY)
        env = SandboxEnvironment(sandbox)
        calls = call_format(call_format_of(cfg, recorded))
        agent = Agent(backend, env, acfg, writer, task.instance_id, on_step, on_event=on_event, call_format=calls)
        try:
            result = agent.run(calls.opening(task.problem_statement, sandbox.workdir))
        finally:
            writer.close()
    atomic_write(out_dir / PATCH, result.patch)
    emit({"kind": "grading", "tests": grading_words(task)})
    grade_report = _grade(task, result.patch, cfg)
    served_now = served(cfg) if cfg.server is not None else None
    report = build_report(task, cfg, backend.name, result, grade_report, time.monotonic() - start, served_now)
    report["config"]["call_format"] = calls.name  # the format that ran (a replay's: its recording's)
    report["config"]["max_steps"] = acfg.max_steps_absolute  # the limit that applied (a default, a recording's)
    atomic_write(out_dir / REPORT, json.dumps(report, indent=2) + "\n")
    if on_finish is not None:
        on_finish(backend)
    return report


def grading_words(task: Task) -> str:
    """What grades the patch, for people: the task's tests, the user's --test-cmd, or nothing (solve --repo)."""
    from pipeline.own_repo import is_own  # lazy: docker, pyarrow, off --help

    if not is_own(task):
        return "the task's tests"
    return f"--test-cmd: {task.test_cmd}" if task.test_cmd else "not graded: no --test-cmd"


def _grade(task: Task, patch: str, cfg: RunConfig):
    from pipeline.own_repo import grade_own, is_own  # lazy: docker, pyarrow, off --help
    from swe_env.grading import GradeConfig, grade  # lazy: docker, pyarrow, off --help

    if is_own(task):  # solve --repo: the user's --test-cmd decides, by its exit code
        return grade_own(task, patch, cfg.sandbox, cfg.repo_cache, cfg.test_timeout)

    sandbox = SandboxConfig(repo_cache=cfg.repo_cache, install_tools=False)
    return grade(task, patch, config=GradeConfig(backend=cfg.sandbox, sandbox=sandbox, test_timeout=cfg.test_timeout))
