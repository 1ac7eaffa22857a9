"""The drain of a shutdown (`serve --drain SECONDS`, `Server.close(drain=...)`), over real sockets on the tiny model:
the turns accepted before it (decoding or queued) finish and their sessions are parked for the next server, while a
new request is refused; a turn longer than the grace period is cut as without a drain, its session closed; a second
close (or signal) ends the drain at once; and a real `nexus-agent serve` drains on SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sessionlib import save_tiny_chat_model, wait_for

from server.api import SESSION_HEADER
from server.parking import check_park_dir, parked_files

NO_EOS = {"151645": -100, "151643": -100}  # <|im_end|>, <|endoftext|>: a reply runs to max_tokens


def chat(content: str, max_tokens: int, **extra) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    return body | {"logit_bias": NO_EOS} | extra


class Stream(threading.Thread):
    """A streamed chat completion read in a thread: its SSE events ([DONE] as {"done": True}) as they arrive."""

    def __init__(self, base: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.base, self.body, self.events, self.status = base, body | {"stream": True}, [], None
        self.session: str | None = None
        self.start()

    def run(self) -> None:
        with httpx.stream("POST", self.base + "/chat/completions", json=self.body, timeout=120) as r:
            self.status, self.session = r.status_code, r.headers.get(SESSION_HEADER)
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.events.append({"done": True} if line == "data: [DONE]" else json.loads(line[6:]))

    def finish_reason(self) -> str | None:
        return next((c["finish_reason"] for e in self.events for c in e.get("choices", []) if c["finish_reason"]), None)

    def text(self) -> str:
        return "".join(c["delta"].get("content") or "" for e in self.events for c in e.get("choices", []))


def hold_decoding(server) -> threading.Event:
    """Every decode step of `server` waits until the returned event is set (at most 60 s): a turn stays in flight,
    its first token sent, for as long as a test needs."""
    gate, step = threading.Event(), server.scheduler._step

    def held() -> None:
        gate.wait(60)
        step()

    server.scheduler._step = held
    return gate


def slow_decoding(server, seconds: float) -> None:
    """Every decode step of `server` takes at least `seconds` more: a long reply is surely long."""
    step = server.scheduler._step

    def slow() -> None:
        time.sleep(seconds)
        step()

    server.scheduler._step = slow


def closing(server, **kw) -> threading.Thread:
    """`server.close(**kw)` in a thread (it returns once the drain and the stop are over)."""
    closer = threading.Thread(target=server.close, kwargs=kw, daemon=True)
    closer.start()
    assert wait_for(lambda: server.scheduler.stopping), "the drain did not begin"  # no new work from here on
    return closer


def test_a_stream_in_flight_at_close_finishes_and_the_next_server_continues_its_session(
    make_server, tmp_path: Path, capfd
) -> None:
    park = tmp_path / "park"
    server = make_server(park_dir=park)  # the default drain, 30 s
    base, port = server.url, server.port
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # a keep-alive connection opened before
    kept.request("GET", "/health")
    health = kept.getresponse()
    assert health.status == 200 and health.read()
    gate = hold_decoding(server)
    try:
        stream = Stream(base, chat("hello there", 8))
        assert wait_for(lambda: stream.events), "the stream did not begin"
        closer = closing(server)
        # during the drain: a new connection is refused, a new request on an open connection gets 503 + Retry-After
        with pytest.raises(httpx.ConnectError):
            httpx.get(base.removesuffix("/v1") + "/health", timeout=5)
        kept.request("POST", "/v1/chat/completions", json.dumps(chat("late", 4)), {"Content-Type": "application/json"})
        refused = kept.getresponse()
        body = json.loads(refused.read())
        assert refused.status == 503 and refused.getheader("Retry-After") == "5", body
        assert body["error"]["type"] == "server_shutdown" and refused.getheader("Connection") == "close"
    finally:
        gate.set()
        kept.close()
    stream.join(60)
    closer.join(60)
    assert not closer.is_alive() and not stream.is_alive()
    assert stream.status == 200 and stream.finish_reason() == "length" and stream.events[-1] == {"done": True}
    err = capfd.readouterr().err
    assert "draining 1 turn in flight (up to 30 s; Ctrl-C or SIGTERM again to stop now)" in err, err
    assert "drained in" in err and f"parked 1 sessions in {park}" in err, err
    assert len([p for p in parked_files(park) if p.suffix == ".safetensors"]) == 1

    second = make_server(park_dir=park)  # adopts it (the first released the folder's lock)
    follow = [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": stream.text()},
        {"role": "user", "content": "and then?"},
    ]
    r = httpx.post(second.url + "/chat/completions", json=chat("", 4) | {"messages": follow}, timeout=60)
    nexus = r.json()["nexus"]
    assert r.status_code == 200 and nexus["session_id"] == stream.session, r.text
    assert nexus["continued"] and nexus["restored"] and nexus["turn"]["turn"] == 2


def test_a_request_queued_at_close_runs_in_the_drain(make_server, tmp_path: Path, capfd) -> None:
    """A request accepted but still waiting for a batch slot when the shutdown begins is run, not refused."""
    park = tmp_path / "park"
    server = make_server(park_dir=park, max_batch=1)
    gate = hold_decoding(server)
    plain: dict = {}
    try:
        stream = Stream(server.url, chat("first", 6))
        assert wait_for(lambda: stream.events)

        def ask() -> None:
            r = httpx.post(server.url + "/chat/completions", json=chat("second", 6), timeout=120)
            plain.update(status=r.status_code, body=r.json())

        waiter = threading.Thread(target=ask, daemon=True)
        waiter.start()
        assert wait_for(lambda: server.scheduler.in_flight == 2)  # queued behind the stream's batch slot
        closer = closing(server)
    finally:
        gate.set()
    for t in (stream, waiter, closer):
        t.join(60)
        assert not t.is_alive()
    assert stream.finish_reason() == "length" and stream.events[-1] == {"done": True}
    assert plain["status"] == 200 and plain["body"]["choices"][0]["finish_reason"] == "length", plain
    err = capfd.readouterr().err
    assert "draining 2 turns in flight" in err and f"parked 2 sessions in {park}" in err, err


@pytest.mark.parametrize("drain", [0, 1])
def test_a_turn_longer_than_the_drain_is_cut_and_its_session_closed(make_server, tmp_path: Path, capfd, drain) -> None:
    """drain 0 is the shutdown without a drain; 1 s is too short for this reply: either way its stream ends with the
    server_shutdown error event and its session is closed, not parked."""
    park = tmp_path / "park"
    server = make_server(park_dir=park)
    slow_decoding(server, 0.05)  # 400 tokens: at least 20 s
    stream = Stream(server.url, chat("a long one", 400))
    assert wait_for(lambda: stream.events)
    t0 = time.monotonic()
    server.close(drain=drain)
    took = time.monotonic() - t0
    stream.join(30)
    assert not stream.is_alive() and drain <= took < drain + 10
    assert stream.events[-1]["error"]["type"] == "server_shutdown" and stream.finish_reason() is None
    err = capfd.readouterr().err
    assert ("draining 1 turn in flight" in err) == (drain > 0), err
    if drain:
        assert "the drain's 1 s are over: cutting 1 turn still in flight" in err, err
    assert f"parked 0 sessions in {park}" in err and not parked_files(park), err
    check_park_dir(park)  # the folder's lock went with the close


def test_a_second_close_ends_the_drain_at_once(make_server, capfd) -> None:
    """What a second SIGTERM or Ctrl-C does to `serve`: a close(drain=0) while a close drains ends the drain now."""
    server = make_server()
    slow_decoding(server, 0.05)
    stream = Stream(server.url, chat("a long one", 400))
    assert wait_for(lambda: stream.events)
    first = closing(server, drain=60)
    t0 = time.monotonic()
    server.close(drain=0)
    assert time.monotonic() - t0 < 10
    first.join(10)
    stream.join(10)
    assert not first.is_alive() and not stream.is_alive()
    assert stream.events[-1]["error"]["type"] == "server_shutdown"
    err = capfd.readouterr().err
    assert "asked again to stop: ending the drain after" in err and "cutting 1 turn in flight" in err, err


def _serve(model: Path, park: Path, port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", "--model", str(model)]
    cmd += ["--served-name", "tiny-qwen3", "--port", str(port), "--budget", "128", "--park-dir", str(park)]
    cmd += ["--drain", "60", "--memory-profile", "none", "--threads", "1"]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "NEXUS_AGENT_HOME": str(log.parent / "home")}
    with log.open("w") as fh:  # a file, not a pipe nobody reads
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.slow  # two real `nexus-agent serve` processes
def test_serve_drains_on_sigterm_and_a_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    from test_serve_cli import free_port, wait_healthy

    model, park, port = save_tiny_chat_model(tmp_path / "model"), tmp_path / "park", free_port()
    base, log = f"http://127.0.0.1:{port}/v1", tmp_path / "serve1.log"
    proc = _serve(model, park, port, log)
    try:
        wait_healthy(base.removesuffix("/v1"), proc, log=log)
        stream = Stream(base, chat("hello", 1000, stream_options={"include_usage": True}))  # a few seconds
        assert wait_for(lambda: len(stream.events) >= 3)
        proc.send_signal(signal.SIGTERM)
        stream.join(120)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert stream.finish_reason() == "length" and stream.events[-1] == {"done": True}, text
    assert stream.events[-2]["usage"]["completion_tokens"] == 1000
    assert "draining 1 turn in flight (up to 60 s; Ctrl-C or SIGTERM again to stop now)" in text, text
    assert "drained in" in text and "parked 1 sessions" in text and "Traceback" not in text, text

    log = tmp_path / "serve2.log"
    proc = _serve(model, park, port, log)
    try:
        wait_healthy(base.removesuffix("/v1"), proc, log=log)
        follow = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": stream.text()}]
        body = chat("", 4, messages=follow + [{"role": "user", "content": "go"}])
        r = httpx.post(base + "/chat/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["nexus"]["restored"] and r.json()["nexus"]["continued"], r.text
        long = Stream(base, chat("a very long one", 3000))  # far longer than this test waits
        assert wait_for(lambda: len(long.events) >= 3)
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "draining 1 turn" in log.read_text())
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # the second signal: stop now
        assert proc.wait(60) == 0 and time.monotonic() - t0 < 15
        long.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert long.events[-1]["error"]["type"] == "server_shutdown" and long.finish_reason() is None, text
    assert "asked again to stop: ending the drain after" in text and "Traceback" not in text, text
    assert "adopted 1 parked sessions" in text and "parked 1 sessions" in text, text  # the first; the cut one closed
