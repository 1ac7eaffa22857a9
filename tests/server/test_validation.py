"""Every numeric and boolean field of a chat request is checked: a wrong one is an HTTP 400 whose message names the
field (never a 500, never silently ignored), and the server serves on; unknown fields are ignored, as OpenAI does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from server.api import parse_json
from server.config import ServeError

USER = [{"role": "user", "content": "x"}]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
BAD_CALL = {"type": "function", "function": {"name": "f", "arguments": {}}}  # arguments must be a JSON string

CASES = [  # (fields added to a valid request, what the 400's message must contain)
    ({"temperature": 2.5}, "temperature must be between 0 and 2"),
    ({"temperature": "0.5"}, "temperature must be a finite number"),
    ({"top_p": 1.5}, "top_p must be between 0 and 1"),
    ({"top_p": -0.1}, "top_p must be between 0 and 1"),
    ({"max_tokens": 0}, "max_tokens must be an integer between 1 and"),
    ({"max_tokens": 2**70}, "max_tokens must be an integer between 1 and"),
    ({"max_tokens": True}, "max_tokens must be an integer"),
    ({"max_completion_tokens": 2.5}, "max_completion_tokens must be an integer"),
    ({"presence_penalty": 2.5}, "presence_penalty must be between -2 and 2"),
    ({"frequency_penalty": -3}, "frequency_penalty must be between -2 and 2"),
    ({"seed": 2**64}, "seed must be an integer between"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"logit_bias": {"12": 101}}, "logit_bias[12] must be between -100 and 100"),
    ({"logit_bias": {"x": 1}}, "logit_bias keys must be token ids"),
    ({"logit_bias": [1]}, "logit_bias must be an object"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias token id 99999999 is not in the vocabulary"),
    ({"logprobs": "true"}, "logprobs must be a JSON boolean"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be an integer between 0 and 20"),
    ({"top_logprobs": 3}, "top_logprobs needs logprobs: true"),
    ({"stream": "false"}, "stream must be a JSON boolean"),
    ({"stream": 0}, "stream must be a JSON boolean"),
    ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage must be a JSON boolean"),
    ({"n": 2}, "only n=1"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls must be a JSON boolean"),
    ({"tools": [{"type": "function"}]}, "tools[0] must be"),
    ({"tools": TOOLS + TOOLS}, "tools[1].function.name 'bash' is a duplicate: tools[0] has that name"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice must be"),
    ({"tool_choice": "required"}, "tool_choice 'required' needs 'tools'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "ls"}}}, "names function 'ls'"),
    ({"response_format": {"type": "xml"}}, "response_format must be"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [BAD_CALL]}]},
     "messages[0].tool_calls[0].function.arguments must be a JSON string"),
]  # fmt: skip

NON_FINITE = [  # (raw JSON of a field, its name): not JSON numbers, refused by name
    ('"temperature": NaN', "temperature"),
    ('"top_p": Infinity', "top_p"),
    ('"presence_penalty": -Infinity', "presence_penalty"),
    ('"frequency_penalty": 1e400', "frequency_penalty"),
    ('"max_tokens": 1e400', "max_tokens"),
]


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_every_bad_field_is_a_400_that_names_it_and_unknown_fields_are_ignored(make_server) -> None:
    url = make_server().url + "/chat/completions"
    for fields, message in CASES:
        status, answer = _post(url, json.dumps({"messages": USER, "max_tokens": 2} | fields).encode())
        assert status == 400 and message in answer["error"]["message"], (fields, answer)
    for raw, name in NON_FINITE:
        body = '{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, ' + raw + "}"
        status, answer = _post(url, body.encode())
        assert status == 400 and answer["error"]["message"].startswith(name), (raw, answer)
    unknown = {"user": "me", "metadata": {"a": "b"}, "store": False, "service_tier": "auto", "nexus_unknown": [1]}
    status, answer = _post(url, json.dumps({"messages": USER, "max_tokens": 2} | unknown).encode())
    assert status == 200 and answer["choices"][0]["message"]["role"] == "assistant", answer


def test_bounds_are_taken_and_top_p_zero_is_greedy(make_server) -> None:
    url = make_server().url + "/chat/completions"
    edges = {"temperature": 2, "presence_penalty": -2, "frequency_penalty": 2, "seed": 2**64 - 1, "top_logprobs": 20}
    status, answer = _post(url, json.dumps({"messages": USER, "max_tokens": 3, "logprobs": True} | edges).encode())
    assert status == 200 and len(answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20, answer
    greedy = {"messages": USER, "max_tokens": 6, "temperature": 0}
    variants = ({}, {"temperature": 1.5, "top_p": 0}, {"temperature": 1, "top_p": 0, "seed": 9})
    texts = {_post(url, json.dumps(greedy | v).encode())[1]["choices"][0]["message"]["content"] for v in variants}
    assert len(texts) == 1  # top_p 0 keeps only the most likely token, whatever the temperature


def test_json_parse_refuses_nan_and_infinity_by_field() -> None:
    assert parse_json(b'{"temperature": 0.5, "stop": ["a"]}') == {"temperature": 0.5, "stop": ["a"]}
    with pytest.raises(ServeError, match="^seed must be a finite number"):
        parse_json(b'{"messages": [], "seed": NaN}')
    with pytest.raises(ServeError, match="^logit_bias must be"):
        parse_json(b'{"logit_bias": [1, Infinity]}')
    with pytest.raises(ServeError, match="not valid JSON"):
        parse_json(b'{"temperature": }')
