"""A streaming chat-completions request timed: time to first token and total (through agent.backends.client, the
project's one client of OpenAI-compatible servers)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kvstore.errors import KVStoreError


class ServedError(KVStoreError):
    """The server under benchmark refused a request or cut its stream (printed as one line)."""


@dataclass
class Timed:
    """One streamed answer with its timings."""

    text: str
    ttft_s: float  # request sent -> first content token received
    total_s: float  # request sent -> answer complete
    completion_tokens: int
    nexus: dict[str, Any]  # the server's session and turn statistics


def stream_chat(
    base_url: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeout: float = 600.0,
    on_piece: Callable[[str], None] | None = None,
) -> Timed:
    """POST a streaming greedy request and read its server-sent events to the end (`on_piece`: each text piece)."""
    from agent.backends.client import ServerClient, ServerError  # lazy: openai, urllib, off --help

    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    got: dict[str, Any] = {"ttft": None, "usage": {}, "nexus": {}}
    parts: list[str] = []

    def read(events: Iterator[dict[str, Any]]) -> None:
        for event in events:
            for choice in event.get("choices", []):
                if piece := choice["delta"].get("content"):
                    got["ttft"] = got["ttft"] if got["ttft"] is not None else time.perf_counter() - t0
                    parts.append(piece)
                    if on_piece is not None:
                        on_piece(piece)
            got["usage"] = event.get("usage") or got["usage"]
            got["nexus"] = event.get("nexus") or got["nexus"]

    try:
        ServerClient(base_url, timeout_s=timeout).call("post", "/chat/completions", body, consume=read)
    except ServerError as exc:
        if exc.status is not None:
            raise ServedError(
                f"the server refused a benchmark request (HTTP {exc.status}: {exc.detail}); on this machine, try "
                "fewer --clients or a shorter --prompt-tokens"
            ) from None
        raise ServedError(f"a benchmark stream ended with an error: {exc}") from None
    total = time.perf_counter() - t0
    ttft = total if got["ttft"] is None else got["ttft"]
    return Timed("".join(parts), ttft, total, got["usage"].get("completion_tokens", 0), got["nexus"])
