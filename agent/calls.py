"""How the model calls a tool: the one small interface of the two call formats, and the registry that picks one.

- "xml" (agent.calls_xml): DeepSWE's `<function=NAME><parameter=KEY>value</parameter></function>` text, described in
  the system prompt; what R2E-Gym trained on and what the call grammar constrains a local model to.
- "tools" (agent.calls_tools): native tool calling: the tools go to the model as OpenAI function specs (a server's
  `tools`, a local chat template's `tools=`), the call comes back as `tool_calls` or Hermes/Qwen `<tool_call>` text,
  and its observation goes back as a `role: tool` message.
The loop asks a format for the opening messages, the stop strings, the call in a reply and the messages that carry
an observation back; everything else (limits, sandbox, trajectory, grading, memory) is the same for both.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from agent.protocols import Message, ModelReply, ToolCall

CALL_FORMATS = {"xml": "agent.calls_xml:XmlCalls", "tools": "agent.calls_tools:ToolCalls"}  # name -> "module:class"
AUTO = "auto"  # --call-format auto: tools with a --server, xml for a model in this process (pipeline.config)


class CallFormat(Protocol):
    name: str  # "xml" or "tools": recorded in the trajectory's header
    stop: tuple[str, ...]  # generation stops after one of these (kept in the reply)

    def opening(self, issue: str, workdir: str) -> list[Message]:
        """System + instance prompt of an episode (tools: the function specs travel on the first message)."""
        ...

    def parse(self, reply: ModelReply) -> ToolCall:
        """The one call in `reply`; a FormatError, whose text the model reads, when there is no valid one."""
        ...

    def observation(self, reply: ModelReply, call: ToolCall | None, text: str) -> list[Message]:
        """The messages that carry `text` (what running `call`, or failing to parse it, produced) to the model."""
        ...


def call_format(name: str) -> CallFormat:
    """The call format registered as `name` (imported on demand)."""
    if name not in CALL_FORMATS:
        raise ValueError(f"unknown call format {name!r}; use one of {', '.join(CALL_FORMATS)}")
    module, cls = CALL_FORMATS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def assistant_message(text: str, tool_calls: list[dict[str, str]]) -> Message:
    """The assistant turn as the conversation keeps it: the reply's text, plus its native calls in OpenAI's shape
    (the history a server is sent back, and what a trajectory's messages rebuild)."""
    if not tool_calls:
        return {"role": "assistant", "content": text}
    calls: list[dict[str, Any]] = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in tool_calls
    ]
    return {"role": "assistant", "content": text, "tool_calls": calls}
