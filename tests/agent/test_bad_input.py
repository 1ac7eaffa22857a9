"""Inputs that used to end an episode with a traceback: huge tool arguments, NUL bytes, lone surrogates, a replay
file that is not UTF-8. Each must become an observation (or one clear error) and the trajectory must read back."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testlib import call

from agent.backends.replay import ReplayModel
from agent.environment import SandboxEnvironment
from agent.errors import AgentError
from agent.loop import Agent, AgentConfig
from agent.prompts import initial_messages
from agent.trajectory import TrajectoryWriter, load_trajectory
from tasks import get_task

BIG = "x = 1\n" * 40_000  # 240 KB: over Linux's 128 KiB limit on one argument


@pytest.fixture(scope="module")
def sandbox(bwrap_installed):
    from swe_env.sandbox.bwrap import BwrapSandbox

    with BwrapSandbox(get_task("nexus-demo__semver-lite-1")) as sb:
        yield sb


def _run(sandbox, replies: list[str], tmp_path: Path):
    writer = TrajectoryWriter(tmp_path / "traj.jsonl")
    agent = Agent(
        ReplayModel(replies),
        SandboxEnvironment(sandbox),
        AgentConfig(max_steps=10, max_tokens=10**7),
        writer,
        task_id="t",
    )
    try:
        result = agent.run(initial_messages("bad input", sandbox.workdir))
    finally:
        writer.close()
    return result, load_trajectory(tmp_path / "traj.jsonl")


def test_huge_nul_and_surrogate_arguments_are_observations(sandbox, tmp_path):
    replies = [
        call("file_editor", command="create", path="/testbed/big.py", file_text=BIG),
        call("execute_bash", cmd="wc -c /testbed/big.py"),
        call("execute_bash", cmd=f"echo {'y' * 200_000} | wc -c"),
        call("execute_bash", cmd="echo a\0b"),
        call("file_editor", command="create", path="/testbed/nul.txt", file_text="a\0b"),
        call("file_editor", command="create", path="/testbed/sur.txt", file_text="lone \ud800 surrogate"),
        call("execute_bash", cmd="echo \udcff"),
        call("finish", command="submit", result="done \ud800"),
    ]
    result, traj = _run(sandbox, replies, tmp_path)
    assert result.exit_reason == "agent" and len(traj.steps) == len(replies)
    obs = [s["observation"] for s in traj.steps]
    assert "File created at /testbed/big.py" in obs[0] and "/testbed/big.py" in obs[1]
    assert (sandbox.repo / "big.py").read_text().rstrip() == BIG.rstrip()  # all 240 KB arrived
    assert "200001" in obs[2]
    assert "ERROR" in obs[3] and "NUL byte" in obs[3]  # the tool explains; the episode goes on
    assert (sandbox.repo / "sur.txt").read_bytes() == b"lone ? surrogate"
    assert traj.steps[-1]["call"]["params"]["result"] == "done \ud800"  # written and read back unchanged


def test_a_replay_file_that_is_not_utf8_is_one_error(tmp_path):
    path = tmp_path / "replay.jsonl"
    path.write_bytes(b'{"type": "step", "reply": "\xff\xfe"}\n')
    with pytest.raises(AgentError, match="not UTF-8"):
        ReplayModel.from_file(path)
