"""`serve` under load and faults, over real sockets on 127.0.0.1 with the tiny random model: many concurrent clients,
an oversized body beside a running stream, slow-header connections, clients that go away mid-reply, a 404 followed
by a request on the same keep-alive connection, and SIGTERM with a stream in flight."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sessionlib import wait_for, words

from server.api import SESSION_HEADER

TESTS = Path(__file__).resolve().parents[1]


def chat(max_tokens: int, content: str, **extra) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


def stream_times(base: str, body: dict, out: list[float], events: list[dict]) -> None:
    """Stream `body`, appending each SSE event's arrival time and payload ([DONE] as {"done": True})."""
    with httpx.stream("POST", base + "/chat/completions", json=body | {"stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(time.monotonic())
                events.append({"done": True} if line == "data: [DONE]" else json.loads(line[6:]))


def metric(server, name: str) -> float:
    return server.metrics.counters.get(name, 0.0)


def test_64_clients_3_turns_each_all_served(make_server) -> None:
    server = make_server(max_sessions=80, max_batch=16)

    async def client(http: httpx.AsyncClient, i: int) -> list[str]:
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words(40, f"c{i}")}]
        ids = []
        for turn in range(3):
            r = await http.post("/chat/completions", json={"messages": messages, "max_tokens": 3, "temperature": 0})
            assert r.status_code == 200, r.text
            answer = r.json()
            ids.append(answer["nexus"]["session_id"])
            messages += [answer["choices"][0]["message"], {"role": "user", "content": f"turn {turn} of {i}"}]
        return ids

    async def main() -> list[list[str]]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as http:
            return await asyncio.gather(*(client(http, i) for i in range(64)))

    sessions = asyncio.run(main())
    assert all(len(set(ids)) == 1 for ids in sessions)  # each client's turns continued its own session
    assert len({ids[0] for ids in sessions}) == 64
    assert server.metrics.requests == {200: 192}


def test_a_50mb_body_is_refused_413_without_stalling_a_stream(make_server) -> None:
    server = make_server()
    base = server.url
    times, events = [], []
    streamer = threading.Thread(target=stream_times, args=(base, chat(600, "tell", temperature=1.0), times, events))
    streamer.start()
    assert wait_for(lambda: len(times) >= 5)
    big = 50 * 2**20
    with socket.create_connection(("127.0.0.1", server.port)) as sock:  # declared: refused before any is read
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {big}\r\n\r\n".encode())
        head, answer = read_response(sock)
    assert head.startswith(b"HTTP/1.1 413") and "more than this server takes" in answer["error"]["message"]
    refused_at = time.monotonic()
    r = httpx.post(base + "/chat/completions", content=chunks(big), timeout=60)  # undeclared: refused as it arrives
    assert r.status_code == 413 and "at least" in r.json()["error"]["message"]
    streamer.join(120)
    assert events[-1] == {"done": True} and events[-2]["choices"][0]["finish_reason"] in ("length", "stop")
    during = [b - a for a, b in zip(times, times[1:], strict=False) if b >= refused_at - 1]
    assert during and max(during) < 1.0, max(during)  # the stream kept flowing while the bodies were refused


def chunks(total: int, size: int = 2**20):
    sent = 0
    while sent < total:
        yield b"x" * size
        sent += size


def read_response(sock: socket.socket) -> tuple[bytes, dict]:
    """The status line + headers and the JSON body of one answer with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head, json.loads(body)


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(make_server) -> None:
    server = make_server()  # the tiny model has 4096 positions: 200,000 characters cannot fit, whatever the tokens
    r = httpx.post(server.url + "/chat/completions", json=chat(2, "x" * 200_000), timeout=30)
    assert r.status_code == 400 and "200000 characters" in r.json()["error"]["message"]
    assert server.sessions_info() == [] and metric(server, "prefill_chunks_total") == 0
    r = httpx.post(server.url + "/chat/completions", json=chat(2, words(5000)), timeout=30)  # fits by characters
    assert r.status_code == 400 and "past the model's maximum of 4096 positions" in r.json()["error"]["message"]
    assert server.sessions_info() == [] and metric(server, "prefill_chunks_total") == 0


def test_past_max_connections_a_request_gets_503_then_is_served_once_they_close(make_server) -> None:
    server = make_server(max_connections=8)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(10)]
    assert wait_for(lambda: len(server.http.server_state.connections) >= 10, 10)
    r = httpx.get(server.url + "/models", timeout=30)
    assert r.status_code == 503
    for sock in idle:
        sock.close()
    assert wait_for(lambda: httpx.get(server.url + "/models", timeout=30).status_code == 200, 10)


def test_slow_header_clients_hold_nothing_and_are_cut_off(make_server) -> None:
    server = make_server(header_timeout_s=2.0)
    slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
    stop = threading.Event()

    def dribble() -> None:  # slowloris: one more header byte per connection every half second
        request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 100
        for byte in request:
            for sock in slow:
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    pass
            if stop.wait(0.5):
                return

    t = threading.Thread(target=dribble)
    t.start()
    try:
        t0 = time.monotonic()
        r = httpx.post(server.url + "/chat/completions", json=chat(2, "hello"), timeout=30)
        assert r.status_code == 200 and time.monotonic() - t0 < 5.0
        for sock in slow:  # each is closed by the server once its header deadline passes
            sock.settimeout(10)
            assert read_until_closed(sock) == b""
        assert time.monotonic() - t0 < 15.0
    finally:
        stop.set()
        t.join()
        for sock in slow:
            sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    try:
        while data := sock.recv(4096):
            if data:
                return data
    except ConnectionResetError:
        pass
    return b""


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_goes_away_is_no_longer_decoded(make_server, capfd, stream: bool) -> None:
    server = make_server()
    body = json.dumps(chat(3000, "go on", temperature=1.0, stream=stream)).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_for(lambda: metric(server, "tokens_generated_total") >= 20)
    assert wait_for(lambda: not server.scheduler.active)  # the reply was dropped, not decoded to max_tokens
    generated = metric(server, "tokens_generated_total")
    time.sleep(1.0)
    assert metric(server, "tokens_generated_total") == generated < 3000
    assert server.sessions_info() == []  # its session went with it (the client never saw the reply)
    assert httpx.post(server.url + "/chat/completions", json=chat(2, "next"), timeout=30).status_code == 200
    assert "Traceback" not in capfd.readouterr().err


def test_a_404_with_a_body_leaves_the_keep_alive_connection_usable(make_server) -> None:
    server = make_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v1/nowhere", body=b'{"pad": "' + b"z" * 300_000 + b'"}')
    r = conn.getresponse()
    assert r.status == 404 and "no route POST" in json.loads(r.read())["error"]["message"]
    sock = conn.sock
    conn.request("POST", "/v1/chat/completions", body=json.dumps(chat(2, "hi")), headers={SESSION_HEADER: "k"})
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["nexus"]["session_id"] == "k"
    assert conn.sock is sock  # the same connection served both
    conn.close()


SERVE = """
import sys
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model
from server.app import Server
config = serve_config(port=0, model="tiny-qwen3", budget=128, drain_s=0)  # no drain: the turn in flight is cut
server = Server(tiny_chat_model(), qwen_tokenizer(), config)
print(server.port, flush=True)
server.serve_forever()
print("stopped", flush=True)
"""


def test_sigterm_ends_a_stream_with_an_error_event_and_exits_0(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    proc = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        port = int(proc.stdout.readline())
        times, events = [], []
        body = chat(3000, "go on", temperature=1.0)
        t = threading.Thread(target=stream_times, args=(f"http://127.0.0.1:{port}/v1", body, times, events))
        t.start()
        assert wait_for(lambda: len(times) >= 5)
        proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert events[-1]["error"]["type"] == "server_shutdown", events[-3:]
    assert not any("finish_reason" in str(e) and e.get("choices", [{}])[0].get("finish_reason") for e in events)
    assert "Traceback" not in err and "terminate called" not in err, err
    assert proc.stdout.read().decode().strip() == "stopped"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
