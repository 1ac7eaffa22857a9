"""The agent's error types: one for mistakes a user can make, and the few exceptions that steer the loop."""

from __future__ import annotations


class AgentError(RuntimeError):
    """A user-caused problem (bad trajectory file, replay ran out of replies, unreachable model server)."""


class InterruptAgentFlow(Exception):
    """Raised inside a step to change the loop's course; never escapes `Agent.run`."""


class FormatError(InterruptAgentFlow):
    """The reply holds no valid function call; the message goes back to the model as its observation."""


class Submitted(InterruptAgentFlow):
    """The model called `finish`; the message is the submitted result text."""


class LimitsExceeded(InterruptAgentFlow):
    """A hard limit ended the episode; `exit_reason` names it (abs_step_limit, token_limit, traj_time_limit,
    disk_limit)."""

    def __init__(self, exit_reason: str, message: str = "") -> None:
        super().__init__(message or exit_reason)
        self.exit_reason = exit_reason
