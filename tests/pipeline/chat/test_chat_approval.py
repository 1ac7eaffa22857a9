"""pipeline/chat/approval.py: the approval prompt's answers, a decline's reason, the allowlist's programs."""

from __future__ import annotations

import pytest

from agent.protocols import ToolCall
from pipeline.chat import approval as ap


def bash(cmd: str) -> ToolCall:
    return ToolCall("execute_bash", {"cmd": cmd})


@pytest.mark.parametrize(
    ("text", "kind", "reason"),
    [("y", "yes", ""), ("YES", "yes", ""), ("a", "always", ""), ("n", "no", ""),
     ("n use the venv's pytest", "no", "use the venv's pytest"), ("no  Not That", "no", "Not That"),
     ("whatever", "no", "")],
)  # fmt: skip
def test_answers(text: str, kind: str, reason: str) -> None:
    assert (ap.parse_answer(text).kind, ap.parse_answer(text).reason) == (kind, reason)


def test_a_reason_reaches_the_observation() -> None:
    assert "said why: run only the fast tests" in ap.declined("run only the fast tests")


def test_no_reason_is_the_plain_decline() -> None:
    assert ap.declined("") == ap.DECLINED


@pytest.mark.parametrize(
    ("cmd", "found"),
    [("pytest -q", ["pytest"]), ("python -m pytest -q tests/x.py", ["python -m pytest"]),
     ("/usr/bin/python3 -m pytest", ["python -m pytest"]), ("FOO=1 pytest -x", ["pytest"]),
     ("pytest -q 2>&1 | tail -5", ["pytest", "tail"]), ("cd src && make", ["cd", "make"]),
     ("pytest $(rm -rf /)", None), ("echo `id`", None), ("echo hi > calc.py", None), ("ls 2>/dev/null", None),
     ("echo 'unclosed", None)],
)  # fmt: skip
def test_programs_of_a_command(cmd: str, found: list[str] | None) -> None:
    assert ap.programs(bash(cmd)) == found


def test_another_tool_is_its_name() -> None:
    assert ap.programs(ToolCall("file_editor", {"command": "create"})) == ["file_editor"]


def test_allowed_when_every_program_is_listed() -> None:
    assert ap.allowed(bash("pytest -q | tail -3"), ["pytest", "tail"])


def test_not_allowed_when_one_program_is_not() -> None:
    assert not ap.allowed(bash("pytest -q && rm -rf build"), ["pytest"])
