"""A model behind an OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, a hosted API).

The server owns its KV cache, so this backend has no control over eviction, budgets or protocols; it sends the whole
history every turn. Against `nexus-agent serve` the server continues the same session (prefilling only the new
messages) and the turn's cache statistics come back in the answer's `nexus` field; they are kept in the reply's stats.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from agent.errors import AgentError
from agent.protocols import Message, ModelReply, Sampling


@dataclass
class OpenAICompatConfig:
    """Where the server is and how to talk to it."""

    model: str  # the model name the server knows (e.g. "agentica-org/DeepSWE-Preview")
    base_url: str = "http://127.0.0.1:8000/v1"  # up to and including /v1
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the key; unset = no Authorization header
    timeout_s: float = 600.0  # seconds one request may take
    retries: int = 2  # extra attempts after a connection error or a 5xx answer
    seed: int | None = None  # sent as "seed" when set (servers that honour it sample reproducibly)


class OpenAICompatModel:
    """Keeps the whole conversation and posts it to /chat/completions each turn."""

    def __init__(self, config: OpenAICompatConfig) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self.history: list[Message] = []

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        self.history.extend(new_messages)
        data = self._post(self._payload(sampling))
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise AgentError(f"{self.config.base_url}: unexpected chat-completions answer: {str(data)[:300]}") from None
        text = _restore_stop(text, finish, sampling.stop)
        self.history.append({"role": "assistant", "content": text})
        usage = data.get("usage") or {}
        stats = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in usage}
        nexus = data.get("nexus") or {}  # nexus-agent serve: the session and the turn's cache statistics
        stats |= dict(nexus.get("turn") or {}) | ({"session_id": nexus["session_id"]} if "session_id" in nexus else {})
        return ModelReply(text=text, stats=stats, context_tokens=usage.get("total_tokens"), finish_reason=finish)

    def _payload(self, sampling: Sampling) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": self.history,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stop": list(sampling.stop),
        }
        if self.config.seed is not None:
            payload["seed"] = self.config.seed
        return payload

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if key := os.environ.get(self.config.api_key_env):
            headers["Authorization"] = f"Bearer {key}"
        body = json.dumps(payload).encode()
        for attempt in range(self.config.retries + 1):
            try:
                req = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.config.timeout_s) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                if exc.code < 500 or attempt == self.config.retries:
                    raise AgentError(f"{url}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.config.retries:
                    reason = getattr(exc, "reason", exc)
                    raise AgentError(f"cannot reach the model server at {url}: {reason}") from None
            except json.JSONDecodeError:
                raise AgentError(f"{url}: the answer is not JSON") from None
            time.sleep(min(2.0**attempt, 10.0))
        raise AssertionError("unreachable")


def _restore_stop(text: str, finish_reason: str | None, stop: tuple[str, ...]) -> str:
    """Servers drop the matched stop string; put "</function>" back so the reply is the call as generated."""
    if finish_reason == "stop" and "<function" in text and not any(text.rstrip().endswith(s) for s in stop):
        return text.rstrip("\n") + "\n" + stop[0] if stop else text
    return text
