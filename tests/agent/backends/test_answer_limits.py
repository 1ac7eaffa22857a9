"""What a server can cost agent.backends.client, bounded (agent.backends.limits), against real sockets on 127.0.0.1:
a server that trickles its answer a byte at a time or never answers fails the request at its `timeout_s`, all of it;
an answer larger than `max_answer_bytes` (a JSON body, a stream's events) is cut off and not asked for again; a
compressed one is refused; answers within both, over a kept connection too, read as before."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from agent.backends.client import ServerClient, ServerError
from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.protocols import Sampling

pytestmark = pytest.mark.usefixtures("waits")  # conftest: no backoff sleeps, no API key

MiB = 2**20
JSON_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n"
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
DONE = b"data: [DONE]\n\n"


class Server:
    """A server that reads each request (several per connection) and answers it with `answer(conn, server)`.
    It counts connections and requests, keeps the requests' heads, and notes when the client cut an answer off."""

    def __init__(self, answer: Callable[[socket.socket, Server], None]) -> None:
        self.answer, self.sock = answer, socket.create_server(("127.0.0.1", 0))
        self.connections, self.heads, self.stop, self.cut = 0, [], threading.Event(), threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        with conn, contextlib.suppress(OSError):  # (the client closed the connection)
            while not self.stop.is_set():
                while b"\r\n\r\n" not in data:
                    if not (more := conn.recv(65536)):
                        return
                    data += more
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                               if k.strip().lower() == b"content-length"), 0)  # fmt: skip
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.heads.append(head.decode().lower())
                try:
                    self.answer(conn, self)
                except OSError:  # the client closed the connection mid-answer
                    self.cut.set()
                    return

    def trickle(self, conn: socket.socket, data: bytes, every: float = 0.2) -> None:
        """Send `data` one byte every `every` seconds (until the test ends)."""
        for i in range(len(data)):
            if self.stop.wait(every):
                return
            conn.sendall(data[i : i + 1])

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(answer: Callable[[socket.socket, Server], None]) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def event(piece: str) -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': piece}}]})}\n\n".encode()


def json_answer(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return JSON_HEAD.format(len(data)).encode() + data


def timed(call: Callable[[], object]) -> tuple[ServerError, float]:
    start = time.monotonic()
    with pytest.raises(ServerError) as caught:
        call()
    return caught.value, time.monotonic() - start


def stream(pieces: list[str]) -> Callable[[Iterator[dict]], None]:
    return lambda events: pieces.extend(e["choices"][0]["delta"]["content"] for e in events)


# what a server sends a byte every 0.2 s: 10 bytes in 2 s; the whole answer in 8 s or more
def trickled_body(conn: socket.socket, server: Server) -> None:
    conn.sendall(JSON_HEAD.format(40).encode())
    server.trickle(conn, b"[0]" + b" " * 37)


def trickled_head(conn: socket.socket, server: Server) -> None:
    server.trickle(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n[0]")


def trickled_stream(conn: socket.socket, server: Server) -> None:
    conn.sendall(SSE_HEAD)
    server.trickle(conn, event("a") + DONE)


@pytest.mark.parametrize("answer", [trickled_body, trickled_head, trickled_stream])
def test_a_trickled_answer_fails_at_the_deadline(serve, answer) -> None:
    server = serve(answer)
    client = ServerClient(server.url, timeout_s=2)
    consume = stream([]) if answer is trickled_stream else None
    error, took = timed(lambda: client.call("post", "/chat/completions", {}, consume=consume))
    assert str(error) == f"{server.url}/chat/completions: no complete answer within 2 s"
    assert error.status is None
    assert 1.9 < took < 3.0


@pytest.mark.parametrize("streamed", [False, True])
def test_a_server_that_never_answers_costs_the_timeout_per_attempt(serve, waits: list[float], streamed: bool) -> None:
    server = serve(lambda conn, s: s.stop.wait(30))
    client = ServerClient(server.url, timeout_s=1, retries=1)
    consume = stream([]) if streamed else None
    error, took = timed(lambda: client.call("post", "/chat/completions", {}, consume=consume))
    assert str(error).endswith("/chat/completions: no complete answer within 1 s")
    assert server.connections == 2 and waits == [1.0]  # one retry, after its backoff
    assert 1.9 < took < 3.0


def test_a_stream_that_stalls_after_a_piece_fails_at_the_deadline_unretried(serve) -> None:
    server = serve(lambda conn, s: (conn.sendall(SSE_HEAD + event("par")), s.stop.wait(30)))
    pieces: list[str] = []
    client = ServerClient(server.url, timeout_s=1.5, retries=2)
    error, took = timed(lambda: client.call("post", "/chat/completions", {}, consume=stream(pieces)))
    assert str(error).endswith("/chat/completions: no complete answer within 1.5 s")
    assert pieces == ["par"] and server.connections == 1
    assert 1.4 < took < 2.5


def test_the_agents_backend_keeps_its_configured_timeout(serve) -> None:
    server = serve(trickled_body)
    backend = OpenAICompatModel(OpenAICompatConfig("m", server.url, timeout_s=1, retries=0))
    error, took = timed(lambda: backend.reply([{"role": "user", "content": "hi"}], Sampling(max_new_tokens=8)))
    assert str(error).endswith("no complete answer within 1 s") and 0.9 < took < 2.0


def big_json(conn: socket.socket, server: Server) -> None:
    body = b'{"x": "' + b"y" * (32 * MiB) + b'"}'
    conn.sendall(JSON_HEAD.format(len(body)).encode() + body)


def big_stream(conn: socket.socket, server: Server) -> None:
    conn.sendall(SSE_HEAD)
    for _ in range(32 * MiB // 100):
        conn.sendall(event("y" * 50))


@pytest.mark.parametrize("answer", [big_json, big_stream])
def test_an_answer_past_the_cap_is_cut_off_and_not_retried(serve, answer) -> None:
    server = serve(answer)
    pieces: list[str] = []
    client = ServerClient(server.url, retries=2, max_answer_bytes=MiB)
    consume = stream(pieces) if answer is big_stream else None
    error, took = timed(lambda: client.call("post", "/chat/completions", {}, consume=consume))
    assert str(error) == f"{server.url}/chat/completions: the answer exceeded 1 MiB"
    assert error.detail == "the answer exceeded 1 MiB" and server.connections == 1
    assert server.cut.wait(10)  # the connection was closed under the server's writes
    assert len("".join(pieces)) < MiB


def test_a_compressed_answer_is_refused(serve) -> None:
    body = gzip.compress(b'{"x": "' + b"y" * (64 * MiB) + b'"}')  # 64 MiB inflated, 64 KiB sent
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n"
    server = serve(lambda conn, s: conn.sendall(head.format(len(body)).encode() + body))
    error, _ = timed(lambda: ServerClient(server.url, retries=2).post("/chat/completions", {}))
    assert str(error).endswith("/chat/completions: the answer came gzip-encoded though asked for none")
    assert "accept-encoding: identity" in server.heads[0] and server.connections == 1


def test_answers_within_the_limits_read_as_before_on_one_kept_connection(serve) -> None:
    near = {"x": "y" * (MiB - 200)}  # the head and body together just under the cap
    answers = iter([json_answer(near), json_answer({"ok": 1}), SSE_HEAD + event("a") + event("b") + DONE])
    server = serve(lambda conn, s: conn.sendall(next(answers)))
    client = ServerClient(server.url, timeout_s=2, max_answer_bytes=MiB)
    assert client.post("/chat/completions", {}) == near
    assert client.get("/models") == {"ok": 1}
    pieces: list[str] = []
    client.call("post", "/chat/completions", {}, consume=stream(pieces))
    assert pieces == ["a", "b"]
    assert server.connections == 1  # all three on one kept connection


@pytest.mark.parametrize("setting", [{"timeout_s": 0}, {"timeout_s": float("nan")}, {"max_answer_bytes": 0}])
def test_a_client_without_a_bound_is_refused(setting) -> None:
    with pytest.raises(ValueError):
        ServerClient("http://127.0.0.1:1/v1", **setting)


def test_an_httpx_whose_insides_moved_is_used_unbounded_with_a_warning(caplog) -> None:
    """The limits reach the sockets through httpx's private transport and pool; a release that moved them must not
    stop every request to a server, only lose the limits (said once per client)."""
    from agent.backends.limits import bound

    class MovedInsides:
        _transport, _mounts = object(), {}

    client = MovedInsides()
    assert bound(client) is client
    assert "cannot be bounded" in caplog.text
