"""pipeline/chat/steps.py: a streamed reply shown without its call, and a step's title line."""

from __future__ import annotations

import pytest

from pipeline.chat.steps import ReplyText, step_title

REPLY = "Let me run the tests.\n<function=execute_bash>\n<parameter=cmd>pytest</parameter>\n</function>"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 9, 100])
def test_a_streamed_reply_shows_its_text_and_not_its_call(size: int) -> None:
    text = ReplyText()
    shown = "".join(text.feed(REPLY[i : i + size]) for i in range(0, len(REPLY), size)) + text.end()
    assert shown == "Let me run the tests.\n"


def test_a_hermes_tool_call_is_not_shown() -> None:
    text = ReplyText()
    assert text.feed('ok <tool_call>{"name": "x"}</tool_call>') + text.end() == "ok"


def test_a_lone_angle_bracket_is_shown_at_the_end() -> None:
    text = ReplyText()
    assert text.feed("a < b and <fun") + text.end() == "a < b and <fun"


def test_the_next_reply_starts_fresh() -> None:
    text = ReplyText()
    text.feed(REPLY)
    text.end()
    assert text.feed("next") == "next"


@pytest.mark.parametrize(
    ("call", "title"),
    [
        ({"name": "execute_bash", "params": {"cmd": "python -m pytest -q"}}, "$ python -m pytest -q"),
        ({"name": "file_editor", "params": {"command": "str_replace", "path": "/testbed/pkg/a.py"}}, "edit pkg/a.py"),
        ({"name": "file_editor", "params": {"command": "create", "path": "/testbed/new.txt"}}, "edit new.txt"),
        ({"name": "file_editor", "params": {"command": "view", "path": "/testbed"}}, "view ."),
        ({"name": "search", "params": {"search_term": "def add"}}, "search def add"),
        ({"name": "search", "params": {"search_term": "add", "path": "/testbed/src"}}, "search add in src"),
        ({"name": "finish", "params": {"command": "submit"}}, "finish"),
        (None, "-"),
    ],
)
def test_step_titles(call: dict | None, title: str) -> None:
    assert step_title(call) == title
