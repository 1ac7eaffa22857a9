"""`serve` against hostile input, over real sockets on 127.0.0.1 with the tiny random model: JSON values of the wrong
type where the schema wants a string or a list (a 400 naming the field, never a 500), a connection past the limit
(an OpenAI-shaped JSON 503, not plain text), and park-folder sidecars damaged into other JSON shapes (removed with a
log line; the server starts and keeps every other session)."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from profilelib import conversation
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model, wait_for, words

from server.app import Server


def user(content: object = "hello") -> dict:
    return {"role": "user", "content": content}


def post(server: Server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/chat/completions", json=body | {"max_tokens": 2}, timeout=60)


@pytest.mark.parametrize("role", [[], {"a": 1}, ["user"]])
def test_a_role_that_is_not_a_string_is_a_400(make_server, role) -> None:
    server = make_server()
    r = post(server, {"messages": [{"role": role, "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert "unsupported role" in r.json()["error"]["message"]
    assert post(server, {"messages": [user()]}).status_code == 200


@pytest.mark.parametrize("text", [5, {"a": 1}, None, ["x"]])
def test_a_text_part_whose_text_is_not_a_string_is_a_400(make_server, text) -> None:
    server = make_server()
    r = post(server, {"messages": [user([{"type": "text", "text": text}])]})
    assert r.status_code == 400, r.text
    assert "'text' must be a string" in r.json()["error"]["message"]


@pytest.mark.parametrize("calls", ["call", {"id": "x"}, 3])
def test_tool_calls_that_are_not_a_list_are_a_400_naming_them(make_server, calls) -> None:
    server = make_server()
    messages = [user(), {"role": "assistant", "content": None, "tool_calls": calls}, user("more")]
    r = post(server, {"messages": messages})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "messages[1].tool_calls must be a list of tool calls"


def test_past_max_connections_the_503_is_an_openai_json_error(make_server) -> None:
    server = make_server(max_connections=4)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(6)]
    try:
        assert wait_for(lambda: len(server.http.server_state.connections) >= 6, 10)
        r = httpx.post(server.url + "/chat/completions", json={"messages": [user()], "max_tokens": 2}, timeout=30)
        assert r.status_code == 503
        assert r.headers["content-type"] == "application/json"
        assert r.json()["error"]["type"] == "server_busy"
        assert "max_connections" in r.json()["error"]["message"]
    finally:
        for sock in idle:
            sock.close()
    assert wait_for(lambda: httpx.get(server.url + "/models", timeout=30).status_code == 200, 10)


DAMAGES = {
    "a JSON array": lambda doc: [1, 2],
    "JSON null": lambda doc: None,
    "an id that is a number": lambda doc: doc | {"id": 5},
    "a seed that is a string": lambda doc: doc | {"seed": "abc"},
    "a transcript of strings": lambda doc: doc | {"transcript": ["abc", "def"]},
    "a transcript row whose content is a number": lambda doc: doc | {"transcript": [["user", 5, []]]},
    "a last_used that is null": lambda doc: doc | {"last_used": None},
    "arrays nested 100,000 deep": lambda doc: "[" * 100_000 + "]" * 100_000,  # RecursionError: the server never started
}


def start(park: Path) -> Server:
    options = {"port": 0, "model": "tiny-qwen3", "budget": 128, "park_dir": park}
    return Server(tiny_chat_model(), qwen_tokenizer(), serve_config(**options)).start()


def test_sidecars_damaged_into_other_json_are_removed_and_the_server_starts(tmp_path: Path, capfd) -> None:
    park = tmp_path / "park"
    first = start(park)
    try:
        for i in range(len(DAMAGES) + 1):
            assert post(first, {"messages": [user(f"conversation {i}")], "session_id": f"s{i}"}).status_code == 200
    finally:
        first.close()
    sidecars = sorted(park.glob("*.json"))
    for sidecar, damage in zip(sidecars, DAMAGES.values(), strict=False):
        damaged = damage(json.loads(sidecar.read_text()))
        sidecar.write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
    (park / ("f" * 32 + ".json")).mkdir()  # a folder named like a sidecar: not the server's, left alone
    capfd.readouterr()
    second = start(park)
    try:
        err = capfd.readouterr().err
        assert err.count("removed unreadable parked session") == len(DAMAGES), err
        assert sorted(park.glob("*.json")) == sorted([sidecars[-1], park / ("f" * 32 + ".json")])
        kept = httpx.get(second.url + "/sessions", timeout=30).json()["data"]
        assert len(kept) == 1
        assert post(second, {"messages": [user()], "session_id": kept[0]["id"]}).status_code == 200
    finally:
        second.close()


@pytest.mark.parametrize(
    "option", [("--queue-timeout", "nan"), ("--queue-timeout", "-5.0"), ("--keep-alive", "nan"), ("--max-body", "0")]
)
def test_serve_refuses_a_limit_that_is_not_positive_in_one_line(option) -> None:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", "--port", "0", *option]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {option[0]} must be positive, got {option[1]}"], done.stderr


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/sessions/x", "DELETE"),
        ("POST", "/v1/models/", "GET, HEAD"),
        ("DELETE", "/v1/nexus/profiles", "POST"),
    ],
)
def test_a_wrong_method_on_a_known_path_is_a_405_naming_the_methods_it_takes(make_server, method, path, allow) -> None:
    server = make_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request(method, path, body=b'{"pad": "' + b"z" * 100_000 + b'"}')
    r = conn.getresponse()
    assert r.status == 405
    assert r.getheader("Allow") == allow
    assert r.getheader("Content-Type") == "application/json"
    message = f"{path.rstrip('/')} does not take {method}; it takes {allow}"
    assert json.loads(r.read()) == {"error": {"message": message, "type": "method_not_allowed", "code": 405}}
    sock = conn.sock
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"messages": [user()], "max_tokens": 2}))
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["object"] == "chat.completion"
    assert conn.sock is sock  # the connection that got the 405, its body unread, serves the next request
    conn.close()
    assert httpx.get(server.url + "/nowhere", timeout=30).status_code == 404  # an unknown path stays a 404


def half_closed(port: int, path: str, body: dict) -> bytes:
    """POST `body` to `path` on a new connection, shut the sending side (shutdown(SHUT_WR)), and read until the
    server closes: what it answered."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_client_that_half_closes_after_its_request_gets_the_answer(make_server, tmp_path: Path) -> None:
    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(profile=store)
    convs = [conversation(words(40, t)) for t in ("alpha", "beta")]
    answer = half_closed(server.port, "/v1/nexus/profiles", {"conversations": convs})
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert (store / json.loads(body)["name"]).is_file()


def test_a_chat_client_that_half_closes_is_taken_as_gone_and_its_turn_cancelled(make_server) -> None:
    server = make_server()
    body = {"messages": [user("go on")], "max_tokens": 3000, "temperature": 1.0}
    assert half_closed(server.port, "/v1/chat/completions", body) == b""  # closed: no answer
    assert wait_for(lambda: not server.scheduler.active and not server.scheduler.waiting)
    generated = server.metrics.counters.get("tokens_generated_total", 0)
    assert generated < 3000  # cancelled, not decoded to its max_tokens for nobody
    assert server.sessions_info() == []
