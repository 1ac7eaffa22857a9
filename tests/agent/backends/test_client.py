"""agent.backends.client.ServerClient against real sockets on 127.0.0.1: what is retried (a 5xx, a lost
connection) and what is not (a 4xx, a stream under way), a timeout, a stream's error event, and the key."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from agent.backends.client import ServerClient, ServerError

pytestmark = pytest.mark.usefixtures("waits")  # conftest: no backoff sleeps, no API key

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


class Raw:
    """A server that answers each connection with the next scripted bytes (None: close without answering), then
    sleeps `hold` seconds before closing; it keeps each request's head."""

    def __init__(self, answers: list[bytes | None], hold: float = 0.0) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.answers, self.hold, self.heads = answers, hold, []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self.sock.accept()
            with conn:
                self.heads.append(conn.recv(65536).decode(errors="replace"))
                answer = self.answers.pop(0)
                if answer is not None:
                    conn.sendall(answer)
                time.sleep(self.hold)


def status(code: int, body: dict) -> bytes:
    data = json.dumps(body).encode()
    head = f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + data


def sse(*events: dict, end: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + ("data: [DONE]\n\n" if end else "")
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return (head + body).encode()


def test_a_5xx_and_a_lost_connection_are_retried(waits: list[float]) -> None:
    raw = Raw([status(503, {"error": {"message": "busy"}}), None, OK])
    assert ServerClient(raw.url, retries=2).get("/models") == {}
    assert [w for w in waits if w] == [1.0, 2.0]  # (the patched sleep is time's own: others' sleep(0) too)


def test_a_4xx_is_not_retried_and_names_the_server_message() -> None:
    raw = Raw([status(404, {"error": {"message": "no route /v1/sessions"}}), OK])
    with pytest.raises(ServerError, match=r"/v1/sessions: HTTP 404: no route /v1/sessions") as err:
        ServerClient(raw.url, retries=2).get("/sessions")
    assert err.value.status == 404


def test_no_key_sends_no_authorization_and_a_key_sends_a_bearer() -> None:
    raw = Raw([OK, OK])
    ServerClient(raw.url).get("/models")
    ServerClient(raw.url, api_key="k1").get("/models")
    assert "authorization" not in raw.heads[0].lower()
    assert "Authorization: Bearer k1" in raw.heads[1].replace("authorization", "Authorization")


def test_a_stream_cut_after_it_began_is_not_retried(waits: list[float]) -> None:
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw = Raw([head + f"{len(event):x}\r\n".encode() + event + b"\r\n", OK])  # one chunk, then the connection ends
    pieces: list[str] = []

    def read(events):
        for e in events:
            pieces.append(e["choices"][0]["delta"]["content"])

    with pytest.raises(ServerError, match="broke mid-reply"):
        ServerClient(raw.url, retries=2).call("post", "/chat/completions", {"stream": True}, consume=read)
    assert pieces == ["par"]
    assert [w for w in waits if w] == []


def test_a_stream_error_event_is_one_line() -> None:
    raw = Raw([sse({"error": {"message": "the session was closed"}})])
    with pytest.raises(ServerError, match=r"/chat/completions: the session was closed"):
        ServerClient(raw.url).call("post", "/chat/completions", {"stream": True}, consume=list)


def test_a_timeout_is_one_line() -> None:
    raw = Raw([b"HTTP/1.1 200 OK\r\n"], hold=2.0)  # a head begun, never finished
    with pytest.raises(ServerError, match=r"cannot reach the model server at .*/models: .*") as err:
        ServerClient(raw.url, timeout_s=0.3).get("/models")
    assert err.value.status is None
