"""A model behind an OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, a hosted API).

The server owns its KV cache, so this backend has no control over eviction, budgets or protocols; it sends the whole
history every turn. Against `nexus-agent serve` the server continues the same session (prefilling only the new
messages) and the turn's cache statistics come back in the answer's `nexus` field; they are kept in the reply's stats.
With `session_id` the requests name that server session (header X-Nexus-Session) instead of leaving the server to
find it by the conversation; with `on_token` the reply is streamed (server-sent events) and each piece handed over.
A conversation's tools (OpenAI function specs on its first message, agent.calls_tools) go out as `tools` with every
request, and the answer's `tool_calls` come back in the reply (streamed ones gathered from their deltas).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agent.backends.client import API_KEY_ENV, SESSION_HEADER, ServerClient, printable
from agent.calls import assistant_message
from agent.errors import AgentError
from agent.protocols import Message, ModelReply, Sampling


@dataclass
class OpenAICompatConfig:
    """Where the server is and how to talk to it."""

    model: str  # the model name the server knows (e.g. "agentica-org/DeepSWE-Preview")
    base_url: str = "http://127.0.0.1:8000/v1"  # up to and including /v1
    api_key_env: str = API_KEY_ENV  # environment variable holding the key; unset = no Authorization header
    api_key: str | None = field(default=None, repr=False)  # the key itself (--api-key); None: from api_key_env
    timeout_s: float = 600.0  # seconds one request may take, all of it (connect, every read, a stream to its end)
    retries: int = 2  # extra attempts after a connection error or a 5xx answer
    seed: int | None = None  # sent as "seed" when set (servers that honour it sample reproducibly)
    session_id: str | None = None  # `nexus-agent serve` session to continue (header X-Nexus-Session); None: none named


class OpenAICompatModel:
    """Keeps the whole conversation and posts it to /chat/completions each turn."""

    def __init__(self, config: OpenAICompatConfig, on_token: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.on_token = on_token  # set: stream the reply and hand each text piece to it (live views)
        self.name = f"openai:{config.model}"
        self.history: list[Message] = []
        self.tools: list[dict[str, Any]] = []  # function specs sent with every request (from the first message)
        self.nexus: dict[str, Any] = {}  # the last answer's `nexus` field (nexus-agent serve), {} from other servers
        self.client = ServerClient(
            config.base_url, config.api_key, config.api_key_env, timeout_s=config.timeout_s, retries=config.retries
        )

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        for m in new_messages:
            if "tools" in m:  # the conversation's tools travel as the request's `tools`, not inside a message
                self.tools, m = m["tools"], {k: v for k, v in m.items() if k != "tools"}
            self.history.append(m)
        data = self._post(self._payload(sampling))
        try:
            choice = data["choices"][0]
            text = _text(choice["message"].get("content"))
            finish = choice.get("finish_reason")
            finish = finish if finish is None else str(finish)
            calls = [_call(c) for c in choice["message"].get("tool_calls") or []]
        except (KeyError, IndexError, TypeError, AttributeError):
            shown = printable(str(data))
            raise AgentError(f"{self.config.base_url}: unexpected chat-completions answer: {shown}") from None
        text = _restore_stop(text, finish, sampling.stop)
        self.history.append(assistant_message(text, calls))
        usage = _dict(data.get("usage"))
        stats = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in usage}
        nexus = self.nexus = _dict(data.get("nexus"))  # nexus-agent serve: the session and the turn's cache stats
        stats |= _dict(nexus.get("turn"))
        stats |= {k: nexus[k] for k in ("session_id", "memory_profile") if k in nexus}
        tokens = usage.get("total_tokens")
        tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None  # else: estimated
        return ModelReply(text=text, stats=stats, context_tokens=tokens, finish_reason=finish, tool_calls=calls)

    def _payload(self, sampling: Sampling) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": self.history,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.stop:
            payload["stop"] = list(sampling.stop)
        if self.tools:  # every reply of the agent's is one call (a reply without one is a format error it reads), so
            # the server is asked for one: a server that constrains forced calls (ours, vLLM, SGLang) always gets one
            payload |= {"tools": self.tools, "tool_choice": "required"}
        if self.config.seed is not None:
            payload["seed"] = self.config.seed
        if self.on_token is not None:
            payload |= {"stream": True, "stream_options": {"include_usage": True}}
        return payload

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The answer as a chat.completion object (a stream is gathered into one); retried on 5xx and connection
        errors, except once a streamed reply has begun (agent.backends.client)."""
        headers = {SESSION_HEADER: self.config.session_id} if self.config.session_id else None
        gather = self._gather if payload.get("stream") else None
        return self.client.call("post", "/chat/completions", payload, headers=headers, consume=gather)

    def _gather(self, events: Iterator[dict[str, Any]]) -> dict[str, Any]:
        """Read a streamed answer's events, handing each text piece to on_token; the equivalent completion."""
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}  # index -> the tool call gathered so far
        finish, extra, event = None, {}, None
        try:
            for event in events:
                for choice in event.get("choices") or []:
                    if (piece := (choice.get("delta") or {}).get("content")) and isinstance(piece, str):
                        text.append(piece)
                        self.on_token(piece)
                    for delta in (choice.get("delta") or {}).get("tool_calls") or []:
                        _add_delta(calls.setdefault(delta.get("index", 0), {}), delta)
                    finish = choice.get("finish_reason") or finish
                extra |= {k: event[k] for k in ("usage", "nexus") if event.get(k)}
            tool_calls = [calls[i] for i in sorted(calls)]
        except (KeyError, TypeError, AttributeError):  # an event of another shape than a chat.completion.chunk
            where = self.client.url("")
            raise AgentError(f"{where}: unexpected chat-completions stream event: {printable(str(event))}") from None
        if finish is None:
            raise AgentError(f"the model server's stream ended before the reply did ({self.client.url('')})")
        message = {"content": "".join(text), "tool_calls": tool_calls}
        return {"choices": [{"message": message, "finish_reason": finish}], **extra}


def _text(content: Any) -> str:
    """A message's content as text: a string, none, or a list of content parts (their text parts joined); a
    TypeError (an unexpected answer) for anything else."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text") or "") for p in content if p.get("type") == "text")
    raise TypeError(f"content is a {type(content).__name__}")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _add_delta(call: dict[str, Any], delta: dict[str, Any]) -> None:
    """Fold one streamed piece of a tool call into it: the id and name come once, the arguments in pieces."""
    call["id"] = delta.get("id") or call.get("id", "")
    function = call.setdefault("function", {"name": "", "arguments": ""})
    piece = delta.get("function") or {}
    function["name"] += piece.get("name") or ""
    function["arguments"] += piece.get("arguments") or ""


def _call(raw: dict[str, Any]) -> dict[str, str]:
    """A tool call of the answer as the reply keeps it; arguments a server sent as an object become their JSON."""
    function = raw["function"]
    arguments = function.get("arguments")
    arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": str(raw.get("id") or ""), "name": str(function.get("name") or ""), "arguments": arguments}


def _restore_stop(text: str, finish_reason: str | None, stop: tuple[str, ...]) -> str:
    """Servers drop the matched stop string; put "</function>" back so the reply is the call as generated."""
    if finish_reason == "stop" and "<function" in text and not any(text.rstrip().endswith(s) for s in stop):
        return text.rstrip("\n") + "\n" + stop[0] if stop else text
    return text
