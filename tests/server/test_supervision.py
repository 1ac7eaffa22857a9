"""The scheduler is supervised: no request's data ends its thread (a tool call nested 1,200 levels deep in a
history, or in the model's own reply, fails that request alone with a 400 and the server serves on), and when the
scheduler does die, /health says so with 503, chat requests get 503 at once, the server shuts down with its sessions
parked for the next start, and serve_forever raises so the process exits non-zero."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest
from sessionlib import wait_for

from server.config import ServeError
from server.tools import parse_reply

DEEP = "[" * 1200 + "]" * 1200  # a 2.4 KB JSON text nested 1,200 levels deep


def deep_history() -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP}}
    return {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "max_tokens": 2,
    }


def normal(content: str = "hello") -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


def test_a_deeply_nested_tool_call_in_a_history_fails_alone(make_server) -> None:
    base = make_server().url
    r = httpx.post(base + "/chat/completions", json=deep_history(), timeout=60)
    assert r.status_code == 400 and "arguments" in r.json()["error"]["message"], r.text
    for i in range(2):  # the scheduler lives on
        r = httpx.post(base + "/chat/completions", json=normal(f"after {i}"), timeout=60)
        assert r.status_code == 200, r.text
    assert httpx.get(base.removesuffix("/v1") + "/health", timeout=5).status_code == 200


def test_a_deeply_nested_call_in_the_models_reply_is_plain_content() -> None:
    text = '<tool_call>\n{"name": "f", "arguments": ' + DEEP + "}\n</tool_call>"
    content, calls = parse_reply(text)
    assert calls == [] and content == text


def kill_scheduler(server) -> None:
    """A fault outside any request's data (a bug in the loop itself): the loop's next pass raises."""

    def broken() -> None:
        raise RuntimeError("injected scheduler fault")

    server.scheduler._expire_waiting = broken
    server.scheduler.inbox.put(None)  # wake it


def test_a_dead_scheduler_fails_health_parks_its_sessions_and_ends_serve(make_server, tmp_path, capfd) -> None:
    park = tmp_path / "park"
    server = make_server(park_dir=park)
    base = server.url
    first = httpx.post(base + "/chat/completions", json=normal() | {"session_id": "keep-me"}, timeout=60)
    assert first.status_code == 200
    server.scheduler.on_death.clear()  # the listener stays up (it would shut down at once: the next test) to be asked
    kill_scheduler(server)
    assert wait_for(lambda: not server.scheduler.is_alive(), 10)
    health = httpx.get(base.removesuffix("/v1") + "/health", timeout=5)
    assert health.status_code == 503 and "scheduler" in health.json()["error"]["message"], health.text
    t0 = time.monotonic()
    r = httpx.post(base + "/chat/completions", json=normal("late"), timeout=60)
    assert r.status_code == 503 and "scheduler" in r.json()["error"]["message"] and time.monotonic() - t0 < 2
    assert isinstance(server.scheduler.failure, RuntimeError)
    assert 'nexus_requests_failed_total{cause="scheduler_failed"} 1' in server.metrics_text()
    server.close()
    assert "injected scheduler fault" in capfd.readouterr().err
    restarted = make_server(park_dir=park)  # the next start adopts the session parked as the scheduler died
    again = normal() | {"session_id": "keep-me"}
    again["messages"] = normal()["messages"] + [first.json()["choices"][0]["message"], {"role": "user", "content": "y"}]
    r = httpx.post(restarted.url + "/chat/completions", json=again, timeout=60)
    assert r.status_code == 200 and r.json()["nexus"]["restored"] is True, r.text


def test_serve_forever_raises_when_the_scheduler_dies(make_server) -> None:
    server = make_server()
    server.close()  # a server of its own below, run by serve_forever as the CLI runs it
    from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model

    from server.app import Server

    config = serve_config(port=0, model="tiny-qwen3", budget=128)
    server = Server(tiny_chat_model(), qwen_tokenizer(), config)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            server.serve_forever()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - what serve_forever raised is the outcome
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert wait_for(lambda: server.http.started, 30)
        kill_scheduler(server)
        thread.join(60)
    finally:
        server.close()
    assert len(outcome) == 1 and isinstance(outcome[0], ServeError), outcome  # the CLI: one line, exit status 2
    assert "scheduler failed (RuntimeError: injected scheduler fault)" in str(outcome[0])


# a real `serve` whose scheduler loop raises once the file named by argv[1] exists (a fault in the loop itself)
FAULTY_SERVE = """
import sys
from pathlib import Path

import server.batching

flag = Path(sys.argv.pop(1))
expire = server.batching.Scheduler._expire_waiting


def faulty(self):
    if flag.exists():
        raise RuntimeError("injected scheduler fault")
    expire(self)


server.batching.Scheduler._expire_waiting = faulty
from cli.app import main

main()
"""


@pytest.mark.slow  # two real `nexus-agent serve` processes
def test_serve_exits_2_when_its_scheduler_dies_and_the_next_start_adopts_its_sessions(tmp_path) -> None:
    from sessionlib import save_tiny_chat_model
    from test_serve_cli import free_port, wait_healthy

    model, park, flag = save_tiny_chat_model(tmp_path / "model"), tmp_path / "park", tmp_path / "die"
    port, log = free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    args = ["serve", "--model", str(model), "--port", str(port), "--park-dir", str(park), "--budget", "128"]
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", FAULTY_SERVE, str(flag), *args], stdout=out, stderr=out)
    try:
        wait_healthy(base, proc, log=log)
        first = httpx.post(base + "/v1/chat/completions", json=normal() | {"session_id": "keep-me"}, timeout=60)
        assert first.status_code == 200
        flag.touch()
        assert proc.wait(timeout=60) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "error: the server's scheduler failed (RuntimeError: injected scheduler fault)" in text, text
    assert f"parked 1 sessions in {park}" in text, text
    flag.unlink()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", FAULTY_SERVE, str(flag), *args], stdout=out, stderr=out)
    try:
        wait_healthy(base, proc, log=log)
        again = normal() | {"session_id": "keep-me"}
        again["messages"] += [first.json()["choices"][0]["message"], {"role": "user", "content": "y"}]
        r = httpx.post(base + "/v1/chat/completions", json=again, timeout=60)
        assert r.status_code == 200 and r.json()["nexus"]["restored"] is True, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
