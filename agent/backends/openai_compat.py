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

import http.client
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.calls import assistant_message
from agent.errors import AgentError
from agent.protocols import Message, ModelReply, Sampling

API_KEY_ENV = "OPENAI_API_KEY"  # where every client of this project finds the server's API key


@dataclass
class OpenAICompatConfig:
    """Where the server is and how to talk to it."""

    model: str  # the model name the server knows (e.g. "agentica-org/DeepSWE-Preview")
    base_url: str = "http://127.0.0.1:8000/v1"  # up to and including /v1
    api_key_env: str = API_KEY_ENV  # environment variable holding the key; unset = no Authorization header
    api_key: str | None = field(default=None, repr=False)  # the key itself (--api-key); None: from api_key_env
    timeout_s: float = 600.0  # seconds one request may take
    retries: int = 2  # extra attempts after a connection error or a 5xx answer
    seed: int | None = None  # sent as "seed" when set (servers that honour it sample reproducibly)
    session_id: str | None = None  # `nexus-agent serve` session to continue (header X-Nexus-Session); None: none named


SESSION_HEADER = "X-Nexus-Session"


class OpenAICompatModel:
    """Keeps the whole conversation and posts it to /chat/completions each turn."""

    def __init__(self, config: OpenAICompatConfig, on_token: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.on_token = on_token  # set: stream the reply and hand each text piece to it (live views)
        self.name = f"openai:{config.model}"
        self.history: list[Message] = []
        self.tools: list[dict[str, Any]] = []  # function specs sent with every request (from the first message)
        self.nexus: dict[str, Any] = {}  # the last answer's `nexus` field (nexus-agent serve), {} from other servers

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        for m in new_messages:
            if "tools" in m:  # the conversation's tools travel as the request's `tools`, not inside a message
                self.tools, m = m["tools"], {k: v for k, v in m.items() if k != "tools"}
            self.history.append(m)
        data = self._post(self._payload(sampling))
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
            calls = [_call(c) for c in choice["message"].get("tool_calls") or []]
        except (KeyError, IndexError, TypeError, AttributeError):
            raise AgentError(f"{self.config.base_url}: unexpected chat-completions answer: {str(data)[:300]}") from None
        text = _restore_stop(text, finish, sampling.stop)
        self.history.append(assistant_message(text, calls))
        usage = data.get("usage") or {}
        stats = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in usage}
        nexus = self.nexus = data.get("nexus") or {}  # nexus-agent serve: the session and the turn's cache stats
        stats |= dict(nexus.get("turn") or {})
        stats |= {k: nexus[k] for k in ("session_id", "memory_profile") if k in nexus}
        tokens = usage.get("total_tokens")
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
        errors, except once a streamed reply has started (its text was already handed on)."""
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"} | auth_headers(self.config.api_key, self.config.api_key_env)
        if self.config.session_id:
            headers[SESSION_HEADER] = self.config.session_id
        body = json.dumps(payload).encode()
        for attempt in range(self.config.retries + 1):
            started = [False]
            try:
                req = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.config.timeout_s) as resp:
                    return self._gather(resp, url, started) if payload.get("stream") else json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = _error_message(exc.read().decode(errors="replace"))
                if exc.code < 500 or attempt == self.config.retries:
                    raise AgentError(f"{url}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", None) or exc or type(exc).__name__
                tls_failed = isinstance(reason, ssl.SSLError)  # no retry mends a TLS setup
                if started[0] or tls_failed or attempt == self.config.retries:
                    if started[0]:
                        raise AgentError(
                            f"the connection to the model server broke mid-reply ({url}: {reason})"
                        ) from None
                    hint = tls_hint(url, exc)
                    raise AgentError(f"cannot reach the model server at {url}: {reason}{hint and '; '}{hint}") from None
            except json.JSONDecodeError:
                raise AgentError(f"{url}: the answer is not JSON") from None
            time.sleep(min(2.0**attempt, 10.0))
        raise AssertionError("unreachable")

    def _gather(self, resp, url: str, started: list[bool]) -> dict[str, Any]:
        """Read a server-sent-events stream, handing each text piece to on_token; the equivalent completion."""
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}  # index -> the tool call gathered so far
        finish, extra = None, {}
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:") or (data := line[5:].strip()) == "[DONE]":
                continue
            event = json.loads(data)
            if "error" in event:
                raise AgentError(f"{url}: {(event['error'] or {}).get('message', event['error'])}")
            for choice in event.get("choices") or []:
                if piece := (choice.get("delta") or {}).get("content"):
                    started[0] = True
                    text.append(piece)
                    self.on_token(piece)
                for delta in (choice.get("delta") or {}).get("tool_calls") or []:
                    _add_delta(calls.setdefault(delta.get("index", 0), {}), delta)
                finish = choice.get("finish_reason") or finish
            extra |= {k: event[k] for k in ("usage", "nexus") if event.get(k)}
        if finish is None:
            raise AgentError(f"the model server's stream ended before the reply did ({url})")
        message = {"content": "".join(text), "tool_calls": [calls[i] for i in sorted(calls)]}
        return {"choices": [{"message": message, "finish_reason": finish}], **extra}


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


def tls_hint(url: str, exc: BaseException) -> str:
    """What to try when a connection to `url` failed over TLS, or perhaps for the lack of it; "" otherwise."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (
            "its TLS certificate is not trusted here: for a self-signed one (nexus-agent serve --tls-cert), set "
            "SSL_CERT_FILE to that certificate"
        )
    if isinstance(reason, ssl.SSLError) and url.startswith("https:"):
        return "it does not speak TLS there: give http://"
    if isinstance(reason, (http.client.RemoteDisconnected, ConnectionResetError)) and url.startswith("http:"):
        return "if the server was started with --tls-cert, give https://"
    return ""


def auth_headers(key: str | None = None, env: str = API_KEY_ENV) -> dict[str, str]:
    """The Authorization header for `key`, else for the key in `env` ({} when neither is set)."""
    key = (key or os.environ.get(env, "")).strip()
    return {"Authorization": f"Bearer {key}"} if key else {}


def _error_message(body: str) -> str:
    """The message of an OpenAI-style error body, else the body's start."""
    try:
        return str(json.loads(body)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return body[:300]


def _restore_stop(text: str, finish_reason: str | None, stop: tuple[str, ...]) -> str:
    """Servers drop the matched stop string; put "</function>" back so the reply is the call as generated."""
    if finish_reason == "stop" and "<function" in text and not any(text.rstrip().endswith(s) for s in stop):
        return text.rstrip("\n") + "\n" + stop[0] if stop else text
    return text
