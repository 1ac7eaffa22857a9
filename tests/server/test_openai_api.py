"""The OpenAI-compatible API through the real `openai` client on 127.0.0.1: models, completions, streaming,
session continuation (only new tokens prefilled), explicit session ids, usage, the nexus field, clear errors, and
the sampling options: seeds, logprobs, penalties and logit_bias."""

from __future__ import annotations

import json
import math
import re
import socket
import urllib.error
import urllib.request

import openai
import pytest
from sessionlib import words

from server.api import SESSION_HEADER

SYSTEM = {"role": "system", "content": "You are a terse coding agent."}


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def ask(c: openai.OpenAI, messages: list[dict], **kw):
    options = {"max_tokens": 12, "temperature": 0} | kw
    return c.chat.completions.create(model="tiny-qwen3", messages=messages, **options)


def test_models_and_a_conversation_that_continues_its_session(make_server) -> None:
    server = make_server()
    c = client(server)
    assert [m.id for m in c.models.list().data] == ["tiny-qwen3"]
    settings = c.models.list().data[0].model_extra["nexus"]  # what every session runs with
    assert (settings["policy"], settings["budget"], settings["protocol"]) == ("nexus-agent", 128, "true-eviction")
    messages = [SYSTEM, {"role": "user", "content": words(300)}]
    r1 = ask(c, messages)
    n1 = r1.model_extra["nexus"]
    assert not n1["continued"] and n1["turn"]["prefill_tokens"] == r1.usage.prompt_tokens > 150
    assert r1.usage.completion_tokens == 12 and r1.choices[0].finish_reason == "length"
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    messages += [{"role": "assistant", "content": r1.choices[0].message.content}, {"role": "user", "content": "ok"}]
    r2 = ask(c, messages)
    n2 = r2.model_extra["nexus"]
    assert n2["continued"] and n2["session_id"] == n1["session_id"] and n2["turn"]["turn"] == 2
    # only the new user message (and the generation prompt) were prefilled; the rest came from the session's cache
    assert n2["turn"]["prefill_tokens"] < 20
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached == r2.usage.prompt_tokens - n2["turn"]["prefill_tokens"]
    # everything of turn 1 but its last reply token and the end-of-turn tokens (never run through the model)
    assert n1["turn"]["history_tokens"] - 3 <= cached < n1["turn"]["history_tokens"]
    assert n2["turn"]["evicted_tokens"] >= 0 and n1["turn"]["evicted_tokens"] > 0  # budget 128 < prompt: evicted
    # the same opening again is another conversation: a new session, prefilled from scratch
    r3 = ask(c, messages[:2])
    assert r3.model_extra["nexus"]["session_id"] != n1["session_id"]
    assert r3.choices[0].message.content == r1.choices[0].message.content  # same seed, greedy: the same reply


def test_streaming_equals_the_plain_answer_and_trims_the_stop_string(make_server) -> None:
    server = make_server()
    c = client(server)
    messages = [SYSTEM, {"role": "user", "content": words(120)}]
    plain = ask(c, messages, max_tokens=30).choices[0].message.content
    stop = plain[10:14]  # a stop string the greedy reply is known to contain
    cut = ask(c, messages, max_tokens=30, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].message.content == plain[: plain.index(stop)]
    chunks = list(ask(c, messages, max_tokens=30, stop=[stop], stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == cut.choices[0].message.content
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals[0].choices[0].finish_reason == "stop" and "turn" in finals[0].model_extra["nexus"]
    assert chunks[-1].usage.completion_tokens == cut.usage.completion_tokens


def test_explicit_session_id_takes_only_new_messages(make_server) -> None:
    server = make_server()
    c = client(server)
    headers = {SESSION_HEADER: "agent-7"}
    r1 = ask(c, [SYSTEM, {"role": "user", "content": "first"}], extra_headers=headers)
    assert r1.model_extra["nexus"]["session_id"] == "agent-7"
    r2 = ask(c, [{"role": "user", "content": "second"}], extra_headers=headers)  # only the new message
    n2 = r2.model_extra["nexus"]
    assert n2["continued"] and n2["turn"]["turn"] == 2 and n2["turn"]["prefill_tokens"] < 15
    r3 = ask(c, [{"role": "user", "content": "third"}], extra_body={"session_id": "agent-7"})  # the body field
    assert r3.model_extra["nexus"]["turn"]["turn"] == 3
    sessions = json.load(urllib.request.urlopen(server.url + "/sessions"))["data"]
    assert [(s["id"], s["messages"]) for s in sessions] == [("agent-7", 7)]
    req = urllib.request.Request(server.url + "/sessions/agent-7", method="DELETE")
    assert json.load(urllib.request.urlopen(req))["deleted"]
    r4 = ask(c, [{"role": "user", "content": "again"}], extra_headers=headers)
    assert not r4.model_extra["nexus"]["continued"]


def test_errors_are_clear_http_errors(make_server) -> None:
    server = make_server(max_sessions=1)
    c = client(server)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        c.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="unsupported role"):
        ask(c, [{"role": "robot", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="max_completion_tokens must be"):
        ask(c, [{"role": "user", "content": "x"}], max_completion_tokens=-3)
    with pytest.raises(openai.BadRequestError, match="past the model's maximum"):  # 4096 positions
        ask(c, [{"role": "user", "content": words(9000)}], extra_headers={SESSION_HEADER: "x"})
    ask(c, [{"role": "user", "content": "one"}])  # the failed turn closed its session: room for this one
    # max_sessions=1 is full, but its one session is idle: it is parked, not refused (waiting for a busy one is
    # test_admission's)
    ask(c, [{"role": "user", "content": "another conversation"}])
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(server.url + "/nothing")


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"} | (headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        ({"stop": 5}, None, "'stop' must be a string or a list"),
        ({"stop": {"a": 1}}, None, "'stop' must be a string or a list"),
        ({"stream": True, "stream_options": "yes"}, None, "'stream_options' must be an object"),
        ({"user": 5}, None, "'user' must be a string"),  # 5 and 6 were both no user: one session for both
        ({"user": {"id": 1}}, None, "'user' must be a string"),
        (b"\xff\xfe{", None, "not valid JSON"),
        (b"{}", {"Content-Length": "lots"}, "a Content-Length that is not a number"),
    ],
)
def test_malformed_fields_are_answered_400(make_server, body, headers, message) -> None:
    """Fields of the wrong type are a 400 naming the field, never a dropped connection (a handler's exception)."""
    server = make_server()
    if isinstance(body, dict):
        body = json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2} | body).encode()
    status, answer = _post(server.url + "/chat/completions", body, headers)
    assert status == 400 and message in answer["error"]["message"], answer
    status, answer = _post(server.url + "/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "n": None}).encode())  # fmt: skip
    assert status == 200 and answer["choices"][0]["message"]["role"] == "assistant"  # the server serves on


def test_a_malformed_request_still_sending_its_body_gets_its_400(make_server) -> None:
    """The 400 for a request h11 cannot parse reaches the client even while its body is still arriving: the server
    reads and drops the rest before it closes (closing with unread bytes would reset the connection, and the client
    could lose the answer)."""
    server = make_server()
    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n"
    for _ in range(5):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head)
            try:
                sock.sendall(b"x" * (1 << 20))  # more than the socket buffers hold: some is unread when the 400 goes
            except OSError:
                pass  # the server shut its side: sending may fail; what matters is reading the answer
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"Content-Length that is not a number" in answer


@pytest.mark.parametrize("sid", ["../../tmp/x", "/tmp/x", "a b", "-x", "x" * 129, 5])
def test_session_ids_that_could_name_files_are_refused(make_server, sid) -> None:
    """A session id is a client's string: one that is not a plain name is a 400 (a parked session's file is named by
    a digest of the id, never by the id itself, either way)."""
    server = make_server()
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    status, answer = _post(server.url + "/chat/completions", json.dumps(body | {"session_id": sid}).encode())
    assert status == 400 and "session id" in answer["error"]["message"], answer
    if isinstance(sid, str) and sid.isprintable():
        status, answer = _post(server.url + "/chat/completions", json.dumps(body).encode(), {SESSION_HEADER: sid})
        assert status == 400 and "session id" in answer["error"]["message"], answer
    ok = "chat-my-project-1f2e:3@host.x"
    status, answer = _post(server.url + "/chat/completions", json.dumps(body | {"session_id": ok}).encode())
    assert status == 200 and answer["nexus"]["session_id"] == ok


def test_the_chat_client_names_sessions_as_the_server_takes_them() -> None:
    from pipeline.chat import served as chat_served
    from server import api

    assert chat_served.SESSION_ID.pattern == api.SESSION_ID.pattern  # the protocol's rule, on both sides
    for name in ("my project", "a/../b", "…", "x" * 300, "-"):
        assert api.SESSION_ID.fullmatch(chat_served.new_session_id(name))


def test_a_request_without_seed_samples_afresh_and_a_seed_reproduces(make_server) -> None:
    server = make_server()
    c = client(server)
    messages = [SYSTEM, {"role": "user", "content": "pick words"}]
    free = {ask(c, messages, temperature=1, max_tokens=16).choices[0].message.content for _ in range(2)}
    assert len(free) == 2  # each request draws from its own random seed (not the server's seed 0)
    seeded = {ask(c, messages, temperature=1, max_tokens=16, seed=1234).choices[0].message.content for _ in range(2)}
    assert len(seeded) == 1 and seeded.isdisjoint(free)


def _raw_completion(server, body: dict):
    from openai.types.chat import ChatCompletion

    status, answer = _post(server.url + "/chat/completions", json.dumps({"model": "tiny-qwen3"} | body).encode())
    assert status == 200, answer
    return ChatCompletion.model_validate(answer)  # the SDK's pydantic types, validated


def test_logprobs_have_openais_shape_streamed_or_not(make_server) -> None:
    server = make_server()
    c = client(server)
    body = {"messages": [SYSTEM, {"role": "user", "content": words(40)}], "max_tokens": 10, "temperature": 0}
    r = _raw_completion(server, body | {"logprobs": True, "top_logprobs": 4})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 10 and r.choices[0].finish_reason == "length"
    assert b"".join(bytes(e.bytes) for e in content).decode() == r.choices[0].message.content
    for e in content:  # greedy: the chosen token is the most likely; alternatives most likely first
        best = e.top_logprobs[0]
        assert len(e.top_logprobs) == 4 and (best.token, best.logprob) == (e.token, e.logprob)
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1.0 + 1e-6
    assert _raw_completion(server, body).choices[0].logprobs is None  # not asked: none
    no_top = _raw_completion(server, body | {"logprobs": True}).choices[0].logprobs.content
    assert [(e.token, e.top_logprobs) for e in no_top] == [(e.token, []) for e in content]
    chunks = list(ask(c, body["messages"], max_tokens=10, logprobs=True, top_logprobs=4, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


def test_a_temperature_too_small_for_float32_answers_as_greedy_does(make_server) -> None:
    """1e-300 is inside 0..2 but 0 in float32: every probability was NaN, the reply the vocabulary's last token,
    and with logprobs a plain-text 500 whose session kept the reply the client never got (or NaN in the stream)."""
    server = make_server()
    body = {"messages": [SYSTEM, {"role": "user", "content": words(40)}], "max_tokens": 6, "logprobs": True}
    greedy = _raw_completion(server, body | {"temperature": 0})
    tiny = _raw_completion(server, body | {"temperature": 1e-300, "top_logprobs": 2})
    assert tiny.choices[0].message.content == greedy.choices[0].message.content
    assert all(e.logprob == 0.0 and e.top_logprobs[1].logprob == -9999.0 for e in tiny.choices[0].logprobs.content)
    raw = json.dumps({"model": "tiny-qwen3", "stream": True, "temperature": 1e-300} | body).encode()
    req = urllib.request.Request(
        server.url + "/chat/completions", data=raw, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as res:
        events = [line[6:] for line in res.read().decode().splitlines() if line.startswith("data: {")]
    assert events
    strict = [name for event in events for name in re.findall(r"\b(NaN|-?Infinity)\b", event)]
    assert strict == []  # JSON has no NaN or Infinity


def test_a_reply_that_cannot_be_sent_is_not_kept_in_its_session(make_server, monkeypatch) -> None:
    """An answer that fails to serialize (a fault injected where NaN once broke it) is a JSON 500, and its session is
    closed: a retry on it would have continued from a reply the client never got."""
    from server import api

    server = make_server()

    def broken(*args, **kwargs):
        raise ValueError("Out of range float values are not JSON compliant")

    monkeypatch.setattr(api, "completion", broken)
    body = json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}).encode()
    status, answer = _post(server.url + "/chat/completions", body, {SESSION_HEADER: "lost-1"})
    assert (status, answer["error"]["type"]) == (500, "internal_error")
    sessions = json.load(urllib.request.urlopen(server.url + "/sessions"))["data"]
    assert [s["id"] for s in sessions] == []


def test_penalties_and_logit_bias_move_the_choice_the_way_openai_documents(make_server) -> None:
    server = make_server()
    c = client(server)
    messages = [{"role": "user", "content": words(50)}]

    def distinct(**kw) -> int:
        r = ask(c, messages, max_tokens=40, temperature=0, logprobs=True, **kw)
        return len({e.token for e in r.choices[0].logprobs.content})

    plain = distinct()
    assert plain < 40  # greedy on the random model repeats itself
    assert distinct(frequency_penalty=2.0) > plain and distinct(presence_penalty=2.0) > plain
    assert distinct(frequency_penalty=-2.0) < plain and distinct(presence_penalty=-2.0) < plain
    first = ask(c, messages, max_tokens=1, temperature=0, logprobs=True).choices[0].logprobs.content[0]
    token = server.scheduler.tokenizer.convert_tokens_to_ids("hello")
    forced = ask(c, messages, max_tokens=5, temperature=1, logit_bias={str(token): 100}).choices[0].message.content
    assert forced == "hello" * 5
    banned_id = server.scheduler.tokenizer.encode(first.token)[0]
    banned = ask(c, messages, max_tokens=1, temperature=0, logprobs=True, logit_bias={str(banned_id): -100})
    assert banned.choices[0].logprobs.content[0].token != first.token
