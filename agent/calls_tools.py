"""Native tool calls: the tools go to the model as OpenAI function specs built from agent.tool_specs (the one
source), the call comes back as the server's `tool_calls` or, from a model whose text nobody parsed (a local chat
template, a server without a tool parser), as Hermes/Qwen `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
text. A malformed call (bad JSON, unknown tool or parameter, a required one missing) is a FormatError the model
reads; its observation still answers the call's id, as the chat-completions API requires of every tool call.
"""

from __future__ import annotations

import json
from typing import Any

from agent.errors import FormatError
from agent.parsing import bad, check_params, find_tool
from agent.prompts import NO_TOOL_CALL_REMINDER, instance_prompt, tools_system_prompt
from agent.protocols import Message, ModelReply, ToolCall
from agent.tool_specs import TOOLS, Param, ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NOT_RUN = "Not run: make exactly one tool call per reply."


def tool_schemas(tools: dict[str, ToolSpec] = TOOLS) -> list[dict[str, Any]]:
    """The tools as OpenAI `tools` entries (what a server and a chat template's `tools=` take)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": {
                    "type": "object",
                    "properties": {p.name: _schema(p) for p in spec.params},
                    "required": [p.name for p in spec.params if p.required],
                    # the agent refuses a parameter a tool lacks; a server that constrains calls by this schema
                    # (ours with tool_choice) must not let a model add one
                    "additionalProperties": False,
                },
            },
        }
        for spec in tools.values()
    ]


def _schema(param: Param) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": param.json_type, "description": param.description}
    if param.json_type == "array":
        schema["items"] = {"type": "integer"}
    if param.choices:
        schema["enum"] = list(param.choices)
    return schema


class ToolCalls:
    """The CallFormat of native tool calls; observations go back as `role: tool` messages."""

    name = "tools"
    stop: tuple[str, ...] = ()

    def opening(self, issue: str, workdir: str) -> list[Message]:
        system = {"role": "system", "content": tools_system_prompt(), "tools": tool_schemas()}
        return [system, {"role": "user", "content": instance_prompt(issue, workdir)}]

    def parse(self, reply: ModelReply) -> ToolCall:
        if len(reply.tool_calls) > 1:
            raise FormatError(bad("it contains more than one tool call; make exactly one call per reply"))
        if reply.tool_calls:
            native = reply.tool_calls[0]
            return make_call(native.get("name", ""), native.get("arguments", ""), reply.text, native.get("id", ""))
        return parse_text_call(reply.text)

    def observation(self, reply: ModelReply, call: ToolCall | None, text: str) -> list[Message]:
        if reply.tool_calls:  # every native call is answered by its id; only the first one could have run
            ids = [c.get("id", "") for c in reply.tool_calls]
            return [
                {"role": "tool", "tool_call_id": i, "content": text if n == 0 else NOT_RUN} for n, i in enumerate(ids)
            ]
        if call is not None:
            return [{"role": "tool", "content": text}]
        return [{"role": "user", "content": text}]


def parse_text_call(text: str) -> ToolCall:
    """The one `<tool_call>{json}</tool_call>` in `text` (the closing tag may be missing at the very end)."""
    start = text.find(OPEN)
    if start < 0:
        raise FormatError(NO_TOOL_CALL_REMINDER)
    end = text.find(CLOSE, start)
    body = text[start + len(OPEN) : end if end >= 0 else len(text)]
    if end >= 0 and text.find(OPEN, end) >= 0:
        raise FormatError(bad("it contains more than one tool call; make exactly one call per reply"))
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise FormatError(bad('the tool call is not JSON; write {"name": TOOL, "arguments": {...}}')) from None
    if not isinstance(data, dict):
        raise FormatError(bad('the tool call must be a JSON object {"name": TOOL, "arguments": {...}}'))
    return make_call(str(data.get("name") or ""), data.get("arguments", {}), text[:start])


def make_call(name: str, arguments: str | dict[str, Any], thought: str, call_id: str = "") -> ToolCall:
    """A call of tool `name` with `arguments` (a JSON object, or its text), checked against the tool contract."""
    spec = find_tool(name, TOOLS)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise FormatError(bad(f"the arguments of {spec.name} are not valid JSON")) from None
    if not isinstance(arguments, dict):
        raise FormatError(bad(f"the arguments of {spec.name} must be a JSON object"))
    params: dict[str, str] = {}
    for key, value in arguments.items():
        if spec.param(key) is None:
            allowed = ", ".join(p.name for p in spec.params)
            raise FormatError(bad(f"{spec.name} has no parameter '{key}'; its parameters are: {allowed}"))
        if value is not None:
            params[key] = _text(value)
    check_params(params, spec)
    return ToolCall(name=spec.name, params=params, thought=thought.strip(), call_id=call_id)


def _text(value: Any) -> str:
    """A JSON argument as the text the tool programs take: strings as they are, the rest as JSON ([10, 40], true)."""
    return value if isinstance(value, str) else json.dumps(value)
