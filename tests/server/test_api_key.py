"""A server started with an API key: every route but /health and /metrics answers HTTP 401 without it (the real
`openai` client, plain HTTP, and this project's own clients, which send $OPENAI_API_KEY)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from sessionlib import words

from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.errors import AgentError
from agent.protocols import Sampling
from cli.serve_cmd import _access_line
from pipeline.backends import server_settings
from pipeline.errors import RunError
from server.config import ServeConfig, ServeError

KEY = "s3cret-key"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words(40)}]


def call(url: str, method: str = "GET", body: dict | None = None, key: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=60) as resp:
            return resp.status, json.loads(resp.read() or b"{}") if "json" in resp.headers["Content-Type"] else {}
    except urllib.error.HTTPError as exc:
        assert exc.code != 401 or exc.headers["WWW-Authenticate"] == "Bearer"
        return exc.code, json.loads(exc.read())


def client(server) -> OpenAICompatModel:
    return OpenAICompatModel(OpenAICompatConfig(model="tiny-qwen3", base_url=server.url, retries=0))


def test_every_route_but_health_and_metrics_needs_the_key(make_server, tmp_path) -> None:
    (tmp_path / "profiles").mkdir()
    server = make_server(api_key=KEY, profile=tmp_path / "profiles")
    root = server.url.removesuffix("/v1")
    assert call(root + "/health")[0] == 200 and call(root + "/metrics")[0] == 200
    refused = [
        ("GET", "/models", None),
        ("GET", "/sessions", None),
        ("POST", "/chat/completions", {"messages": MESSAGES, "max_tokens": 4}),
        ("POST", "/nexus/profiles", {"conversations": [MESSAGES, MESSAGES]}),
        ("DELETE", "/sessions/any", None),
    ]
    for method, path, body in refused:
        for key in (None, "wrong", KEY + "x", ""):
            status, answer = call(server.url + path, method, body, key)
            assert status == 401, (method, path, key)
            assert answer["error"]["type"] == "authentication_error" and "API key" in answer["error"]["message"]
    assert not list((tmp_path / "profiles").iterdir())  # nothing was calibrated
    assert server.sessions_info() == []  # nor any session opened

    # the right key opens every route, through the real openai client too
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    reply = client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=4, temperature=0)
    sid = reply.model_extra["nexus"]["session_id"]
    assert call(server.url + "/sessions", key=KEY)[1]["data"][0]["id"] == sid
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
    assert call(server.url + f"/sessions/{sid}", "DELETE", key="wrong")[0] == 401
    assert call(server.url + f"/sessions/{sid}", "DELETE", key=KEY) == (200, {"id": sid, "object": "session",
                                                                          "deleted": True})  # fmt: skip


def test_the_projects_clients_send_openai_api_key(make_server, monkeypatch) -> None:
    server = make_server(api_key=KEY)
    server_settings.cache_clear()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RunError, match=r"needs an API key and \$OPENAI_API_KEY is not set"):
        server_settings(server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with pytest.raises(RunError, match="is not the one it takes"):
        server_settings(server.url)
    sampling = Sampling(max_new_tokens=4, temperature=0.0)
    with pytest.raises(AgentError, match="HTTP 401: this server needs an API key"):
        client(server).reply(list(MESSAGES), sampling)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert server_settings(server.url)["policy"] == "nexus-agent"
    assert client(server).reply(list(MESSAGES), sampling).stats["session_id"]
    server_settings.cache_clear()


def test_the_key_is_never_reported_and_an_open_server_beyond_localhost_is_flagged() -> None:
    config = ServeConfig(api_key=KEY, host="0.0.0.0")
    assert KEY not in repr(config) and config.to_dict()["api_key"] is True
    assert KEY not in json.dumps(config.cache_settings())
    assert "required" in _access_line(config)
    assert "warning" in _access_line(ServeConfig(host="0.0.0.0")) and "NEXUS_AGENT_API_KEY" in _access_line(
        ServeConfig(host="0.0.0.0")
    )
    assert "warning" not in _access_line(ServeConfig())
    with pytest.raises(ServeError, match="api_key is empty"):
        ServeConfig(api_key=" ")
