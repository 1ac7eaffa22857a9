"""The contracts between the loop, the model backends and the environment, plus the small records they pass.

Implementations never inherit from the Protocols; they only keep to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant" | "tool", "content": "..."}; under native tool
# calls an assistant message may carry "tool_calls", a tool message "tool_call_id", a first message "tools"


XML_STOP = ("</function>",)  # where a reply in DeepSWE's call format ends (agent.calls_xml)


@dataclass(frozen=True)
class Sampling:
    """How one reply is generated."""

    max_new_tokens: int = 2048  # most tokens generated in one reply
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus sampling mass
    stop: tuple[str, ...] = XML_STOP  # generation ends after one of these (kept in the reply); the call format's


@dataclass
class ModelReply:
    """One assistant turn, verbatim, with what the backend knows about its cost."""

    text: str
    stats: dict[str, Any] = field(default_factory=dict)  # per-turn session stats (prefill/evicted/held tokens, times)
    context_tokens: int | None = None  # tokens in the conversation after this reply; None when unknown
    finish_reason: str | None = None  # "stop", "length", ... as the backend reports it
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # native calls ({"id", "name", "arguments": the
    # JSON text as the server sent it}) of a server that parses them; [] for text-only replies


@dataclass(frozen=True)
class ToolCall:
    """One parsed call, from `<function=NAME>` text or a native tool call."""

    name: str
    params: dict[str, str]
    thought: str = ""  # the free text before the call
    call_id: str = ""  # a native tool call's id, which its observation names (tool_call_id); "" for text calls


@dataclass(frozen=True)
class ToolResult:
    """What running a tool call produced; a failed command is a result with its return code."""

    output: str
    returncode: int = 0
    timed_out: bool = False
    submitted: bool = False  # `finish` ran: the episode is over
    timeout_s: float | None = None  # the limit the command ran under (for the timeout note)
    disk_exceeded: str = ""  # why the task went past its disk budget: the episode ends after this call


class ModelBackend(Protocol):
    name: str  # shown in trajectories and reports

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        """Generate the next assistant turn. `new_messages` are the messages added since the previous call
        (first call: system + instance prompt); backends that need the whole history keep it themselves."""
        ...


class Environment(Protocol):
    def execute(self, call: ToolCall, timeout: float) -> ToolResult:
        """Run one tool call; never raises for a failing command."""
        ...

    def get_patch(self) -> str:
        """The diff of the repo against its base commit."""
        ...
