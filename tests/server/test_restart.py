"""Sessions outlive the server process: parked to `--park-dir` at shutdown (and as they are parked under pressure),
adopted by the next server on that folder, continued with only their new tokens prefilled; after a kill -9 the
sessions that were parked come back, and what cannot be read there is removed with a log line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest
from sessionlib import qwen_tokenizer, save_tiny_chat_model, serve_config, tiny_chat_model, words

from server.api import SESSION_HEADER
from server.app import Server
from server.config import ServeError
from server.parking import LOCK_NAME, parked_files

SYSTEM = {"role": "system", "content": "You are a terse coding agent."}


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def ask(c: openai.OpenAI, messages: list[dict], **kw):
    options = {"max_tokens": 12, "temperature": 0} | kw
    return c.chat.completions.create(model="tiny-qwen3", messages=messages, **options)


def sessions(url: str) -> dict[str, dict]:
    with urllib.request.urlopen(url + "/sessions") as r:
        return {s["id"]: s for s in json.load(r)["data"]}


def extend(messages: list[dict], reply, text: str) -> list[dict]:
    return messages + [
        {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": text},
    ]


def start(park_dir: Path, **overrides) -> Server:
    options = {"port": 0, "model": "tiny-qwen3", "budget": 128, "park_dir": park_dir} | overrides
    return Server(tiny_chat_model(), qwen_tokenizer(), serve_config(**options)).start()


def test_a_restart_on_the_same_park_dir_continues_every_session(tmp_path: Path) -> None:
    park = tmp_path / "park"
    first = start(park)
    c = client(first.url)
    stateless = [SYSTEM, {"role": "user", "content": words(300, "a")}]
    r1 = ask(c, stateless)
    named = [{"role": "user", "content": words(100, "b")}]
    ask(c, named, extra_headers={SESSION_HEADER: "agent-7"})
    before = sessions(first.url)
    first.close()  # what SIGTERM runs: every idle session goes to the park folder
    assert len(list(park.glob("*.safetensors"))) == 2 and len(list(park.glob("*.json"))) == 2

    second = start(park)
    try:
        after = sessions(second.url)
        assert sorted(after) == sorted(before) and "agent-7" in after
        assert all(after[i]["state"] == "parked" and after[i]["messages"] == before[i]["messages"] for i in after)
        r2 = ask(client(second.url), extend(stateless, r1, "next"))
        nexus = r2.model_extra["nexus"]
        assert nexus["session_id"] == r1.model_extra["nexus"]["session_id"] and nexus["continued"]
        assert nexus["restored"] and nexus["turn"]["turn"] == 2 and nexus["turn"]["prefill_tokens"] < 20
        cached = r2.usage.prompt_tokens_details.cached_tokens
        assert cached == r2.usage.prompt_tokens - nexus["turn"]["prefill_tokens"] > 150
    finally:
        second.close()
    # the same conversation on a server that never stopped gives the same reply
    never = start(tmp_path / "other")
    try:
        same = ask(client(never.url), stateless)
        assert ask(client(never.url), extend(stateless, same, "next")).choices[0].message.content == (
            r2.choices[0].message.content
        )
    finally:
        never.close()


def test_a_parked_file_damaged_while_the_server_runs_loses_only_that_session(tmp_path: Path) -> None:
    server = start(tmp_path / "park", max_sessions=1)
    try:
        c = client(server.url)
        a = [{"role": "user", "content": words(60, "a")}]
        ra = ask(c, a)
        ask(c, [{"role": "user", "content": words(60, "b")}])  # a is parked to disk
        (path,) = (tmp_path / "park").glob("*.safetensors")
        path.write_bytes(path.read_bytes()[:-100])
        with pytest.raises(openai.InternalServerError, match="could not be restored") as info:
            ask(c, extend(a, ra, "next"))
        assert info.value.status_code == 503 and not path.exists()
        again = ask(c, extend(a, ra, "next")).model_extra["nexus"]  # the whole conversation opens a new session
        assert not again["continued"] and again["turn"]["prefill_tokens"] > 40
    finally:
        server.close()


def test_a_second_server_on_the_same_park_dir_is_refused(tmp_path: Path) -> None:
    """Two servers on one park folder would adopt and overwrite each other's sessions: the second is one clear
    error, and the folder is free again once the first has closed."""
    first = start(tmp_path)
    try:
        ask(client(first.url), [{"role": "user", "content": "hello"}])
        with pytest.raises(ServeError, match="another nexus-agent serve is using this park folder"):
            start(tmp_path)
    finally:
        first.close()
    held = parked_files(tmp_path)
    assert len(held) == 2 and (tmp_path / LOCK_NAME).is_file()  # a session file and its sidecar; the lock is neither
    second = start(tmp_path)  # the first's session parked at close, adopted here (the lock file is no stray)
    try:
        assert len(sessions(second.url)) == 1 and parked_files(tmp_path) == held
    finally:
        second.close()


def test_a_start_that_fails_leaves_the_park_dir_free(tmp_path: Path) -> None:
    """The lock goes with every start that fails after taking it: a port already taken, a certificate missing."""
    other = start(tmp_path / "other")
    try:
        with pytest.raises(ServeError, match="cannot listen on"):
            start(tmp_path / "park", port=other.port)
    finally:
        other.close()
    with pytest.raises(ServeError, match="no such file"):
        start(tmp_path / "park", tls_cert=tmp_path / "missing.pem")  # refused after the lock and the port were taken
    start(tmp_path / "park").close()


def test_the_cli_refuses_a_second_server_in_one_line(tmp_path: Path) -> None:
    """`nexus-agent serve --park-dir DIR` while another server holds DIR: one line naming DIR, exit 2, before the
    model loads."""
    park = tmp_path / "park"
    first = start(park)
    try:
        cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", "--model", "tiny-qwen3"]
        cmd += ["--port", "0", "--park-dir", str(park), "--memory-profile", "none", "--threads", "1"]
        env = os.environ | {"HF_HUB_OFFLINE": "1", "NEXUS_AGENT_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    finally:
        first.close()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == (
        f"error: --park-dir {park}: another nexus-agent serve is using this park folder; give each server its own"
    )


def test_without_a_park_dir_nothing_is_kept(tmp_path: Path) -> None:
    server = Server(tiny_chat_model(), qwen_tokenizer(), serve_config(port=0, model="tiny-qwen3", budget=128)).start()
    ask(client(server.url), [{"role": "user", "content": "hello"}])
    folder = server.registry.park_dir
    server.close()
    assert not folder.exists()


def _serve(model: Path, park: Path, port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", "--model", str(model)]
    cmd += ["--served-name", "tiny-qwen3", "--port", str(port), "--budget", "128", "--park-dir", str(park)]
    cmd += ["--max-sessions", "1", "--memory-profile", "none", "--threads", "1"]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "NEXUS_AGENT_HOME": str(log.parent / "home")}
    with log.open("w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env)


def _stop(proc: subprocess.Popen, sig: int) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the server did not stop on signal {sig}")


@pytest.mark.slow  # two real `nexus-agent serve` processes
def test_kill_9_mid_stream_then_the_parked_sessions_come_back(tmp_path: Path) -> None:
    from test_serve_cli import free_port, wait_healthy

    model, park = save_tiny_chat_model(tmp_path / "model"), tmp_path / "park"
    port, log = free_port(), tmp_path / "serve1.log"
    proc = _serve(model, park, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log=log)
        c = client(base + "/v1")
        a = [{"role": "user", "content": words(200, "a")}]
        ra = ask(c, a)
        ask(c, [{"role": "user", "content": words(200, "b")}])  # one resident session: a is parked to disk
        stream = ask(c, [{"role": "user", "content": words(200, "c")}], max_tokens=2000, stream=True)
        next(iter(stream))  # c is decoding (b parked for it)
        before = sessions(base + "/v1")
        proc.kill()  # kill -9 mid-stream
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(s["state"] for s in before.values()) == ["active", "parked", "parked"]
    (park / ("0" * 32 + ".json")).write_text("{not json")  # a damaged sidecar, and a session file with none
    (park / ("1" * 32 + ".safetensors")).write_bytes(b"truncated")

    log2 = tmp_path / "serve2.log"
    proc = _serve(model, park, port, log2)
    try:
        wait_healthy(base, proc, log=log2)
        after = sessions(base + "/v1")
        assert sorted(after) == sorted(i for i, s in before.items() if s["state"] == "parked")
        r2 = ask(client(base + "/v1"), extend(a, ra, "next"))
        nexus = r2.model_extra["nexus"]
        assert nexus["continued"] and nexus["restored"] and nexus["turn"]["prefill_tokens"] < 20
        assert not (park / ("0" * 32 + ".json")).exists() and not (park / ("1" * 32 + ".safetensors")).exists()
        _stop(proc, signal.SIGTERM)  # a clean stop parks every idle session
        assert len(list(park.glob("*.safetensors"))) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log2.read_text()
    assert text.count("removed unreadable parked session") == 2, text
    assert "adopted 2 parked sessions" in text, text

    proc = _serve(model, park, port, tmp_path / "serve3.log")  # after SIGTERM: every session is back
    try:
        wait_healthy(base, proc, log=tmp_path / "serve3.log")
        assert sorted(sessions(base + "/v1")) == sorted(after)
        r3 = ask(client(base + "/v1"), extend(extend(a, ra, "next"), r2, "and then"))
        nexus = r3.model_extra["nexus"]
        assert nexus["restored"] and nexus["turn"]["turn"] == 3 and nexus["turn"]["prefill_tokens"] < 20
    finally:
        _stop(proc, signal.SIGTERM)
