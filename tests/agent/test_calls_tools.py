"""Native tool calls (agent.calls_tools): the function specs come from the tool contract, and every malformed call is
an observation the model reads, answered by its call's id, in the real loop over a real repo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agent_testlib import DirSandbox, call, scripted

from agent.backends.replay import ReplayModel
from agent.calls import call_format
from agent.calls_tools import NOT_RUN, ToolCalls, parse_text_call, tool_schemas
from agent.environment import SandboxEnvironment
from agent.errors import FormatError
from agent.loop import Agent, AgentConfig
from agent.tool_specs import TOOLS
from agent.trajectory import TrajectoryWriter, load_trajectory


def native(name: str, arguments: str, n: int = 0) -> dict[str, str]:
    return {"id": f"call_{n}", "name": name, "arguments": arguments}


def run_native(sandbox: DirSandbox, tmp_path: Path, replies: list[tuple[str, list[dict[str, str]]]]):
    model = ReplayModel([text for text, _ in replies], tool_calls=[calls for _, calls in replies])
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    agent = Agent(model, SandboxEnvironment(sandbox), AgentConfig(), writer, call_format=ToolCalls())
    return agent, agent.run(ToolCalls().opening("add() subtracts", sandbox.workdir))


def test_schemas_are_the_tool_contract() -> None:
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}
    assert list(schemas) == list(TOOLS)
    for name, spec in TOOLS.items():
        assert list(schemas[name]["properties"]) == [p.name for p in spec.params]
        assert schemas[name]["required"] == [p.name for p in spec.params if p.required]
    assert schemas["file_editor"]["properties"]["command"]["enum"][0] == "view"
    assert schemas["file_editor"]["properties"]["insert_line"]["type"] == "integer"


def test_schemas_refuse_a_parameter_the_tool_lacks() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    finish = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}["finish"]
    jsonschema.validate({"command": "submit"}, finish)
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        jsonschema.validate({"command": "submit", "type": "x"}, finish)


FINISH = ("done", [native("finish", '{"command": "submit"}', 9)])


@pytest.mark.parametrize(
    ("calls", "says"),
    [
        ([native("execute_bash", '{"cmd": "ls"')], "arguments of execute_bash are not valid JSON"),
        ([native("execute_bash", '["ls"]')], "must be a JSON object"),
        ([native("rm_rf", "{}")], "there is no tool named 'rm_rf'"),
        ([native("execute_bash", "{}")], "execute_bash needs the parameter(s) cmd"),
        ([native("execute_bash", '{"command": "ls"}')], "execute_bash has no parameter 'command'"),
        ([native("finish", '{"command": "go"}')], "'go' is not a valid command for finish"),
        ([native("execute_bash", "[" * 100_000)], "arguments of execute_bash are not valid JSON"),  # RecursionError
    ],
)
def test_malformed_native_call_is_an_observation(sandbox: DirSandbox, tmp_path: Path, calls, says: str) -> None:
    agent, res = run_native(sandbox, tmp_path, [("", calls), FINISH])
    assert res.exit_reason == "agent" and says in res.step_records[0]["observation"]
    answer = agent.messages[3]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_0" and says in answer["content"]


def test_every_native_call_is_answered_and_only_one_is_refused(sandbox: DirSandbox, tmp_path: Path) -> None:
    two = [native("execute_bash", '{"cmd": "touch a"}', 0), native("execute_bash", '{"cmd": "touch b"}', 1)]
    agent, res = run_native(sandbox, tmp_path, [("", two), FINISH])
    first, second = agent.messages[3:5]
    assert "more than one tool call" in first["content"] and second == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": NOT_RUN,
    }
    assert not (Path(sandbox.workdir) / "a").exists() and res.exit_reason == "agent"


def test_typed_arguments_reach_the_tool_as_text(sandbox: DirSandbox, tmp_path: Path) -> None:
    view = native(
        "file_editor", json.dumps({"command": "view", "path": f"{sandbox.workdir}/calc.py", "view_range": [2, 2]})
    )
    _, res = run_native(sandbox, tmp_path, [("", [view]), FINISH])
    assert res.step_records[0]["call"]["params"]["view_range"] == "[2, 2]"
    assert "return a - b" in res.step_records[0]["observation"] and "def add" not in res.step_records[0]["observation"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("no call here", "did not call a tool"),
        ("<tool_call>{not json}</tool_call>", "not JSON"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "not JSON"),  # nested past Python's recursion limit
        ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "needs the parameter(s) search_term"),
        ('<tool_call>{"name": "finish", "arguments": {"command": "submit"}}</tool_call><tool_call>{}', "more than one"),
    ],
)
def test_text_calls_fail_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(FormatError, match=re.escape(says)):
        parse_text_call(text)


def test_a_cut_closing_tag_still_parses() -> None:
    parsed = parse_text_call('Look.\n<tool_call>\n{"name": "search", "arguments": {"search_term": "add"}}\n')
    assert (parsed.name, parsed.params, parsed.thought) == ("search", {"search_term": "add"}, "Look.")


def test_a_recorded_tools_run_replays_as_it_ran(sandbox: DirSandbox, tmp_path: Path) -> None:
    replies = [call("execute_bash", cmd="echo hi"), call("finish", command="submit")]
    calls = call_format("tools")
    writer = TrajectoryWriter(tmp_path / "a.jsonl")
    first = Agent(scripted("tools", replies), SandboxEnvironment(sandbox), trajectory=writer, call_format=calls)
    first.run(calls.opening("x", sandbox.workdir))
    first.trajectory.close()
    recorded = load_trajectory(tmp_path / "a.jsonl")
    assert recorded.steps[0]["tool_calls"][0]["name"] == "execute_bash" and recorded.messages() == first.messages
    again = Agent(ReplayModel.from_file(tmp_path / "a.jsonl"), SandboxEnvironment(sandbox), call_format=calls)
    res = again.run(calls.opening("x", sandbox.workdir))
    assert res.exit_reason == "agent" and again.messages == first.messages
