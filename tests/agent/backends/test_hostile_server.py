"""The OpenAI-compatible backend against a real local HTTP server that misbehaves: answers of the wrong shape,
bodies that claim to be JSON and are not, rate limits, escape sequences in what the server sends. Each ends as one
printable line of error (ServerError, AgentError) or as a reply the agent can read, never as a traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.backends.client import ServerClient, ServerError
from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.errors import AgentError
from agent.protocols import Sampling

pytestmark = pytest.mark.usefixtures("waits")  # conftest: no backoff sleeps, no API key

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


class Scripted:
    """A local HTTP server answering each POST with the next scripted answer (the last one repeats)."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers, self.posts = answers, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts += 1
                status, headers, body = outer.answers[min(outer.posts, len(outer.answers)) - 1]
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[Scripted] = []

    def start(*answers: Answer) -> Scripted:
        servers.append(Scripted(list(answers)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def completion(content, **extra) -> Answer:
    body = {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}], **extra}
    return 200, {}, json.dumps(body).encode()


def model(url: str, stream: bool = False) -> OpenAICompatModel:
    pieces: list[str] = []
    return OpenAICompatModel(OpenAICompatConfig("m", url, retries=2), on_token=pieces.append if stream else None)


def ask(backend: OpenAICompatModel):
    return backend.reply([{"role": "user", "content": "hi"}], Sampling(max_new_tokens=8))


def test_a_429_is_retried_after_its_retry_after(serve, waits: list[float]) -> None:
    limited = (429, {"Retry-After": "7"}, b'{"error": {"message": "slow down"}}')
    server = serve(limited, completion("done"))
    assert ask(model(server.url)).text == "done"
    assert server.posts == 2 and waits == [7.0]


def test_a_429_that_lasts_ends_in_one_line_after_the_retries(serve, waits: list[float]) -> None:
    server = serve((429, {"Retry-After": "100000"}, b'{"error": {"message": "quota"}}'))
    with pytest.raises(ServerError, match="HTTP 429: quota") as caught:
        ask(model(server.url))
    assert caught.value.status == 429 and server.posts == 3
    assert waits == [60.0, 60.0]  # a Retry-After is waited for up to a minute


def test_a_body_that_claims_json_and_is_not_is_a_server_error(serve) -> None:
    server = serve((200, {}, b"this is {not json"))
    with pytest.raises(ServerError, match="the answer is not JSON"):
        ask(model(server.url))


def test_a_page_that_is_not_json_says_why_in_its_detail(serve) -> None:
    server = serve((200, {"Content-Type": "text/html"}, b"<html>a proxy's page</html>"))
    with pytest.raises(ServerError) as caught:
        ServerClient(server.url).post("/models", {})
    assert caught.value.detail == "the answer is not JSON"  # `--server URL: no ... server answers there (...)`


def test_escape_sequences_of_an_error_body_never_reach_the_message(serve) -> None:
    evil = b"bad\x1b]0;TITLE\x07\x1b[2J\x1b[31mred\x00nul\r\nnext \xc2\x9b31mline"
    server = serve((401, {"Content-Type": "text/plain"}, evil))
    with pytest.raises(ServerError) as caught:
        ask(model(server.url))
    text = str(caught.value)
    assert text.endswith("HTTP 401: badred nul next line")
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def test_an_empty_error_body_leaves_no_dangling_colon(serve) -> None:
    server = serve((404, {"Content-Type": "text/plain"}, b""))
    with pytest.raises(ServerError) as caught:
        ServerClient(server.url).post("/chat/completions", {})
    assert str(caught.value).endswith("/chat/completions: HTTP 404")


@pytest.mark.parametrize("content", [42, {"text": "x"}, [1, 2], True])
def test_content_of_another_type_is_an_unexpected_answer(serve, content) -> None:
    server = serve(completion(content))
    with pytest.raises(AgentError, match="unexpected chat-completions answer"):
        ask(model(server.url))


def test_content_parts_are_read_as_their_text(serve) -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "two"}]
    server = serve(completion(parts))
    assert ask(model(server.url)).text == "one two"


def test_usage_of_the_wrong_shape_is_ignored(serve) -> None:
    server = serve(completion("ok", usage={"total_tokens": "lots"}, nexus=["x"]))
    reply = ask(model(server.url))
    assert reply.text == "ok" and reply.context_tokens is None


def sse(*events: str) -> Answer:
    body = "".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n"
    return 200, {"Content-Type": "text/event-stream"}, body.encode()


def test_a_streamed_event_that_is_not_json_is_a_server_error(serve) -> None:
    first = json.dumps({"choices": [{"delta": {"content": "par"}}]})
    server = serve(sse(first, "{garbage"))
    with pytest.raises(ServerError, match="the answer is not JSON"):
        ask(model(server.url, stream=True))


@pytest.mark.parametrize("event", [{"choices": ["x"]}, {"choices": [{"delta": {"tool_calls": [{"function": 5}]}}]}])
def test_a_streamed_event_of_the_wrong_shape_is_an_unexpected_answer(serve, event) -> None:
    server = serve(sse(json.dumps(event)))
    with pytest.raises(AgentError, match="unexpected chat-completions stream event"):
        ask(model(server.url, stream=True))


def test_a_stream_answered_with_plain_json_says_so(serve) -> None:
    server = serve(completion("whole"))  # "stream": true ignored
    with pytest.raises(ServerError, match="asked to stream, the server answered application/json content"):
        ask(model(server.url, stream=True))
