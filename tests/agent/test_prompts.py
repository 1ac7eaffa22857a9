"""Prompts: every tool and parameter is described; the issue and working dir reach the instance prompt."""

from __future__ import annotations

from agent.observation import format_observation, steps_line, truncate_middle
from agent.prompts import initial_messages, system_prompt
from agent.protocols import ToolCall, ToolResult
from agent.tool_specs import TOOLS


def test_system_prompt_lists_every_tool_and_parameter_then_the_format() -> None:
    text = system_prompt()
    for spec in TOOLS.values():
        assert f": {spec.name} ---" in text
        for p in spec.params:
            assert f") {p.name} ({'required' if p.required else 'optional'})" in text
    assert text.index("--- END TOOL 4 ---") < text.index("<function=TOOL_NAME>")


def test_instance_prompt_wraps_the_issue() -> None:
    system, user = initial_messages("  Bug: add() subtracts.\n", "/testbed")
    assert system["role"] == "system" and user["role"] == "user"
    assert "<github_issue>\nBug: add() subtracts.\n</github_issue>" in user["content"]
    assert "/testbed" in user["content"]


def test_observation_layouts() -> None:
    bash = ToolCall("execute_bash", {"cmd": "x"})
    expect = "Exit code: 2\nExecution output of [execute_bash]:\nout\n"
    assert format_observation(bash, ToolResult("out\n", 2)) == expect
    view = ToolCall("file_editor", {})
    assert format_observation(view, ToolResult("text", 1)) == "Execution output of [file_editor]:\ntext"
    assert steps_line(3) == "Steps Remaining: 3" and "Submit" in steps_line(0) and "Submit" in steps_line(-2)


def test_truncation_boundary() -> None:
    eighty = "\n".join(str(i) for i in range(80))
    assert truncate_middle(eighty) == eighty
    cut = truncate_middle(eighty + "\n80").splitlines()
    assert cut[:40] == [str(i) for i in range(40)] and cut[-40:] == [str(i) for i in range(41, 81)]
    assert "1 lines cut" in cut[41]
