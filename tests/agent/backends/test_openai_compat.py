"""OpenAICompatModel against a real HTTP server on 127.0.0.1 that speaks the chat-completions protocol."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.errors import AgentError
from agent.protocols import Sampling


class Server(ThreadingHTTPServer):
    requests: list[dict]
    answers: list[tuple[int, dict]]


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        code, answer = self.server.answers.pop(0)
        streamed = isinstance(answer, list)  # server-sent events, one per item
        data = (
            "".join(f"data: {json.dumps(e)}\n\n" for e in answer).encode() if streamed else json.dumps(answer).encode()
        )
        self.send_response(code)
        self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.requests, srv.answers = [], []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def completion(text: str, finish: str = "stop", total: int = 100) -> tuple[int, dict]:
    usage = {"prompt_tokens": total - 10, "completion_tokens": 10, "total_tokens": total}
    return 200, {
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": usage,
    }


def model_for(server: Server, **kw: object) -> OpenAICompatModel:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return OpenAICompatModel(OpenAICompatConfig(model="deepswe", base_url=url, **kw))


def test_history_stop_and_usage(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_TEST_KEY", "sk-test")
    call_cut = "Look.\n<function=execute_bash>\n<parameter=cmd>ls</parameter>\n"  # the server dropped </function>
    server.answers += [completion(call_cut, total=120), completion("no call here", finish="length", total=300)]
    model = model_for(server, api_key_env="NEXUS_TEST_KEY", seed=3)
    first = [{"role": "system", "content": "sys"}, {"role": "user", "content": "issue"}]
    r1 = model.reply(first, Sampling(max_new_tokens=64, temperature=0.5, top_p=0.9))
    assert r1.text == call_cut + "</function>"
    assert r1.context_tokens == 120
    assert r1.finish_reason == "stop"
    assert r1.stats == {"prompt_tokens": 110, "completion_tokens": 10, "total_tokens": 120}
    r2 = model.reply([{"role": "user", "content": "obs"}], Sampling())
    assert r2.text == "no call here"
    assert r2.context_tokens == 300
    req1, req2 = server.requests
    assert req1["path"] == "/v1/chat/completions"
    assert req1["auth"] == "Bearer sk-test"
    body = req1["body"]
    assert body["stop"] == ["</function>"]
    assert body["max_tokens"] == 64
    assert body["seed"] == 3
    assert (body["temperature"], body["top_p"], body["model"]) == (0.5, 0.9, "deepswe")
    assert [m["content"] for m in req2["body"]["messages"]] == ["sys", "issue", r1.text, "obs"]


def test_client_error_is_one_clear_agent_error(server: Server) -> None:
    server.answers.append((400, {"error": {"message": "model 'x' not found"}}))
    with pytest.raises(AgentError, match=r"HTTP 400: .*model 'x' not found"):
        model_for(server, retries=0).reply([{"role": "user", "content": "u"}], Sampling())


def test_server_error_is_retried(server: Server) -> None:
    server.answers += [(503, {"error": "busy"}), completion("ok")]
    assert model_for(server, retries=1).reply([], Sampling()).text == "ok"
    assert len(server.requests) == 2


def test_unreachable_server(server: Server) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    model = OpenAICompatModel(OpenAICompatConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", retries=0))
    with pytest.raises(AgentError, match="cannot reach the model server"):
        model.reply([], Sampling())


def test_unexpected_answer(server: Server) -> None:
    server.answers.append((200, {"nothing": True}))
    with pytest.raises(AgentError, match="unexpected chat-completions answer"):
        model_for(server, retries=0).reply([], Sampling())


TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]


def test_tools_go_out_and_tool_calls_come_back(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    call = {"id": "call_7", "type": "function", "function": {"name": "search", "arguments": {"search_term": "add"}}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    server.answers += [(200, {"choices": [{"message": message, "finish_reason": "tool_calls"}]}), completion("done")]
    model = model_for(server, api_key="given")
    first = [{"role": "system", "content": "sys", "tools": TOOLS}, {"role": "user", "content": "issue"}]
    r1 = model.reply(first, Sampling(stop=()))
    assert r1.text == ""
    assert r1.tool_calls == [{"id": "call_7", "name": "search", "arguments": '{"search_term": "add"}'}]
    model.reply([{"role": "tool", "tool_call_id": "call_7", "content": "found"}], Sampling(stop=()))
    req1, req2 = server.requests
    assert req1["auth"] == "Bearer given"
    assert req1["body"]["tools"] == TOOLS
    assert "stop" not in req1["body"]
    assert req2["body"]["tools"] == TOOLS
    assert "tools" not in req2["body"]["messages"][0]  # sent as the request's
    assert req1["body"]["tool_choice"] == "required"  # one call each reply: a constraining server forces it
    assert req2["body"]["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"search_term": "add"}'
    assert req2["body"]["messages"][3] == {"role": "tool", "tool_call_id": "call_7", "content": "found"}


def test_streamed_tool_calls_are_gathered_from_their_pieces(server: Server) -> None:
    pieces = [
        {"choices": [{"delta": {"content": "Let me look."}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "sea"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "rch", "arguments": '{"search'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '_term": "x"}'}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    server.answers.append((200, pieces))
    seen: list[str] = []
    model = OpenAICompatModel(model_for(server).config, on_token=seen.append)
    reply = model.reply([{"role": "user", "content": "u", "tools": TOOLS}], Sampling(stop=()))
    assert reply.text == "Let me look."
    assert seen == ["Let me look."]
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [{"id": "c1", "name": "search", "arguments": '{"search_term": "x"}'}]
