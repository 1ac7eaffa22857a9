"""Property-based request bodies against a real server on the tiny model: every field with values of every JSON type,
deep nesting, huge numbers, invalid unicode, long and many stops, many messages, tool-call histories and schemas.
The invariant: every answer is 2xx or 4xx, never 5xx, and the server still answers a normal request afterwards; and
a concurrent stream's largest gap between chunks stays under a second while hostile bodies arrive. Reproducible in
CI: derandomized, no example database, a fixed number of examples each."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from server import limits

pytest.importorskip("hypothesis", reason="hypothesis is a test dependency: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(
    max_examples=120, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

USER = {"role": "user", "content": "m"}
# sizes around the limits and the parser's own breaking points (recursion ~1,000 levels; int() 4,300 digits), drawn
# from a list: hypothesis' integers seldom reach the far end of a wide range
DEPTHS = st.one_of(st.sampled_from([limits.MAX_DEPTH - 1, limits.MAX_DEPTH, 1000, 1200, 3000]), st.integers(1, 40))
SCHEMA_DEPTHS = st.one_of(st.sampled_from([31, 32, 33, 60, 150, 250]), st.integers(0, 10))  # JSON depth: twice as deep
DIGITS = st.one_of(st.sampled_from([limits.MAX_DIGITS, limits.MAX_DIGITS + 1, 4300, 4301, 5000]), st.integers(1, 30))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)  # fmt: skip
anything = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8
)


def schema(depth: int) -> dict:
    value: dict = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"a": value}, "required": ["a"]}
    return value


arguments = st.one_of(
    st.just("{}"), st.just('{"command": "ls"}'), st.text(max_size=30),
    DEPTHS.map(lambda d: "[" * d + "]" * d),
    DIGITS.map(lambda n: '{"n": ' + "9" * n + "}"),
    st.just('{"a": "\\ud800"}'), anything.map(json.dumps),
)  # fmt: skip
tool_call = st.fixed_dictionaries(
    {"id": st.text(max_size=8), "type": st.just("function"),
     "function": st.fixed_dictionaries({"name": st.sampled_from(["bash", "f", ""]), "arguments": arguments})}
) | anything  # fmt: skip
content = st.one_of(st.text(max_size=40), st.none(), anything, st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=10)}), max_size=2))  # fmt: skip
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "tool", "x"]), "content": content}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": content,
                           "tool_calls": st.lists(tool_call, max_size=2)}),
    anything,
)  # fmt: skip
messages = st.one_of(
    st.lists(message, min_size=1, max_size=6),
    st.sampled_from([limits.MAX_MESSAGES, limits.MAX_MESSAGES + 1, 100_000]).map(lambda n: [USER] * n),
    anything,
)  # fmt: skip
stops = st.one_of(
    st.none(), st.text(max_size=5), st.lists(st.text(max_size=8), max_size=6), anything,
    st.sampled_from([limits.MAX_STOP_CHARS, limits.MAX_STOP_CHARS + 1, 400_000]).map(lambda n: ["s" * n] * 4),
)  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties":
          {"command": {"type": "string"}}}}}]  # fmt: skip
tools = st.one_of(
    st.none(), anything,
    SCHEMA_DEPTHS.map(lambda d: [{"type": "function", "function": {"name": "f", "parameters": schema(d)}}]),
    st.just(TOOLS),
)  # fmt: skip
response_format = st.one_of(
    st.none(), anything, st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
    SCHEMA_DEPTHS.map(lambda d: {"type": "json_schema", "json_schema": {"name": "n", "schema": schema(d)}}),
)  # fmt: skip
small = st.integers(1, 3)
FIELDS = {
    "messages": messages, "max_tokens": st.one_of(small, anything), "max_completion_tokens": st.one_of(small, scalars),
    "temperature": st.one_of(st.floats(0, 2), scalars), "top_p": st.one_of(st.floats(0, 1), scalars),
    "stop": stops, "seed": st.one_of(st.integers(-(2**63), 2**64), scalars), "logprobs": scalars,
    "top_logprobs": st.one_of(st.integers(0, 25), scalars), "logit_bias": st.one_of(anything, st.dictionaries(
        st.integers(0, 200_000).map(str), st.floats(-150, 150), max_size=4)), "n": scalars,
    "presence_penalty": scalars, "frequency_penalty": scalars, "stream": st.one_of(st.booleans(), scalars),
    "stream_options": anything, "tools": tools, "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]),
    anything, st.just({"type": "function", "function": {"name": "bash"}})), "parallel_tool_calls": scalars,
    "response_format": response_format, "session_id": st.one_of(st.none(), st.text(max_size=10)),
    "model": st.one_of(st.none(), st.just("tiny-qwen3"), st.text(max_size=5)),
}  # fmt: skip
bodies = st.fixed_dictionaries(
    {"messages": messages, "max_tokens": small},
    optional={k: v for k, v in FIELDS.items() if k not in ("messages", "max_tokens")},
)
bodies = st.one_of(bodies, st.fixed_dictionaries({}, optional=FIELDS))  # fmt: skip


hostile_call = st.fixed_dictionaries(
    {"id": st.text(max_size=8), "type": st.just("function"),
     "function": st.fixed_dictionaries({"name": st.sampled_from(["bash", "f"]), "arguments": arguments})}
)  # fmt: skip
histories = st.builds(
    lambda calls, reply, stream: {
        "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": reply, "tool_calls": calls},
                     *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls),
                     {"role": "user", "content": "next"}],
        "max_tokens": 2, "stream": stream, "tools": TOOLS,
    },
    st.lists(hostile_call, min_size=1, max_size=3), st.one_of(st.none(), st.text(max_size=10)), st.booleans(),
)  # fmt: skip


def raw_bodies() -> st.SearchStrategy[bytes]:
    """Bodies no JSON encoder writes: deep nesting, numbers of thousands of digits, lone surrogates, broken UTF-8."""
    user = b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "extra": '
    return st.one_of(
        DEPTHS.map(lambda d: user + b"[" * d + b"]" * d + b"}"),
        DEPTHS.map(lambda d: user + b"{\"a\": " * d + b"1" + b"}" * d + b"}"),
        DIGITS.map(lambda n: user + b"7" * n + b"}"),
        DIGITS.map(lambda n: user + b"-0." + b"7" * n + b"e" + b"9" * min(n, 400) + b"}"),
        st.sampled_from([b"\\ud800", b"\\udfff", b"\\ud800\\u0041", b"\\\\ud800", b"\\ud83d\\ude00"]).map(
            lambda s: b'{"messages": [{"role": "user", "content": "' + s + b'"}], "max_tokens": 2}'),
        st.binary(max_size=64).map(lambda b: user + b'"' + b + b'"}'),
        st.binary(max_size=200), st.text(max_size=100).map(str.encode),
    )  # fmt: skip


def check_answer(http: httpx.Client, body: bytes) -> None:
    r = http.post("/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (body[:300], r.status_code, r.text[:500])
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        assert "data: [DONE]" in r.text or '"error"' in r.text, r.text[-300:]


def served_normally(http: httpx.Client) -> bool:
    r = http.post("/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    return r.status_code == 200 and http.get(str(http.base_url).removesuffix("/v1/") + "/health").status_code == 200


@pytest.mark.slow
def test_fuzzed_fields_never_get_a_5xx(make_server) -> None:
    server = make_server(max_sessions=8, queue_timeout_s=60)
    with httpx.Client(base_url=server.url, timeout=120) as http:

        @FUZZ
        @given(bodies)
        def one(body: dict) -> None:
            check_answer(http, json.dumps(body).encode())

        one()
        assert served_normally(http)


@pytest.mark.slow
def test_fuzzed_tool_call_histories_never_get_a_5xx(make_server) -> None:
    """Well-formed histories whose calls' arguments are hostile (deep, huge numbers, lone surrogates, not JSON), sent
    twice: the second time the session's transcript is matched against them."""
    server = make_server(max_sessions=8)
    with httpx.Client(base_url=server.url, timeout=120) as http:

        @FUZZ
        @given(histories)
        def one(body: dict) -> None:
            for _ in range(2):
                check_answer(http, json.dumps(body).encode())

        one()
        assert served_normally(http)


@pytest.mark.slow
def test_fuzzed_raw_bodies_never_get_a_5xx(make_server) -> None:
    server = make_server()
    with httpx.Client(base_url=server.url, timeout=120) as http:

        @FUZZ
        @given(raw_bodies())
        def one(body: bytes) -> None:
            check_answer(http, body)

        one()
        assert served_normally(http)


HOSTILE = [
    b'{"messages": [{"role": "user", "content": "x"}], "m": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    b"[" + b"[], " * 7_000_000 + b"[]]",  # 28 MB of values
    json.dumps({"messages": [{"role": "user", "content": "x"}], "stop": ["s" * 400_000] * 4}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "x"}] * 100_000}).encode(),
    json.dumps(
        {
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema(60)}},
        }
    ).encode(),  # fmt: skip
    b'{"messages": [{"role": "user", "content": "x"}], "seed": ' + b"7" * 5000 + b"}",
]


@pytest.mark.slow
def test_a_stream_keeps_flowing_while_hostile_bodies_arrive(make_server) -> None:
    server = make_server()
    times: list[float] = []
    body = {"messages": [{"role": "user", "content": "tell"}], "max_tokens": 400, "stream": True, "temperature": 1.0}

    def stream() -> None:
        with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    times.append(time.monotonic())

    streamer = threading.Thread(target=stream)
    streamer.start()
    while len(times) < 5:
        time.sleep(0.01)
    began = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=120) as http:
        for hostile in HOSTILE:
            assert http.post("/chat/completions", content=hostile).status_code == 400
    ended = time.monotonic()
    streamer.join(300)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b >= began and a <= ended]
    assert gaps and max(gaps) < 1.0, max(gaps)
