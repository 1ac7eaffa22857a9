"""The tool contract has one source (agent/tool_specs.py): the tool programs, the tool list and chat's confirm gate
must agree with it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from agent.protocols import ToolCall
from agent.tool_specs import TOOLS
from pipeline.chat import needs_confirmation
from swe_env.tools import TOOL_NAMES, tool_sources


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"tool_{name}", tool_sources()[name])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_programs_are_the_specified_tools() -> None:
    assert set(TOOL_NAMES) == set(TOOLS)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_each_program_takes_exactly_the_specified_parameters(name: str) -> None:
    proc = subprocess.run([sys.executable, str(tool_sources()[name]), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    options = set(re.findall(r"--([a-z_]+)", proc.stdout)) - {"help"}
    assert options == {p.name for p in TOOLS[name].params}


def test_the_editor_commands_are_the_specified_choices() -> None:
    assert tuple(_module("file_editor").COMMANDS) == TOOLS["file_editor"].param("command").choices


def test_chat_asks_before_anything_but_the_read_only_calls() -> None:
    asked = {
        (name, command): needs_confirmation(ToolCall(name, {"command": command} if command else {}))
        for name, command in [("file_editor", c) for c in TOOLS["file_editor"].param("command").choices]
        + [("execute_bash", None), ("search", None), ("finish", "submit")]
    }
    assert [k for k, ask in asked.items() if not ask] == [
        ("file_editor", "view"),
        ("search", None),
        ("finish", "submit"),
    ]
    assert needs_confirmation(ToolCall("no_such_tool", {}))
