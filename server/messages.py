"""Chat messages as clients send them, reduced to what a session renders, and compared to a session's transcript.

A stateless client (any OpenAI harness) resends the whole conversation each turn, with the assistant replies as the
server returned them. The server returns a reply without its stop string (OpenAI's rule) while the session's cache
holds the reply as generated; some clients (agent/backends/openai_compat.py) put the stop string back. So an
assistant message matches the transcript when it equals the returned text up to whitespace and a trailing stop
string; every other message must match exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.config import ServeError

ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for system instructions
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Said:
    """One message of a session's transcript, as the client saw it."""

    role: str
    content: str
    stops: tuple[str, ...] = ()  # the stop strings of the request that generated it (assistant replies only)

    def matches(self, message: dict[str, str]) -> bool:
        if message["role"] != self.role:
            return False
        if self.role != "assistant" or message["content"] == self.content:
            return message["content"] == self.content
        return _loose(message["content"], self.stops) == _loose(self.content, self.stops)


def _loose(text: str, stops: tuple[str, ...]) -> str:
    squeezed = "".join(text.split())
    for stop in stops:
        s = "".join(stop.split())
        if s and squeezed.endswith(s):
            return squeezed[: -len(s)]
    return squeezed


def normalize(messages: object) -> list[dict[str, str]]:
    """The request's messages as {"role", "content": str}; a clear 400 for what a session cannot render."""
    if not isinstance(messages, list) or not messages:
        raise ServeError("'messages' must be a non-empty list")
    return [_one(m, i) for i, m in enumerate(messages)]


def _one(message: object, index: int) -> dict[str, str]:
    if not isinstance(message, dict):
        raise ServeError(f"messages[{index}] must be an object")
    role = ROLE_ALIASES.get(message.get("role"), message.get("role"))
    if role not in ROLES:
        raise ServeError(f"messages[{index}]: unsupported role {message.get('role')!r}; use one of {', '.join(ROLES)}")
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text parts can be rendered
        if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
            raise ServeError(f"messages[{index}]: only text content parts are supported")
        content = "".join(str(p.get("text", "")) for p in content)
    if content is None and message.get("tool_calls"):
        raise ServeError(f"messages[{index}]: tool_calls are not supported; send the call as text content")
    if not isinstance(content, str):
        raise ServeError(f"messages[{index}]: content must be a string or a list of text parts")
    return {"role": role, "content": content}


def continues(transcript: list[Said], messages: list[dict[str, str]]) -> bool:
    """True when `messages` start with the whole transcript and add at least one message."""
    if len(messages) <= len(transcript):
        return False
    return all(said.matches(m) for said, m in zip(transcript, messages, strict=False))


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """The reply as OpenAI returns it: the text before the first stop string."""
    found = [text.find(s) for s in stops if s and s in text]
    return text[: min(found)] if found else text
