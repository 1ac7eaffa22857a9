"""End to end: recorded trajectories replayed through the real tools in a real sandbox, then graded for real.

A gold trajectory on each built-in task must give a resolved patch; the trajectory that gives up must not.
(Re-record the data with `python3 tests/agent/data/record_gold.py` when a built-in task changes.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.backends.replay import ReplayModel
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.prompts import initial_messages
from agent.trajectory import TrajectoryWriter, load_trajectory
from swe_env.grading import grade
from swe_env.sandbox.factory import open_sandbox
from tasks import get_task, load_tasks

DATA = Path(__file__).resolve().parent / "data"
GOLD = sorted(DATA.glob("*.gold.jsonl"))


def _docker_ready() -> bool:
    from swe_env import dockerd

    return dockerd.daemon_answers()


BACKENDS = [
    pytest.param("bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")),
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow]),
]


def replay(path: Path, backend: str, out: Path):
    recorded = load_trajectory(path)
    task = get_task(recorded.header["task_id"])
    if backend == "docker" and not _docker_ready():
        pytest.skip("no Docker daemon answers")
    with open_sandbox(task, backend) as sandbox, TrajectoryWriter(out) as writer:
        agent = Agent(ReplayModel.from_file(path), SandboxEnvironment(sandbox), AgentConfig(), writer, task.instance_id)
        result = agent.run(initial_messages(task.problem_statement, sandbox.workdir))
    return task, recorded, result


def test_every_builtin_task_has_a_gold_trajectory() -> None:
    recorded = {load_trajectory(p).header["task_id"] for p in GOLD}
    assert {t.instance_id for t in load_tasks(None)} <= recorded


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", GOLD, ids=[p.name.split(".")[0] for p in GOLD])
def test_gold_trajectory_resolves(path: Path, backend: str, tmp_path: Path) -> None:
    task, recorded, result = replay(path, backend, tmp_path / "t.jsonl")
    assert result.exit_reason == "agent" and result.steps == len(recorded.steps)
    assert result.patch.strip()
    report = grade(task, result.patch, backend=backend)
    assert report.resolved, report.to_json()
    assert all(v == "PASSED" for v in report.fail_to_pass.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_giving_up_is_unresolved(backend: str, tmp_path: Path) -> None:
    task, _, result = replay(DATA / "give_up.jsonl", backend, tmp_path / "t.jsonl")
    assert result.exit_reason == "agent" and result.patch == ""
    report = grade(task, result.patch, backend=backend)
    assert not report.resolved and report.status == "empty_patch"
