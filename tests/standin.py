"""A stand-in server that speaks only the OpenAI API (GET /v1/models, POST /v1/chat/completions; no nexus
endpoints: /v1/sessions and the rest answer 404), as vLLM or SGLang do. Its model is a script of tool calls, one per
assistant turn so far; with `tools` it answers native `tool_calls` (a server with a tool parser), else DeepSWE's
text; a streamed request gets server-sent events. It records every request's path, Authorization header and body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = "sekrit-123"
MODELS = ("vendor/coder-7b", "vendor/coder-32b")
# the scripted model: (tool, arguments) per step
SCRIPT = [("execute_bash", {"cmd": "head -n 3 pagekit/paginator.py"}), ("finish", {"command": "submit"})]


class StandIn(ThreadingHTTPServer):
    """What the test saw: every request's path, Authorization header and body."""

    seen: list[dict]
    script: list[tuple[str, dict]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        self._log(None)
        if self.path != "/v1/models":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})

    def do_DELETE(self) -> None:  # noqa: N802
        self._log(None)
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._log(body)
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._send(401, {"error": {"message": "bad key"}})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        step = sum(m["role"] == "assistant" for m in body["messages"])
        name, args = self.server.script[min(step, len(self.server.script) - 1)]
        if body.get("tools"):  # a server with a tool parser: native tool_calls, no text
            call = {"id": f"call_{step}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:  # DeepSWE's text, the stop string dropped as servers do
            params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
            message, finish = {"role": "assistant", "content": f"<function={name}>\n{params}"}, "stop"
        usage = {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920}
        if body.get("stream"):
            return self._stream(message, finish, usage)
        self._send(200, {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})

    def _stream(self, message: dict, finish: str, usage: dict) -> None:
        """The answer as server-sent events: the text, or each tool call's arguments in two pieces, then usage."""
        deltas = [{"role": "assistant", "content": message["content"] or ""}]
        for i, call in enumerate(message.get("tool_calls") or []):
            args = call["function"]["arguments"]
            first = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
            deltas += [{"tool_calls": [first | {"function": first["function"] | {"arguments": args[:5]}}]}]
            deltas += [{"tool_calls": [{"index": i, "function": {"arguments": args[5:]}}]}]
        events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events[-1]["choices"][0]["finish_reason"] = finish
        events.append({"choices": [], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _log(self, body: dict | None) -> None:
        self.server.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})

    def _send(self, code: int, answer: dict) -> None:
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stand_in_server(script: list[tuple[str, dict]] = SCRIPT) -> Iterator[StandIn]:
    srv = StandIn(("127.0.0.1", 0), Handler)
    srv.seen, srv.script = [], script
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
