"""The OpenAI chat-completions schema: a request's fields checked into a `ChatRequest`, and the answer objects.

Extension (documented in docs/server.md): a request may name its session (body field `session_id` or header
`X-Nexus-Session`); every answer carries `nexus` (the session id, whether it continued, and the turn's cache
statistics) next to `usage`, whose `prompt_tokens_details.cached_tokens` counts the prompt tokens not prefilled.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from server.config import ServeConfig, ServeError
from server.messages import normalize

SESSION_HEADER = "X-Nexus-Session"
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # what a client may name a session


@dataclass
class ChatRequest:
    """What one /v1/chat/completions request asks for."""

    messages: list[dict[str, str]]  # the conversation, normalized to role + text content
    max_new_tokens: int  # max_completion_tokens / max_tokens, else the server's default
    temperature: float  # OpenAI's default is 1.0; 0 = greedy
    top_p: float
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with usage
    session_id: str | None  # explicit session (extension)
    seed: int | None  # seed of a new session's sampling and cache


def parse_request(body: object, header_session: str | None, config: ServeConfig) -> ChatRequest:
    """Check a request body; a ServeError (HTTP 400/404) names the first problem."""
    if not isinstance(body, dict):
        raise ServeError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in (config.model_id, config.memory.model):
        raise ServeError(f"model {model!r} is not served here; this server serves {config.model_id!r}", 404)
    if body.get("n", 1) not in (1, None):
        raise ServeError("only n=1 is supported (one session per conversation)")
    stop = body.get("stop") or []
    stop = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else None
    if stop is None or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise ServeError("'stop' must be a string or a list of at most 4 strings")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ServeError("'stream_options' must be an object")
    max_new = body.get("max_completion_tokens") or body.get("max_tokens") or config.max_new_tokens
    session_id = body.get("session_id") or header_session
    if session_id and not (isinstance(session_id, str) and SESSION_ID.fullmatch(session_id)):
        raise ServeError(
            f"session id {str(session_id)[:40]!r} is not valid: 1-128 letters, digits and . _ : @ -, starting with "
            "a letter or digit"
        )
    return ChatRequest(
        messages=normalize(body.get("messages")),
        max_new_tokens=_number(max_new, "max_tokens", int, 1),
        temperature=_number(body.get("temperature", 1.0), "temperature", float, 0.0),
        top_p=_number(body.get("top_p", 1.0), "top_p", float, 0.0),
        stop=stop,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
        session_id=session_id or None,
        seed=None if body.get("seed") is None else _number(body["seed"], "seed", int, 0),
    )


def _number(value: object, name: str, kind: type, least: float) -> Any:
    if value is None:
        value = least
    if isinstance(value, bool) or not isinstance(value, int | float) or value < least:
        raise ServeError(f"{name} must be a number >= {least}, got {value!r}")
    return kind(value)


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(result: dict[str, Any]) -> dict[str, Any]:
    p, c = result["prompt_tokens"], result["completion_tokens"]
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": result["cached_tokens"]},
    }


def completion(cid: str, model: str, result: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer."""
    message = {"role": "assistant", "content": result["text"]}
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": result["finish_reason"], "logprobs": None}],
        "usage": usage(result),
        "nexus": result["nexus"],
    }


def chunk(cid: str, model: str, delta: dict[str, str], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """One streamed chunk (`extra`: usage and nexus on the last ones)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **extra,
    }


def error_body(exc: ServeError) -> dict[str, Any]:
    return {"error": {"message": str(exc), "type": exc.kind, "code": exc.status}}


def models(config: ServeConfig, started: float) -> dict[str, Any]:
    """/v1/models: the one served model, with the cache settings every session runs with (extension `nexus`)."""
    return {
        "object": "list",
        "data": [
            {"id": config.model_id, "object": "model", "created": int(started), "owned_by": "nexus-agent",
             "nexus": config.cache_settings()}
        ],
    }  # fmt: skip


class StopTrimmer:
    """Streams reply text without the stop string (OpenAI's rule): text that may start one is held back."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = [s for s in stops if s]
        self.text, self.sent, self.cut = "", 0, None

    def feed(self, piece: str) -> str:
        """Add generated text; the part that is now safe to send."""
        if self.cut is not None:
            return ""
        self.text += piece
        found = [self.text.find(s) for s in self.stops if s in self.text]
        if found:
            self.cut = min(found)
            return self._send(self.cut)
        hold = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        return self._send(len(self.text) - hold)

    def rest(self) -> str:
        """What is still held back once the reply is over."""
        return self._send(self.cut if self.cut is not None else len(self.text))

    def _send(self, end: int) -> str:
        out = self.text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out
