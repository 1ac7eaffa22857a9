"""The agent loop: the model replies, its one tool call runs, the observation goes back, until an exit reason.

Exit reasons (R2E-Gym's names): agent (submitted within max_steps), max_step_limit (submitted after the soft
max_steps ran out), abs_step_limit, token_limit, traj_time_limit; disk_limit (the task's files went past the
sandbox's disk budget); plus "error" (a crash, re-raised after the
trajectory is saved) and "interrupted" (Ctrl-C, re-raised likewise).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from agent.calls import CallFormat, assistant_message
from agent.calls_xml import XmlCalls
from agent.errors import FormatError, InterruptAgentFlow, LimitsExceeded, Submitted
from agent.observation import OBSERVATION_CHARS, format_observation, with_steps
from agent.outputs import keep_output
from agent.protocols import Environment, Message, ModelBackend, ModelReply, Sampling, ToolCall
from agent.trajectory import TrajectoryWriter

CHARS_PER_TOKEN = 4  # rough size of a token, for backends that cannot count their context


@dataclass
class AgentConfig:
    """Limits and sampling of one agent run (defaults: DeepSWE's evaluation settings)."""

    max_steps: int = 40  # soft limit: observations count down to it, then ask the model to submit
    max_steps_absolute: int = 100  # hard limit on steps (abs_step_limit)
    max_tokens: int = 65536  # context limit in tokens (token_limit)
    max_time_s: float | None = None  # wall-time limit of an episode in seconds (traj_time_limit); None = none
    command_timeout: float = 120.0  # seconds one tool call may run
    max_new_tokens: int = 2048  # most tokens in one reply
    temperature: float = 1.0  # sampling temperature; 0 = greedy
    top_p: float = 1.0  # nucleus sampling mass
    observation_chars: int = OBSERVATION_CHARS  # output over this keeps head+tail: no backend tokenizes a 32 MiB output

    def sampling(self) -> Sampling:
        return Sampling(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p)


@dataclass
class AgentResult:
    """How an episode ended."""

    exit_reason: str
    patch: str
    steps: int
    elapsed_s: float
    submission: str = ""  # the `result` text the model gave to finish
    step_records: list[dict[str, Any]] = field(default_factory=list)


class Agent:
    """Drives one model over one environment. State: the message list (also what the trajectory records)."""

    def __init__(
        self,
        model: ModelBackend,
        env: Environment,
        config: AgentConfig | None = None,
        trajectory: TrajectoryWriter | None = None,
        task_id: str = "",
        on_step: Callable[[dict[str, Any]], None] | None = None,
        before_execute: Callable[[ToolCall], str | None] | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        call_format: CallFormat | None = None,
    ) -> None:
        self.model, self.env, self.config = model, env, config or AgentConfig()
        self.calls: CallFormat = call_format or XmlCalls()  # how replies call tools (agent.calls); default DeepSWE's
        self.trajectory, self.task_id = trajectory, task_id
        self.on_step = on_step  # called with each step record (live views)
        self.before_execute = before_execute  # returns an observation to use instead of running the call
        self.on_event = on_event  # live views: {"kind": "model", "step"} before a reply, {"kind": "tool", "step",
        # "tool", "params"} before a call runs; on_step's record says both finished
        self.messages: list[Message] = []
        self.n_steps, self._start, self._pending = 0, 0.0, []
        self._disk_exceeded = ""  # the sandbox's reason when the last call went past the task's disk budget
        self._records: list[dict[str, Any]] = []
        self._header_written = False

    def run(self, messages: list[Message]) -> AgentResult:
        """One episode from `messages` (system + instance prompt, or a follow-up user request) to an exit."""
        self.n_steps, self._start, self._records = 0, time.monotonic(), []
        last = messages[-1]
        self._pending = [*messages[:-1], {**last, "content": with_steps(last["content"], self.config.max_steps)}]
        self._write_header()
        try:
            exit_reason, submission = self._loop()
            return self._finish(exit_reason, self.env.get_patch(), submission)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (`Terminated`)
            self._finish("interrupted", "", error=type(exc).__name__)
            raise
        except Exception as exc:
            self._finish("error", "", error=f"{type(exc).__name__}: {exc}")
            raise

    def _loop(self) -> tuple[str, str]:
        while True:
            try:
                self.step()
            except Submitted as done:
                return ("agent" if self.n_steps <= self.config.max_steps else "max_step_limit"), str(done)
            except LimitsExceeded as limit:
                return limit.exit_reason, ""

    def step(self) -> None:
        """One turn: query the model, run its call (or explain the format error), check the limits."""
        t0 = time.monotonic()
        self._emit("model", step=self.n_steps + 1)
        reply = self.model.reply(self._pending, replace(self.config.sampling(), stop=self.calls.stop))
        t1 = time.monotonic()
        sent, self._pending = self._pending, []
        self.messages += [*sent, assistant_message(reply.text, reply.tool_calls)]
        self.n_steps += 1
        call, submitted, observation = self._act(reply)
        if not submitted:
            observation = with_steps(observation, self.config.max_steps - self.n_steps)
            self._pending = self.calls.observation(reply, call, observation)
        self._record(sent, reply, call, observation, submitted, t1 - t0, time.monotonic() - t1)
        if submitted:
            raise Submitted(observation)
        if self._disk_exceeded:
            raise LimitsExceeded("disk_limit", self._disk_exceeded)
        self._check_limits(reply)

    def _act(self, reply: ModelReply) -> tuple[ToolCall | None, bool, str]:
        self._disk_exceeded = ""
        try:
            call = self.calls.parse(reply)
        except FormatError as exc:
            return None, False, str(exc)
        if self.before_execute is not None and (instead := self.before_execute(call)) is not None:
            return call, False, instead
        self._emit("tool", step=self.n_steps, tool=call.name, params=call.params)
        result = self.env.execute(call, timeout=self.config.command_timeout)
        self._disk_exceeded = result.disk_exceeded
        if result.submitted:
            return call, True, result.output
        folder = self.trajectory.path.parent if self.trajectory is not None else None  # the run folder
        keep = partial(keep_output, folder, self.n_steps)
        return call, False, format_observation(call, result, self.config.observation_chars, keep)

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event({"kind": kind, **data})

    def _check_limits(self, reply: ModelReply) -> None:
        cfg = self.config
        if self.context_tokens(reply) >= cfg.max_tokens:
            raise LimitsExceeded("token_limit")
        if self.n_steps >= cfg.max_steps_absolute:
            raise LimitsExceeded("abs_step_limit")
        if cfg.max_time_s is not None and time.monotonic() - self._start >= cfg.max_time_s:
            raise LimitsExceeded("traj_time_limit")

    def context_tokens(self, reply: ModelReply) -> int:
        """Tokens in the conversation: the backend's count, or an estimate from the characters."""
        if reply.context_tokens is not None:
            return reply.context_tokens
        return sum(len(m["content"]) for m in self.messages) // CHARS_PER_TOKEN

    def _record(
        self,
        sent: list[Message],
        reply: ModelReply,
        call: ToolCall | None,
        observation: str,
        submitted: bool,
        model_s: float,
        env_s: float,
    ) -> None:
        rec = {
            "step": self.n_steps,
            "input": sent,
            "reply": reply.text,
            **({"tool_calls": reply.tool_calls} if reply.tool_calls else {}),  # native calls, as the server sent them
            "call": {"name": call.name, "params": call.params} if call else None,
            "observation": observation,
            "submitted": submitted,
            "stats": reply.stats,
            "context_tokens": self.context_tokens(reply),
            "finish_reason": reply.finish_reason,
            "model_s": round(model_s, 4),
            "env_s": round(env_s, 4),
        }
        self._records.append(rec)
        if self.trajectory is not None:
            self.trajectory.write("step", **rec)
        if self.on_step is not None:
            self.on_step(rec)

    def _write_header(self) -> None:
        if self.trajectory is not None and not self._header_written:
            self.trajectory.header(self.task_id, self.model.name, asdict(self.config), call_format=self.calls.name)
            self._header_written = True

    def _finish(self, exit_reason: str, patch: str, submission: str = "", error: str | None = None) -> AgentResult:
        elapsed = time.monotonic() - self._start
        if self.trajectory is not None:
            extra = {"error": error} if error else {}
            self.trajectory.write(
                "footer",
                exit_reason=exit_reason,
                patch=patch,
                steps=self.n_steps,
                elapsed_s=round(elapsed, 3),
                submission=submission,
                **extra,
            )
        return AgentResult(exit_reason, patch, self.n_steps, elapsed, submission, list(self._records))


__all__ = ["Agent", "AgentConfig", "AgentResult", "InterruptAgentFlow"]
