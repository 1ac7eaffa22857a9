"""The loop over the real tools in a real git repo, driven by scripted replies: exit reasons, limits, observations.

Tests that apply to both call formats run with each style of calls (agent_testlib.STYLES): XML text, native
tool_calls, Hermes <tool_call> text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from agent_testlib import DirSandbox, call, format_of, scripted

from agent.backends.replay import ReplayModel
from agent.calls import call_format
from agent.environment import SandboxEnvironment
from agent.errors import AgentError
from agent.loop import Agent, AgentConfig
from agent.prompts import NO_CALL_REMINDER, NO_TOOL_CALL_REMINDER, initial_messages
from agent.protocols import Message, ModelReply, Sampling
from agent.trajectory import TrajectoryWriter, load_trajectory


def gold_replies(repo: str) -> list[str]:
    return [
        call("file_editor", command="view", path=f"{repo}/calc.py"),
        call("execute_bash", cmd="python -m pytest -q test_calc.py"),
        call("file_editor", command="str_replace", path=f"{repo}/calc.py", old_str="a - b", new_str="a + b"),
        call("execute_bash", cmd="python -m pytest -q test_calc.py"),
        call("finish", command="submit", result="add() now adds"),
    ]


def run(sandbox: DirSandbox, replies: list[str], tmp_path: Path, style: str = "xml", **cfg: object):
    calls = call_format(format_of(style))
    agent = Agent(
        scripted(style, replies),
        SandboxEnvironment(sandbox),
        AgentConfig(**cfg),
        TrajectoryWriter(tmp_path / "traj.jsonl"),
        task_id="calc-1",
        call_format=calls,
    )
    return agent, agent.run(calls.opening("add() subtracts", sandbox.workdir))


def steps_left(observation: str) -> int:
    return int(re.search(r"Steps Remaining: (\d+)", observation).group(1))


def test_gold_run_submits_the_fix(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    agent, res = run(sandbox, gold_replies(sandbox.workdir), tmp_path, style, max_steps=10)
    assert (res.exit_reason, res.steps, res.submission) == ("agent", 5, "add() now adds")
    assert "-    return a - b\n+    return a + b" in res.patch
    obs = [r["observation"] for r in res.step_records]
    assert "1\tdef add(a, b):" in obs[0] or "def add(a, b):" in obs[0]
    assert obs[1].startswith("Exit code: 1\nExecution output of [execute_bash]:\n")  # failing tests: an observation
    assert obs[3].startswith("Exit code: 0\n") and "2 passed" in obs[3]
    assert obs[2].startswith("Execution output of [file_editor]:\n")
    assert [steps_left(o) for o in obs[:4]] == [9, 8, 7, 6]
    assert agent.messages[1]["content"].endswith("Steps Remaining: 10")  # the instance prompt counts too
    answer = "user" if style == "xml" else "tool"  # native calls: each observation answers its call
    assert [m["role"] for m in agent.messages] == ["system", "user"] + ["assistant", answer] * 4 + ["assistant"]
    traj = load_trajectory(tmp_path / "traj.jsonl")
    assert traj.header["task_id"] == "calc-1" and traj.header["config"]["max_steps"] == 10
    assert traj.header["meta"]["call_format"] == format_of(style)
    assert traj.exit_reason == "agent" and traj.patch == res.patch
    assert traj.messages() == agent.messages


def test_reply_without_call_gets_reminder_and_loop_goes_on(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = ["I am not sure what to do.", call("finish", command="submit")]
    _, res = run(sandbox, replies, tmp_path, style)
    first = res.step_records[0]
    reminder = NO_CALL_REMINDER if style == "xml" else NO_TOOL_CALL_REMINDER
    assert first["call"] is None and first["observation"].startswith(reminder)
    assert res.exit_reason == "agent" and res.patch == ""


def test_bad_call_is_an_observation(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = [call("execute_bash", command="ls"), call("finish", command="submit")]
    _, res = run(sandbox, replies, tmp_path, style)
    assert "execute_bash has no parameter 'command'" in res.step_records[0]["observation"]


def test_tool_error_is_an_observation(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = [
        call("file_editor", command="str_replace", path=f"{sandbox.workdir}/calc.py", old_str="nope", new_str="x"),
        call("finish", command="submit"),
    ]
    _, res = run(sandbox, replies, tmp_path, style)
    assert "ERROR" in res.step_records[0]["observation"]


def test_long_bash_output_keeps_first_and_last_40_lines(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = [call("execute_bash", cmd="seq 1 200"), call("finish", command="submit")]
    _, res = run(sandbox, replies, tmp_path, style)
    lines = res.step_records[0]["observation"].splitlines()
    assert lines[:2] == ["Exit code: 0", "Execution output of [execute_bash]:"]
    assert len(lines) == 2 + 40 + 3 + 40 + 1 and "lines cut from the middle" in lines[43]
    assert "1" in lines[2:42] and "100" not in lines and "200" in lines[-41:]
    assert lines[-1].startswith("Steps Remaining:")


def test_command_timeout_is_an_observation(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = [call("execute_bash", cmd="echo start; sleep 30"), call("finish", command="submit")]
    _, res = run(sandbox, replies, tmp_path, style, command_timeout=1.0)
    obs = res.step_records[0]["observation"]
    # the tool is told the step's timeout, so its own note (with the real limit) is what the model reads
    assert obs.startswith("Exit code: 124\n") and "timed out after 1 seconds" in obs and "start" in obs


def test_submitting_past_the_soft_limit_is_max_step_limit(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    replies = [call("execute_bash", cmd="true")] * 3 + [call("finish", command="submit")]
    _, res = run(sandbox, replies, tmp_path, style, max_steps=2)
    assert res.exit_reason == "max_step_limit" and res.steps == 4
    assert "You are out of steps" in res.step_records[1]["observation"]
    assert "Steps Remaining: 1" in res.step_records[0]["observation"]


def test_abs_step_limit(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    _, res = run(sandbox, [call("execute_bash", cmd="true")] * 10, tmp_path, style, max_steps=2, max_steps_absolute=3)
    assert (res.exit_reason, res.steps) == ("abs_step_limit", 3)
    assert load_trajectory(tmp_path / "traj.jsonl").exit_reason == "abs_step_limit"


def test_token_limit_from_the_character_estimate(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    # the system prompt alone is well over 200 tokens by the chars/4 estimate
    _, res = run(sandbox, [call("execute_bash", cmd="true")] * 5, tmp_path, style, max_tokens=200)
    assert (res.exit_reason, res.steps) == ("token_limit", 1)


class CountingModel:
    """A scripted backend that reports its context size, as a real model does."""

    name = "counting"

    def __init__(self, replies: list[str], tokens_per_turn: int) -> None:
        self.replies, self.per_turn, self.total = list(replies), tokens_per_turn, 0
        self.received: list[list[Message]] = []

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        self.received.append(new_messages)
        self.total += self.per_turn
        return ModelReply(self.replies.pop(0), stats={"generated_tokens": 1}, context_tokens=self.total)


def test_token_limit_from_the_backend_count(sandbox: DirSandbox, tmp_path: Path) -> None:
    model = CountingModel([call("execute_bash", cmd="true")] * 5, tokens_per_turn=1000)
    res = Agent(model, SandboxEnvironment(sandbox), AgentConfig(max_tokens=2500)).run(initial_messages("x"))
    assert (res.exit_reason, res.steps) == ("token_limit", 3)
    assert [len(m) for m in model.received] == [2, 1, 1]  # system+instance first, then one observation per turn
    assert res.step_records[0]["stats"] == {"generated_tokens": 1}


def test_time_limit(sandbox: DirSandbox, tmp_path: Path, style: str) -> None:
    _, res = run(sandbox, [call("execute_bash", cmd="sleep 0.2")] * 5, tmp_path, style, max_time_s=0.1)
    assert (res.exit_reason, res.steps) == ("traj_time_limit", 1)


def test_crash_is_recorded_then_reraised(sandbox: DirSandbox, tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="replay ran out"):
        run(sandbox, [call("execute_bash", cmd="echo hi")], tmp_path)
    traj = load_trajectory(tmp_path / "traj.jsonl")
    assert len(traj.steps) == 1 and traj.exit_reason == "error" and "replay ran out" in traj.footer["error"]


class InterruptingModel(CountingModel):
    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        if len(self.received) == 2:
            raise KeyboardInterrupt
        return super().reply(new_messages, sampling)


def test_ctrl_c_saves_the_trajectory_and_reraises(sandbox: DirSandbox, tmp_path: Path) -> None:
    model = InterruptingModel([call("execute_bash", cmd="echo hi")] * 5, tokens_per_turn=10)
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    with pytest.raises(KeyboardInterrupt):
        Agent(model, SandboxEnvironment(sandbox), trajectory=writer).run(initial_messages("x"))
    traj = load_trajectory(tmp_path / "t.jsonl")
    assert len(traj.steps) == 2 and traj.exit_reason == "interrupted"


def test_before_execute_can_refuse_a_call(sandbox: DirSandbox, tmp_path: Path) -> None:
    replies = [call("execute_bash", cmd="touch made.txt"), call("finish", command="submit")]
    agent = Agent(
        ReplayModel(replies),
        SandboxEnvironment(sandbox),
        before_execute=lambda c: "The user declined." if c.name == "execute_bash" else None,
    )
    seen: list[int] = []
    agent.on_step = lambda rec: seen.append(rec["step"])
    res = agent.run(initial_messages("x"))
    assert res.step_records[0]["observation"].startswith("The user declined.")
    assert not (Path(sandbox.workdir) / "made.txt").exists() and seen == [1, 2]


def test_second_episode_continues_the_same_messages(sandbox: DirSandbox, tmp_path: Path) -> None:
    model = CountingModel([call("finish", command="submit"), call("finish", command="submit")], 10)
    agent = Agent(model, SandboxEnvironment(sandbox))
    agent.run(initial_messages("x"))
    res = agent.run([{"role": "user", "content": "now do more"}])
    assert res.exit_reason == "agent" and len(agent.messages) == 5
    assert model.received[1] == [{"role": "user", "content": "now do more\nSteps Remaining: 40"}]
