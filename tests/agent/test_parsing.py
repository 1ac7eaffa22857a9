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
    assert call.params["old_str"] == "    def f():\n        return 1"  # only the call format's newlines go
    assert call.params["new_str"] == "    def f():\n        return 2"


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


def test_edit_texts_keep_their_indentation_and_blank_lines() -> None:
    """A str_replace whose texts start indented or end with blank lines runs as written: only the newline the call
    format puts after `<parameter=...>` and before `</parameter>` is removed (CRLF too); other values are stripped."""
    old, new = "    return x\n", "    if x:\n        return x\n\n\n"
    text = (
        "<function=file_editor>\n<parameter=command> str_replace </parameter>\n<parameter=path> /testbed/a.py\n"
        f"</parameter>\n<parameter=old_str>\n{old}\n</parameter>\n<parameter=new_str>\r\n{new}\r\n</parameter>\n"
        "</function>"
    )
    call = parse_call(text)
    assert call.params == {"command": "str_replace", "path": "/testbed/a.py", "old_str": old, "new_str": new}
    inline = parse_call("<function=file_editor><parameter=command>create</parameter><parameter=path>/testbed/b"
                        "</parameter><parameter=file_text>  x = 1</parameter></function>")  # fmt: skip
    assert inline.params["file_text"] == "  x = 1"


def test_an_edit_through_the_real_tool_keeps_the_indentation(tmp_path) -> None:
    """End to end with the file_editor program: the replaced lines keep their leading spaces and blank lines."""
    import subprocess
    import sys
    from pathlib import Path

    import swe_env.tools as tools

    target = tmp_path / "a.py"
    target.write_text("def f(x):\n    return x\n")
    reply = (
        f"<function=file_editor>\n<parameter=command>str_replace</parameter>\n<parameter=path>{target}</parameter>\n"
        "<parameter=old_str>\n    return x\n</parameter>\n<parameter=new_str>\n    if x:\n        return x\n\n"
        "</parameter>\n</function>"
    )
    params = parse_call(reply).params
    program = Path(tools.__file__).parent / "file_editor.py"
    argv = [sys.executable, str(program), *(f"--{k}={v}" for k, v in params.items())]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert target.read_text() == "def f(x):\n    if x:\n        return x\n\n"
