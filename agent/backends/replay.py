"""Replays the assistant messages of a recorded trajectory, in order (regression tests, debugging), with the native
tool calls recorded beside them (a run in the "tools" call format replays as it ran).

Each reply reports the context size recorded with it (when the recording has one), so token limits end a faithful
replay where they ended the original run. No cache statistics: nothing is computed.
"""

from __future__ import annotations

from pathlib import Path

from agent.errors import AgentError
from agent.protocols import Message, ModelReply, Sampling
from agent.trajectory import Trajectory, load_trajectory


class ReplayModel:
    """Answers each turn with the next recorded reply, whatever the observations say."""

    def __init__(
        self,
        replies: list[str],
        name: str = "replay",
        context_tokens: list[int | None] | None = None,
        tool_calls: list[list[dict[str, str]]] | None = None,
    ) -> None:
        self.replies = list(replies)
        self.context_tokens = list(context_tokens) if context_tokens is not None else [None] * len(self.replies)
        self.tool_calls = list(tool_calls) if tool_calls is not None else [[] for _ in self.replies]  # native calls
        self.name = name
        self.source = ""
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayModel:
        traj = load_recording(path)
        counts = [s.get("context_tokens") for s in traj.steps]
        calls = [s.get("tool_calls") or [] for s in traj.steps]
        model = cls(traj.replies(), name=f"replay:{Path(path).name}", context_tokens=counts, tool_calls=calls)
        model.source = str(path)
        return model

    @property
    def remaining(self) -> int:
        return len(self.replies) - self._next

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        if self._next >= len(self.replies):
            where = f" in {self.source}" if self.source else ""
            raise AgentError(
                f"the replay ran out: all {len(self.replies)} recorded replies{where} were used and the agent "
                "asked for another (the run diverged from the recording)"
            )
        n, self._next = self._next, self._next + 1
        return ModelReply(
            text=self.replies[n],
            context_tokens=self.context_tokens[n],
            finish_reason="replay",
            tool_calls=self.tool_calls[n],
        )


def load_recording(path: str | Path) -> Trajectory:
    """The trajectory at `path`, checked to be one a replay can run (AgentError, one line, when it is not): a file
    with a JSON record (a lone bad line, which load_trajectory takes for a cut last line, is none) and a step."""
    traj = load_trajectory(path)
    if not (traj.header or traj.steps or traj.footers):
        why = "its only line is not a JSON record" if traj.truncated else "it holds no record"
        raise AgentError(f"{path} is not a trajectory: {why} (a run's trajectory.jsonl is JSON lines)")
    if not traj.steps:
        raise AgentError(f"trajectory {path} has no assistant messages to replay")
    return traj
