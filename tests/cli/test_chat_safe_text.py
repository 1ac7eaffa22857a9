"""What chat and the live views print of the agent's and the model's text: exactly what runs, as text.

A command holding rich markup (`[conceal]...[/conceal]`) must not hide part of itself at the approval prompt, `[/]`
must not crash, and no control sequence from a command's output or the model's streamed text may reach the
terminal (ESC c resets it, OSC 52 writes the clipboard, CSI moves the cursor over what was shown, a bare CR lets
the rest of a line overwrite its start, bidi overrides reorder it).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from agent.protocols import ToolCall
from cli.safe_text import StreamFilter, safe_markup, safe_text, terminal_safe
from pipeline import chat as cs

CONCEAL = "echo running tests [conceal]; touch /testbed/HIDDEN [/conceal]"
# (hostile input, what terminal_safe leaves of it)
HOSTILE = [
    ("before\x1bcafter", "beforeafter"),  # ESC c: full terminal reset
    ("up\x1bMover", "upover"),  # ESC M: reverse index
    ("x\x1b[2Jy\x1b[1;1Hz", "xyz"),  # CSI: clear the screen, move the cursor home
    ("\x1b]0;owned title\x07shown", "shown"),  # OSC 0 (window title) ended by BEL
    ("\x1b]0;owned title\x1b\\shown", "shown"),  # ... ended by ST
    ("\x1b]52;c;ZWNobyBwd25lZA==\x07clip", "clip"),  # OSC 52: write the clipboard
    ("\x1bP+q544e\x1b\\dcs", "dcs"),  # DCS ... ST (a terminal query)
    ("\x9b2Jc1", "c1"),  # 8-bit C1 CSI
    ("\x9d0;t\x9cst", "st"),  # 8-bit OSC ... ST
    ("rm -rf /\rls -l", "rm -rf /\nls -l"),  # a bare CR: the second part would overwrite the first
    ("a\r\nb", "a\nb"),
    ("access\u202e\u2066 = 'user'\u2069\u2066", "access = 'user'"),  # bidi override and isolates
    ("\x1b]8;;file:///etc/passwd\x07link\x1b]8;;\x07", "link"),  # OSC 8 hyperlink
    ("\x1b(0lqk\x1b(B", "lqk"),  # charset switch
    ("\x1bNa\x1bOb", "ab"),  # SS2, SS3
    ("bell\x07 back\x08 del\x7f nel\x85 nul\x00", "bell back del nel nul"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),  # kept
    (CONCEAL, CONCEAL),  # markup is text to terminal_safe; rich escaping is safe_markup's / safe_text's
    ("echo [/] ok", "echo [/] ok"),
    ("[link=file:///etc/passwd]x[/link]", "[link=file:///etc/passwd]x[/link]"),
    (":smile: :warning:", ":smile: :warning:"),  # emoji codes: rich replaces them in strings, never in a Text
    ("résumé — 日本語 ✓", "résumé — 日本語 ✓"),  # printable text untouched
    ("\x1b]unterminated title", "unterminated title"),  # no terminator: its text stays visible (last: it would
]  # swallow the next lines up to a BEL as a terminal does)
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # all but \t and \n
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling
SHOWN = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|r)")  # a control character shown as an escape


@pytest.mark.parametrize(("text", "expected"), HOSTILE)
def test_terminal_safe_removes_every_control(text: str, expected: str) -> None:
    assert terminal_safe(text) == expected
    shown = terminal_safe(text, visible=True)  # the approval prompt's form: every control shown, nothing removed
    assert not CONTROL.search(shown) and SHOWN.sub("", shown) == CONTROL.sub("", text)
    assert len(SHOWN.findall(shown)) == len(CONTROL.findall(text))


@pytest.mark.parametrize(("text", "expected"), HOSTILE)
def test_markup_and_text_show_it_verbatim(text: str, expected: str) -> None:
    assert Text.from_markup(safe_markup(text), emoji=False).plain == expected  # `[/]` raised, [conceal] hid text
    assert safe_text(text).plain == expected
    assert safe_text(text, visible=True).plain == terminal_safe(text, visible=True)


@pytest.mark.parametrize(("text", "expected"), HOSTILE)
def test_a_stream_cut_anywhere_filters_as_a_whole(text: str, expected: str) -> None:
    for cut in range(len(text) + 1):
        f = StreamFilter()
        assert f.feed(text[:cut]) + f.feed(text[cut:]) + f.flush() == expected, cut
    f = StreamFilter()
    assert "".join(f.feed(c) for c in text) + f.flush() == expected


def test_escapes_are_visible_and_marked_in_the_approval_form() -> None:
    assert terminal_safe("a\x1b[2Jb\r\nc\u202ed\te", visible=True) == "a\\x1b[2Jb\\r\nc\\u202ed\te"
    styled = safe_text("a\x1bcb", visible=True)
    assert styled.plain == "a\\x1bcb" and [styled.plain[s.start : s.end] for s in styled.spans] == ["\\x1b"]


def test_describe_shows_every_parameter_whole() -> None:
    text = "".join(f"line {n}: x = {n} * 2\n" for n in range(60))  # far longer than the 300 characters shown before
    call = ToolCall("file_editor", {"command": "create", "path": "/testbed/a.py", "file_text": text})
    shown = cs.describe(call)
    assert shown.startswith("file_editor command='create' path='/testbed/a.py'\n  file_text:\n")
    assert all(f"\n    line {n}: x = {n} * 2\n" in shown for n in range(60))
    assert cs.describe(ToolCall("execute_bash", {"cmd": "ls", "timeout": "5"})) == "execute_bash cmd='ls' timeout='5'"


def _consoles() -> tuple[Console, Console]:
    """A styled terminal console and one without colours, both recorded, their bytes kept in `.file`."""
    styled = Console(file=io.StringIO(), record=True, force_terminal=True, color_system="truecolor", width=120)
    plain = Console(file=io.StringIO(), record=True, force_terminal=True, color_system=None, width=120)
    return styled, plain


def _check_output(styled: Console, plain: Console) -> str:
    """Nothing but rich's own styling reached either terminal; the text shown."""
    assert not CONTROL.search(SGR.sub("", styled.file.getvalue())) and "\x1b[" in styled.file.getvalue()
    assert not CONTROL.search(plain.file.getvalue())
    return plain.export_text()


def _shown(text: str) -> list[str]:
    """The pieces of `text` that a console shows whole (tabs expand, lines wrap only at their spaces)."""
    return [part for line in terminal_safe(text).splitlines() for part in line.split("\t") if part.strip()]


HOSTILE_LINES = "\n".join(text for text, _ in HOSTILE)


@pytest.mark.usefixtures("bwrap_installed")
def test_chat_shows_what_runs(
    tmp_path: Path, repo: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """On a real Chat: the approval prompt, a step's tool and observation, the streamed reply, the report, notes."""
    from chatlib import view

    from agent.loop import AgentResult
    from kvstore.session.session import Session, SessionConfig
    from pipeline.chat.local import LocalConversation
    from pipeline.chat.views import Turn

    session = Session.open(SessionConfig(model=str(tiny_model_dir), policy="full"))
    state = cs.ChatState(repo=str(repo), config=session.config.to_dict())
    monkeypatch.setattr("builtins.input", lambda prompt="": "n")
    consoles = _consoles()
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = view(consoles[0], tmp_path, state, LocalConversation(tmp_path, session, state.config), sandbox)
        for console in consoles:
            chat.console = console
            for cmd in (CONCEAL, "echo [/] ok", "printf '\x1b]0;x\x07' \r echo :smile: hi\u202e"):
                assert "declined" in chat.runner.confirm(ToolCall("execute_bash", {"cmd": cmd}))
            call = {"name": "execute_bash[/][conceal]x[/conceal]", "params": {"cmd": "x"}}
            record = {"step": 1, "call": call, "observation": HOSTILE_LINES, "submitted": False, "stats": {}}
            chat.runner._on_step(record)
            chat._report(Turn("x", "done", AgentResult("submitted", "", 1, 0.1, submission=HOSTILE_LINES)))
            chat._event({"kind": "note", "text": "the server says [/] \x1b[2J"})
            for text, _ in HOSTILE:
                chat._stream(text[: len(text) // 2])
                chat._stream(text[len(text) // 2 :])
            chat._end_stream()
            assert capsys.readouterr().out == "".join(expected for _, expected in HOSTILE)  # the streamed reply
        chat.runner.writer.close()
    text = _check_output(*consoles)
    assert f"run? $ {CONCEAL}\n" in text and "touch /testbed/HIDDEN" in text  # what is shown is what runs
    assert "run? $ echo [/] ok\n" in text
    assert "run? $ printf '\\x1b]0;x\\x07' \\r echo :smile: hi\\u202e\n" in text
    assert "step 1 execute_bash[/][conceal]x[/conceal]\n" in text and "the server says [/]" in text
    observation, submission = text.split("\ndone (")
    head = "\n".join(terminal_safe(HOSTILE_LINES).splitlines()[:6])  # a long output: its head, its tail, /show N
    assert all(part in observation for part in _shown(head)) and "lines hidden (/show 1)" in observation
    assert all(part in submission for part in _shown(HOSTILE_LINES))


def test_live_views_show_commands_and_output_as_text() -> None:
    from cli.live import EvalView, SolveView
    from cli.solve_cmd import print_summary

    consoles = _consoles()
    for console in consoles:
        view = SolveView(console, "task[/] \x1bc", 5)
        view.on_step({"step": 1, "call": {"name": "[/]\x1b]0;t\x07", "params": {}}, "stats": {}, "model_s": 0.1,
                      "env_s": 0.1, "observation": "Exit code: [/x]\x1b[2J\n" + HOSTILE_LINES})  # fmt: skip
        console.print(view.render(final=True))
        batch = EvalView(console, 1)
        batch.event({"kind": "start", "worker": "w[/]", "instance_id": "i\x1b[2J[/]"})
        batch.event({"kind": "step", "worker": "w[/]", "step": 1, "tool": "[conceal]t[/conceal]\x9b2J"})
        console.print(batch.render())
        totals = dict.fromkeys(["prefill_tokens", "generated_tokens", "evicted_tokens", "peak_held_tokens"], 0)
        totals |= {"peak_held_bytes": 0, "prefill_s": 0.0, "decode_s": 0.0, "evict_s": 0.0}
        report = {"instance_id": "id[/]", "status": "error", "exit_reason": "x", "steps": 1, "patch_lines": 0,
                  "agent_s": 0.0, "grade_s": 0.0, "wall_s": 0.0, "turns": [], "totals": totals,
                  "grade": {"error": "the tests said [/] \x1b]52;c;eA==\x07 boom"}}  # fmt: skip
        print_summary(console, report)
    text = _check_output(*consoles)
    for shown in ("task[/]", " [/] ", "[/x]", "w[/]", "i[/]", "[conceal]t[/conceal]", "id[/]: error", "said [/]  boom"):
        assert shown in text, shown
