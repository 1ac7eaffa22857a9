"""finish, run as the sandbox runs it: an executable without .py, called through command_for + bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swe_env.tools import SUBMIT_MARKER, command_for, install_tools


@pytest.fixture
def tools(tmp_path: Path) -> str:
    install_tools(tmp_path / "tools")
    return str(tmp_path / "tools")


def finish(tools: str, **params: str) -> tuple[str, int]:
    proc = subprocess.run(["bash", "-c", command_for("finish", params, tools)], capture_output=True, text=True)
    return proc.stdout + proc.stderr, proc.returncode


def test_submit_prints_the_marker_then_the_result(tools: str) -> None:
    out, rc = finish(tools, command="submit", result="Fixed the parser.\nAll tests pass.")
    assert rc == 0
    assert out == f"{SUBMIT_MARKER}\nFixed the parser.\nAll tests pass.\n"


def test_submit_without_result(tools: str) -> None:
    out, rc = finish(tools, command="submit")
    assert rc == 0
    assert out == SUBMIT_MARKER + "\n"


def test_unknown_command_is_an_error(tools: str) -> None:
    out, rc = finish(tools, command="abort")
    assert rc == 1
    assert out.startswith("ERROR: ")
    assert "submit" in out
    assert SUBMIT_MARKER not in out


def test_marker_matches_the_tool_source() -> None:
    source = (Path(__file__).parents[3] / "swe_env" / "tools" / "finish.py").read_text()
    assert f'MARKER = "{SUBMIT_MARKER}"' in source


@pytest.mark.parametrize("bad", ["--x", "a b"])
def test_unknown_parameter_is_an_error(tools: str, bad: str) -> None:
    out, rc = finish(tools, command="submit", **{bad: "1"})
    assert rc == 1
    assert out.startswith("ERROR: ")
