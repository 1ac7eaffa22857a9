"""parse_call: exactly one well-formed call per reply; every defect is a FormatError the model can read."""

from __future__ import annotations

import pytest

from agent.errors import FormatError
from agent.parsing import parse_call
from agent.prompts import NO_CALL_REMINDER


def test_plain_call_with_thought() -> None:
    call = parse_call("Let me list.\n<function=execute_bash>\n<parameter=cmd>ls -la</parameter>\n</function>")
    assert (call.name, call.params, call.thought) == ("execute_bash", {"cmd": "ls -la"}, "Let me list.")


def test_whitespace_variants_and_multiline_values() -> None:
    text = (
        "<function = file_editor >\n  <parameter = command >str_replace</parameter>\n"
        "  <parameter=path>/testbed/a.py</parameter>\n"
        "<parameter=old_str>\n    def f():\n        return 1\n</parameter>\n"
        "<parameter=new_str>    def f():\n        return 2</parameter>\n</function >"
    )
    call = parse_call(text)
    assert call.params["command"] == "str_replace"
    assert call.params["old_str"] == "def f():\n        return 1"  # stripped like R2E-Gym
    assert call.params["new_str"] == "def f():\n        return 2"


def test_missing_closing_function_tag_is_tolerated() -> None:
    call = parse_call("<function=search>\n<parameter=search_term>add</parameter>\n")
    assert call.params == {"search_term": "add"}


def test_values_may_hold_markup_like_text() -> None:
    text = "<function=execute_bash>\n<parameter=cmd>echo '<function=x>' </parameter>\n</function>"
    assert parse_call(text).params["cmd"] == "echo '<function=x>'"


def test_text_after_the_call_is_ignored() -> None:
    call = parse_call("<function=finish>\n<parameter=command>submit</parameter>\n</function>\nDone!")
    assert call.name == "finish"


def test_no_call_gives_the_fixed_reminder() -> None:
    with pytest.raises(FormatError) as err:
        parse_call("I think the bug is in add().")
    assert str(err.value) == NO_CALL_REMINDER


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("<function=run>\n<parameter=cmd>ls</parameter>\n</function>", "no tool named 'run'"),
        ("<function=>\n</function>", "no tool named '(empty)'"),
        ("<function=execute_bash>\n<parameter=command>ls</parameter>\n</function>", "no parameter 'command'"),
        ("<function=execute_bash>\n</function>", "needs the parameter(s) cmd"),
        ("<function=file_editor>\n<parameter=path>/a</parameter>\n</function>", "needs the parameter(s) command"),
        (
            "<function=file_editor>\n<parameter=command>delete</parameter>\n<parameter=path>/a</parameter>\n</function>",
            "'delete' is not a valid command",
        ),
        ("<function=execute_bash>\n<parameter=cmd>ls\n</function>", "has no closing </parameter>"),
        (
            "<function=execute_bash>\n<parameter=cmd>a</parameter>\n<parameter=cmd>b</parameter>\n</function>",
            "given twice",
        ),
        (
            "<function=execute_bash>\n<parameter=cmd>ls</parameter>\n</function>\n"
            "<function=execute_bash>\n<parameter=cmd>pwd</parameter>\n</function>",
            "more than one function call",
        ),
        ("<function=execute_bash>\n<parameter=cmd>ls</parameter>\n<function=search>\n", "more than one function call"),
        ("<function=execute_bash>\ncmd=ls\n</function>", "malformed"),
        ("<function execute_bash>\n<parameter=cmd>ls</parameter>", "malformed"),
    ],
)
def test_defects_are_format_errors(text: str, expect: str) -> None:
    with pytest.raises(FormatError) as err:
        parse_call(text)
    assert expect in str(err.value)
    assert str(err.value).startswith("ERROR: your reply could not be run")
