"""The wiring every command shares: config -> task -> sandbox -> agent -> patch -> grade -> files on disk.

`solve` runs one task through `run_task`; `eval` runs many (in worker processes or Ray tasks) and each worker
calls the same function. A task's results are three files in its own folder; report.json is written last and
atomically, so its presence means the task finished.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from agent.loop import AgentConfig, AgentResult
from tasks.schema import Task

DEFAULT_TASK = "nexus-demo__pagekit-1"  # the built-in task `nexus-agent solve` runs with no argument
DEFAULT_MAX_STEPS = 5  # the default run of the small CPU model finishes in minutes (it will not solve the task)
REPORT, PATCH, TRAJECTORY = "report.json", "patch.diff", "trajectory.jsonl"


class RunError(AgentError):
    """A run cannot start as asked (bad flag combination, missing replay file, out dir of another run)."""


@dataclass
class RunConfig:
    """What one agent run uses; `solve`, `eval` and `chat` flags map onto these fields one to one."""

    dataset: str | None = None  # task source (None: the built-in tasks)
    model: str = "smollm2-135m"  # registry name, local model directory or hub id
    policy: str = "nexus"  # KV eviction policy (kvstore.POLICIES)
    budget: int | float | None = 2048  # cache budget: tokens per layer, or a density in (0, 1]; None = never evict
    protocol: str = "true-eviction"  # "true-eviction" (one persistent cache) or "re-prefill" (new cache each turn)
    sandbox: str = "auto"  # sandbox backend: auto, docker, bwrap, local
    max_steps: int | None = None  # step limit (soft and hard); None: 5 for a local model, the recording's for replay
    seed: int = 0  # seed of sampling and of the cache's randomness
    temperature: float = 1.0  # sampling temperature (DeepSWE evaluates at 1.0); 0 = greedy
    max_new_tokens: int = 256  # most tokens in one reply
    replay: Path | None = None  # replay this recorded trajectory instead of running a model
    replay_dir: Path | None = None  # replay <dir>/<instance_id>*.jsonl (one recording per instance)
    command_timeout: float = 120.0  # seconds one tool call may run
    test_timeout: float = 1800.0  # seconds grading's test command may run
    device: str | None = None  # torch device for the model (None: CUDA when present, else CPU)
    threads: int | None = None  # torch CPU threads (None: cores / workers, 1 when the machine is already busy)
    workers: int = 1  # processes sharing this machine's cores (eval --workers)

    def to_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @property
    def replaying(self) -> bool:
        return self.replay is not None or self.replay_dir is not None

    def model_label(self) -> str:
        """The `model_name_or_path` of SWE-bench predictions: model and cache settings, filesystem-safe."""
        if self.replaying:
            return "nexus-agent__replay"
        name = Path(self.model).name if os.sep in self.model else self.model
        return f"nexus-agent__{name}__{self.policy}-{self.budget}-{self.protocol}"


def parse_budget(text: str | None) -> int | float | None:
    """A --budget value: "none"/"full" (never evict), an int (tokens per layer) or a float density."""
    if text is None or text.lower() in ("none", "full", ""):
        return None
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        hint = "give tokens per layer (e.g. 2048), a density (e.g. 0.25) or 'none'"
        raise RunError(f"--budget {text!r}: {hint}") from None


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


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder and os.replace (never a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def run_task(
    task: Task,
    cfg: RunConfig,
    out_dir: Path,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_token: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Solve `task` in a sandbox, grade the patch, write trajectory/patch/report into `out_dir`; the report."""
    from agent.environment import SandboxEnvironment
    from agent.loop import Agent
    from agent.prompts import initial_messages
    from agent.trajectory import TrajectoryWriter
    from cli.backends import make_backend
    from swe_env.sandbox.factory import open_sandbox

    start = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT, PATCH, TRAJECTORY):  # a run killed earlier left these behind; they are redone
        (out_dir / stale).unlink(missing_ok=True)
    with open_sandbox(task, cfg.sandbox) as sandbox:  # first: a missing sandbox fails before a model loads
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
    report = build_report(task, cfg, backend.name, result, grade_report, time.monotonic() - start)
    atomic_write(out_dir / REPORT, json.dumps(report, indent=2) + "\n")
    return report


def _grade(task: Task, patch: str, cfg: RunConfig):
    from swe_env.grading import GradeConfig, grade

    return grade(task, patch, config=GradeConfig(backend=cfg.sandbox, test_timeout=cfg.test_timeout))


def build_report(task: Task, cfg: RunConfig, model_name: str, result: AgentResult, graded, wall_s: float) -> dict:
    """report.json: the verdict, the episode, per-turn cache stats and their totals, the config."""
    turns = [r["stats"] | {"step": r["step"], "tool": (r["call"] or {}).get("name")} for r in result.step_records]
    return {
        "instance_id": task.instance_id,
        "model_name_or_path": cfg.model_label(),
        "model": model_name,
        "status": graded.status,
        "resolved": graded.resolved,
        "exit_reason": result.exit_reason,
        "steps": result.steps,
        "agent_s": round(result.elapsed_s, 2),
        "grade_s": graded.duration_s,
        "wall_s": round(wall_s, 2),
        "patch_lines": len(result.patch.splitlines()),
        "totals": turn_totals(turns),
        "turns": turns,
        "grade": graded.to_dict(),
        "config": cfg.to_dict(),
    }


def turn_totals(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over the turns (peaks for what the cache held); zeros for backends without cache statistics."""

    def total(key: str) -> float:
        return sum(t.get(key) or 0 for t in turns)

    return {
        "prefill_tokens": int(total("prefill_tokens")),
        "generated_tokens": int(total("generated_tokens")),
        "evicted_tokens": int(total("evicted_tokens")),
        "peak_held_tokens": max((t.get("held_tokens") or 0 for t in turns), default=0),
        "peak_held_bytes": max((t.get("held_bytes") or 0 for t in turns), default=0),
        "prefill_s": round(total("prefill_s"), 3),
        "decode_s": round(total("decode_s"), 3),
        "evict_s": round(total("evict_s"), 3),
    }
