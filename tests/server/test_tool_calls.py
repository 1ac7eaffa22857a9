"""OpenAI tool calling through the real `openai` client: tools rendered by the model's own chat template, history
with tool calls and tool results continuing its session, calls forced by tool_choice (decoding constrained by the
grammar engine) parsed into message.tool_calls, JSON replies under response_format, and a template without tool
support refused."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest
import torch
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, serve_config, tiny_chat_model
from transformers import AutoTokenizer

from server import api
from server.app import Server
from server.messages import Said, continues, normalize
from server.tools import parse_reply

SYSTEM = {"role": "system", "content": "You run shell commands for the user."}
USER = {"role": "user", "content": "List the files, then count them."}
PARAMS = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "maxLength": 16},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
        "mode": {"enum": ["fast", "slow"]},
    },
    "required": ["command", "count", "mode"],
    "additionalProperties": False,
}
DONE = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": PARAMS}},
    {"type": "function", "function": {"name": "done", "description": "Finish.", "parameters": DONE}},
]


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def ask(c: openai.OpenAI, messages: list[dict], **kw):
    return c.chat.completions.create(model="tiny-qwen3", messages=messages, **({"max_tokens": 120} | kw))


def check_bash_arguments(arguments: str) -> None:
    """The arguments follow PARAMS (checked by hand: every constraint of the schema)."""
    args = json.loads(arguments)
    assert set(args) == {"command", "count", "mode"}, args
    assert isinstance(args["command"], str) and len(args["command"]) <= 16
    assert isinstance(args["count"], int) and 0 <= args["count"] <= 9 and args["mode"] in ("fast", "slow")


def test_history_with_tool_calls_renders_through_the_template_and_continues_its_session(make_server) -> None:
    server = make_server()
    c = client(server)
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    messages = [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt b.txt"}]  # fmt: skip
    r1 = ask(c, messages, tools=TOOLS, max_tokens=4, temperature=0)
    tok = qwen_tokenizer()
    plain = [m | {"content": m["content"] or ""} for m in messages]  # the template wants a string
    whole = tok.apply_chat_template(plain, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert r1.usage.prompt_tokens == len(tok(whole, add_special_tokens=False)["input_ids"])  # the template's tokens
    n1 = r1.model_extra["nexus"]
    messages += [{"role": "assistant", "content": r1.choices[0].message.content}, {"role": "user", "content": "more"}]
    r2 = ask(c, messages, tools=TOOLS, max_tokens=4, temperature=0)
    n2 = r2.model_extra["nexus"]
    assert n2["continued"] and n2["session_id"] == n1["session_id"] and n2["turn"]["prefill_tokens"] < 20
    r3 = ask(c, messages, tools=TOOLS[:1], max_tokens=4, temperature=0)  # other tools: another conversation
    assert not r3.model_extra["nexus"]["continued"] and r3.model_extra["nexus"]["session_id"] != n1["session_id"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_required_call_is_constrained_parsed_and_its_result_continues_the_session(make_server, seed) -> None:
    """On a random-weight model, the forced call is a tool_calls entry whose arguments follow the schema; sent back
    with the tool's result, only the result (and the generation prompt) is prefilled."""
    server = make_server()
    c = client(server)
    choice = "required" if seed else {"type": "function", "function": {"name": "bash"}}
    r1 = ask(c, [SYSTEM, USER], tools=TOOLS, tool_choice=choice, temperature=1, seed=seed)
    choice1 = r1.choices[0]
    assert choice1.finish_reason == "tool_calls" and len(choice1.message.tool_calls) == 1, choice1
    call = choice1.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function" and call.function.name in ("bash", "done")
    if call.function.name == "bash":
        check_bash_arguments(call.function.arguments)
    else:
        assert json.loads(call.function.arguments) in ({"ok": True}, {"ok": False})
    result = {"role": "tool", "tool_call_id": call.id, "content": "a.txt b.txt"}
    history = [SYSTEM, USER, choice1.message.model_dump(exclude_none=True), result]
    r2 = ask(c, history, tools=TOOLS, max_tokens=3, temperature=0)
    n2 = r2.model_extra["nexus"]
    assert n2["continued"] and n2["session_id"] == r1.model_extra["nexus"]["session_id"]
    assert n2["turn"]["prefill_tokens"] < 25 and r2.usage.prompt_tokens_details.cached_tokens > 200


def test_a_streamed_call_arrives_as_delta_tool_calls(make_server) -> None:
    server = make_server()
    c = client(server)
    chunks = list(ask(c, [SYSTEM, USER], tools=TOOLS, tool_choice={"type": "function", "function": {"name": "bash"}},
                      temperature=1, seed=4, stream=True))  # fmt: skip
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    deltas = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert "<tool_call>" not in text and len(deltas) == 1 and deltas[0].id.startswith("call_")
    assert deltas[0].function.name == "bash" and deltas[0].index == 0
    check_bash_arguments(deltas[0].function.arguments)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


def test_response_format_json_schema_and_json_object_are_followed(make_server) -> None:
    server = make_server()
    c = client(server)
    schema = {"name": "call", "schema": PARAMS}
    for seed in (0, 1):
        r = ask(c, [USER], response_format={"type": "json_schema", "json_schema": schema}, temperature=1, seed=seed)
        assert r.choices[0].finish_reason == "stop"
        check_bash_arguments(r.choices[0].message.content)
    r = ask(c, [USER], response_format={"type": "json_object"}, temperature=0, max_tokens=200)
    if r.choices[0].finish_reason == "stop":  # a random model may ramble past max_tokens inside its object
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")


def test_a_template_without_tool_support_takes_tools_by_the_fallback_template(tmp_path) -> None:
    torch.set_num_threads(1)
    plain = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    plain.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    server = Server(tiny_chat_model(), plain, serve_config(port=0, model="tiny-qwen3", park_dir=tmp_path)).start()
    try:
        c = client(server)
        models = json.load(urllib.request.urlopen(server.url + "/models"))["data"][0]["nexus"]
        assert models["tool_template"] == "fallback"  # issue 61: a 400 before
        r = ask(c, [USER], tools=TOOLS, max_tokens=2)
        tokens = server.registry.entries[r.model_extra["nexus"]["session_id"]].session.tokens
        text = plain.decode(tokens)
        assert text.startswith("<|im_start|>system\n# Tools\n") and '"name": "bash"' in text and "<tool_call>" in text
        assert ask(c, [USER], max_tokens=2).choices[0].message.role == "assistant"  # without tools as before
    finally:
        server.close()


def test_replies_parse_from_the_native_syntax() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
    text += '<tool_call>\n{"name": "done", "arguments": "{}"}\n</tool_call>'
    content, calls = parse_reply(text)
    assert content == "Let me look." and [c["function"]["name"] for c in calls] == ["bash", "done"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls"} and calls[1]["function"]["arguments"]
    assert calls[0]["id"] != calls[1]["id"] and all(c["id"].startswith("call_") for c in calls)
    assert parse_reply("<tool_call>\n{not json}\n</tool_call>") == ("<tool_call>\n{not json}\n</tool_call>", [])
    assert parse_reply('<tool_call>\n{"name": 5}\n</tool_call>')[1] == []
    assert parse_reply("plain text") == ("plain text", [])


def test_a_returned_call_matches_what_the_client_sends_back() -> None:
    reply = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls", "count": 2}}\n</tool_call>'
    content, calls = parse_reply(reply)
    first = normalize([SYSTEM, USER], TOOLS)
    transcript = [Said.of(m) for m in first] + [Said.of({"role": "assistant", "content": content or "",
                                                         "tool_calls": calls})]  # fmt: skip
    echoed = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_other", "type": "function",
         "function": {"name": "bash", "arguments": '{"count":2,  "command":"ls"}'}}]}  # fmt: skip
    tail = [{"role": "tool", "tool_call_id": "call_other", "content": "a.txt"}]
    assert continues(transcript, normalize([SYSTEM, USER, echoed, *tail], TOOLS))
    echoed["tool_calls"][0]["function"]["arguments"] = '{"command": "rm"}'
    assert not continues(transcript, normalize([SYSTEM, USER, echoed, *tail], TOOLS))
    echoed["tool_calls"][0]["function"]["arguments"] = '{"command": "ls", "count": 2}'
    assert continues(transcript, normalize([SYSTEM, USER, echoed, *tail], TOOLS))
    assert not continues(transcript, normalize([SYSTEM, USER, echoed, *tail], TOOLS[:1]))  # other tools


def test_chunk_stream_shapes_parse_with_the_sdk_types() -> None:
    """The streamed chunks (api.ChunkStream) of a reply with a call are ChatCompletionChunk objects to the SDK."""
    from openai.types.chat import ChatCompletionChunk

    body = {
        "messages": [USER],
        "tools": TOOLS,
        "logprobs": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = api.parse_request(body, None, serve_config(model="tiny-qwen3"))
    stream = api.ChunkStream(req, "chatcmpl-1", "tiny-qwen3")
    chunks = stream.opening() + stream.text("Sure. ") + stream.text("<tool") + stream.text("_call>\n{")
    content, calls = parse_reply('Sure. <tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>')
    entry = {"token": "x", "logprob": -1.0, "bytes": [120], "top_logprobs": []}
    result = {"text": content, "tool_calls": calls, "finish_reason": "tool_calls", "logprobs": [entry],
              "prompt_tokens": 5, "completion_tokens": 9, "cached_tokens": 0, "nexus": {}}  # fmt: skip
    chunks += stream.done(result)
    parsed = [ChatCompletionChunk.model_validate(ch) for ch in chunks]
    text = "".join(p.choices[0].delta.content or "" for p in parsed if p.choices)
    assert text == "Sure. " and parsed[-1].usage.completion_tokens == 9
    tool_deltas = [tc for p in parsed if p.choices for tc in p.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name, d.function.arguments) for d in tool_deltas] == [(0, "done", "{}")]
    assert [p.choices[0].logprobs.content[0].logprob for p in parsed if p.choices and p.choices[0].logprobs] == [-1.0]


def test_parallel_tool_calls_false_returns_the_first_call_only() -> None:
    text = 'Two.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\nThen.\n'
    text += '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
    body, config = {"messages": [USER], "tools": TOOLS}, serve_config(model="tiny-qwen3")
    both = api.answer(api.parse_request(body, None, config), text, "stop", [], None)
    one = api.answer(api.parse_request(body | {"parallel_tool_calls": False}, None, config), text, "stop", [], None)
    assert [c["function"]["name"] for c in both["tool_calls"]] == ["bash", "done"] and "Then." in both["text"]
    assert [c["function"]["name"] for c in one["tool_calls"]] == ["bash"] and one["text"] == "Two."
    assert one["finish_reason"] == "tool_calls"
    assert api.parse_request(body | {"parallel_tool_calls": True}, None, config).parallel_tool_calls


def test_the_grammar_compiles_on_the_request_side_and_a_bad_one_is_a_400_before_any_session(make_server) -> None:
    from kvstore.session.grammar import Constraint

    server = make_server()
    body = {"messages": [USER], "tools": TOOLS, "tool_choice": "required", "max_tokens": 60, "temperature": 0}
    job = server.submit(api.parse_request(body, None, server.config))
    assert isinstance(job.constraint, Constraint)  # compiled here, on the caller's thread: the scheduler only runs it
    kind, result = job.events.get(timeout=120)
    while kind == "text":
        kind, result = job.events.get(timeout=120)
    assert kind == "done" and len(result["tool_calls"]) == 1
    sessions = len(server.sessions_info())
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(("}}}
    with pytest.raises(openai.BadRequestError, match="does not compile"):
        ask(client(server), [{"role": "user", "content": "another conversation"}], response_format=bad)
    assert len(server.sessions_info()) == sessions  # refused before a session was opened
