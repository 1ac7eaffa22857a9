"""Chat messages as clients send them, reduced to what a session renders, and compared to a session's transcript.

A stateless client (any OpenAI harness) resends the whole conversation each turn, with the assistant replies as the
server returned them. The server returns a reply without its stop string (OpenAI's rule) while the session's cache
holds the reply as generated; some clients (agent/backends/openai_compat.py) put the stop string back. So an
assistant message matches the transcript when it equals the returned text up to whitespace and a trailing stop
string; every other message must match exactly. An assistant message's tool calls match by name and arguments (as
JSON, whatever the ids and spacing). A conversation's tools travel on its first message (key "tools", which the
session's renderer hands to the chat template: kvstore.session.render), and the transcript keeps their fingerprint,
so that a conversation sent with other tools opens a session of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server import limits
from server.config import ServeError
from server.tools import digest

ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for system instructions
ROLES = ("system", "user", "assistant", "tool")
TOOLS_KEY = "tools"  # the request's tools, on its first message (kvstore.session.render renders them)


@dataclass(frozen=True)
class Said:
    """One message of a session's transcript, as the client saw it."""

    role: str
    content: str
    stops: tuple[str, ...] = ()  # the stop strings of the request that generated it (assistant replies only)
    calls: tuple[tuple[str, str], ...] = ()  # its tool calls: (name, arguments as canonical JSON)
    tools: str = ""  # the fingerprint of the tools the conversation was rendered with (first message only)

    @classmethod
    def of(cls, message: dict[str, Any], stops: tuple[str, ...] = ()) -> Said:
        """A normalized message (or a returned reply, with its request's stop strings) as the transcript keeps it."""
        return cls(message["role"], message["content"], stops, _calls(message), digest(message.get(TOOLS_KEY)))

    def dump(self) -> list:
        """As JSON (a parked session's file): [role, content, stops, calls, tools]."""
        return [self.role, self.content, list(self.stops), [list(c) for c in self.calls], self.tools]

    @classmethod
    def load(cls, row: list) -> Said:
        """From `dump`'s list, or the older [role, content, stops]; ValueError for a row of another shape."""
        if not isinstance(row, list) or not 3 <= len(row) <= 5:
            raise ValueError(f"a transcript row is [role, content, stops, calls, tools], not {str(row)[:40]}")
        role, content, stops, calls, tools = row + [[], ""][len(row) - 3 :]
        pairs = _string_list(calls, list) and all(_string_list(c) and len(c) == 2 for c in calls)
        if role not in ROLES or not _string_list([content, tools]) or not _string_list(stops) or not pairs:
            raise ValueError(f"a transcript row holds a value of the wrong type: {str(row)[:60]}")
        return cls(role, content, tuple(stops), tuple(tuple(c) for c in calls), tools)

    def matches(self, message: dict[str, Any]) -> bool:
        if message["role"] != self.role or _calls(message) != self.calls:
            return False
        if digest(message.get(TOOLS_KEY)) != self.tools:
            return False
        if self.role != "assistant" or message["content"] == self.content:
            return message["content"] == self.content
        return _loose(message["content"], self.stops) == _loose(self.content, self.stops)


def _string_list(values: object, kind: type = str) -> bool:
    """`values` is a list of `kind` (str: strings; list: lists)."""
    return isinstance(values, list) and all(isinstance(v, kind) for v in values)


def _loose(text: str, stops: tuple[str, ...]) -> str:
    squeezed = "".join(text.split())
    for stop in stops:
        s = "".join(stop.split())
        if s and squeezed.endswith(s):
            return squeezed[: -len(s)]
    return squeezed


def _calls(message: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((c["function"]["name"], _canonical(c["function"]["arguments"])) for c in message.get("tool_calls", ()))


def _canonical(arguments: str) -> str:
    """The arguments as sorted, compact JSON (so that spacing and key order do not matter), or as they are when they
    are not JSON, or not JSON this server parses (limits: it runs on the scheduler thread for every turn)."""
    try:
        return json.dumps(limits.loads(arguments, "arguments"), sort_keys=True, ensure_ascii=False)
    except ServeError:
        return arguments


def normalize(messages: object, tools: list[dict] | None = None) -> list[dict[str, Any]]:
    """The request's messages as {"role", "content": str} (assistant messages with their "tool_calls", tool messages
    with their "tool_call_id"); the first carries the request's `tools` (server.tools.check_tools), if any. A clear
    400 for what a session cannot render."""
    if not isinstance(messages, list) or not messages:
        raise ServeError("'messages' must be a non-empty list")
    limits.check_messages(messages)
    out = [_one(m, i) for i, m in enumerate(messages)]
    if tools:
        out[0][TOOLS_KEY] = tools
    return out


def _one(message: object, index: int) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise ServeError(f"messages[{index}] must be an object")
    role = message.get("role")
    role = ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in ROLES:
        raise ServeError(f"messages[{index}]: unsupported role {message.get('role')!r}; use one of {', '.join(ROLES)}")
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text parts can be rendered
        if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
            raise ServeError(f"messages[{index}]: only text content parts are supported")
        if any(not isinstance(p.get("text"), str) for p in content):
            raise ServeError(f"messages[{index}]: a text content part's 'text' must be a string")
        content = "".join(p["text"] for p in content)
    calls = message.get("tool_calls") if role == "assistant" else None
    if calls is not None and not isinstance(calls, list):
        raise ServeError(f"messages[{index}].tool_calls must be a list of tool calls")
    if content is None and calls:
        content = ""
    if not isinstance(content, str):
        raise ServeError(f"messages[{index}]: content must be a string or a list of text parts")
    out: dict[str, Any] = {"role": role, "content": content}
    if calls:
        out["tool_calls"] = [_tool_call(c, f"messages[{index}].tool_calls[{i}]") for i, c in enumerate(calls)]
    if role == "tool" and message.get("tool_call_id") is not None:
        if not isinstance(message["tool_call_id"], str):
            raise ServeError(f"messages[{index}].tool_call_id must be a string")
        out["tool_call_id"] = message["tool_call_id"]
    return out


def _tool_call(call: object, where: str) -> dict[str, Any]:
    """One tool call of an assistant message, as OpenAI sends it ({"id", "type", "function": {"name", "arguments"}})."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ServeError(f"{where} must be {{'type': 'function', 'function': {{'name': ..., 'arguments': ...}}}}")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        raise ServeError(f"{where}.function.arguments must be a JSON string")
    limits.check_json(args, f"{where}.function.arguments")
    return {"id": str(call.get("id") or ""), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def continues(transcript: list[Said], messages: list[dict[str, str]]) -> bool:
    """True when `messages` start with the whole transcript and add at least one message."""
    if len(messages) <= len(transcript):
        return False
    return all(said.matches(m) for said, m in zip(transcript, messages, strict=False))


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """The reply as OpenAI returns it: the text before the first stop string."""
    found = [text.find(s) for s in stops if s and s in text]
    return text[: min(found)] if found else text
