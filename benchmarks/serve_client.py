"""A minimal streaming chat-completions client (stdlib) that times a request: time to first token and total."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
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
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    t0 = time.perf_counter()
    ttft, parts, usage, nexus = None, [], {}, {}
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise ServedError(
            f"the server refused a benchmark request (HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}); "
            "on this machine, try fewer --clients or a shorter --prompt-tokens"
        ) from None
    with resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise ServedError(f"a benchmark stream ended with an error: {event['error']['message']}")
            for choice in event.get("choices", []):
                if piece := choice["delta"].get("content"):
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
                    parts.append(piece)
                    if on_piece is not None:
                        on_piece(piece)
            usage = event.get("usage") or usage
            nexus = event.get("nexus") or nexus
    total = time.perf_counter() - t0
    return Timed("".join(parts), total if ttft is None else ttft, total, usage.get("completion_tokens", 0), nexus)
