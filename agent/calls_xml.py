"""DeepSWE's call format: tools described in the system prompt, one `<function=...>` call at the end of a reply."""

from __future__ import annotations

from agent.parsing import parse_call
from agent.prompts import initial_messages
from agent.protocols import XML_STOP, Message, ModelReply, ToolCall


class XmlCalls:
    """The CallFormat of `<function=NAME>` text (agent.parsing); observations go back as user messages."""

    name = "xml"
    stop = XML_STOP

    def opening(self, issue: str, workdir: str) -> list[Message]:
        return initial_messages(issue, workdir)

    def parse(self, reply: ModelReply) -> ToolCall:
        return parse_call(reply.text)

    def observation(self, reply: ModelReply, call: ToolCall | None, text: str) -> list[Message]:
        return [{"role": "user", "content": text}]
