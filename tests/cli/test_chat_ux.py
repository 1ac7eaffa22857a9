"""What a chat turn shows, on a real repo in a real bubblewrap sandbox with a scripted model that streams its
replies: the model's text without its call, one title line per step, an edit's diff once, the summary once."""

from __future__ import annotations

from pathlib import Path

import pytest
from chatlib import bash, call, failing_repo, finish, open_chat, shown

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
EDIT = {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "return a - b", "new_str": "return a + b"}
SUMMARY = "fixed add: it subtracted"


@pytest.fixture
def turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """(what the console printed, what was streamed) for one turn: a command, an edit, finish."""
    repo = failing_repo(tmp_path)
    replies = [bash("cat calc.py"), call("file_editor", **EDIT), finish(SUMMARY)]
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, replies, sandbox, stream=True)
        chat.request("fix add")
        chat.runner.writer.close()
        return shown(chat), capsys.readouterr().out


def test_the_streamed_text_is_the_models_not_its_call(turn: tuple[str, str]) -> None:
    assert "<function=" not in turn[1] and "<parameter=" not in turn[1]


def test_the_models_free_text_is_shown(turn: tuple[str, str]) -> None:
    assert turn[1].count("Next: execute_bash.") == 1


def test_a_command_step_shows_the_command_line(turn: tuple[str, str]) -> None:
    assert "step 1 $ cat calc.py" in turn[0]


def test_an_edit_step_shows_its_path(turn: tuple[str, str]) -> None:
    assert "step 2 edit calc.py" in turn[0]


def test_an_edit_shows_its_diff_once_in_the_step(turn: tuple[str, str]) -> None:
    step = turn[0][turn[0].index("step 2") : turn[0].index("step 3")]
    assert step.count("+    return a + b") == 1


def test_an_edit_step_does_not_show_the_editors_snippet(turn: tuple[str, str]) -> None:
    assert "cat -n" not in turn[0]


def test_the_summary_is_shown_once(turn: tuple[str, str]) -> None:
    assert (turn[0] + turn[1]).count(SUMMARY) == 1


@pytest.fixture
def two_turns(tmp_path: Path):
    """A chat after two turns: the first fixed add, the second added notes.txt."""
    repo = failing_repo(tmp_path)
    note = call("file_editor", command="create", path="/testbed/notes.txt", file_text="n\n")
    replies = [call("file_editor", **EDIT), finish(), note, finish()]
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, replies, sandbox)
        chat.request("fix add")
        chat.request("write notes")
        shown(chat)
        yield chat, repo
        chat.runner.writer.close()


def test_checkpoints_lists_every_turn_most_recent_first(two_turns) -> None:
    from cli.chat_commands import run_command

    run_command(two_turns[0], "/checkpoints")
    out = shown(two_turns[0])
    assert out.index("turn 2") < out.index("'fix add'  calc.py")


def test_a_second_undo_goes_back_one_more_turn(two_turns) -> None:
    from cli.chat_commands import run_command

    chat, repo = two_turns
    run_command(chat, "/undo")
    run_command(chat, "/undo")
    assert "return a - b" in (repo / "calc.py").read_text()


def test_undo_n_goes_back_n_turns(two_turns) -> None:
    from cli.chat_commands import run_command

    chat, repo = two_turns
    run_command(chat, "/undo 2")
    assert "undo: turn 1: restored 1: calc.py" in shown(chat)


def test_the_model_is_told_of_every_undone_turn(two_turns) -> None:
    from cli.chat_commands import run_command

    run_command(two_turns[0], "/undo 2")
    assert "calc.py, notes.txt" in two_turns[0].runner.state.notice


def _observation(chat, step: int) -> str:
    import json

    records = [json.loads(line) for line in (chat.runner.folder / cs.TRAJECTORY_FILE).read_text().splitlines()]
    return next(r["observation"] for r in records if r.get("step") == step)


@pytest.fixture
def confirm_chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(a chat in confirm mode on a repo, the answers its approval prompt will read)."""
    repo = failing_repo(tmp_path)
    answers: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": answers.pop(0))
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("rm calc.py"), bash("ls"), bash("ls -a"), finish()],
                         sandbox, yolo=False)  # fmt: skip
        yield chat, answers
        chat.runner.writer.close()


def test_a_decline_with_a_reason_reaches_the_model(confirm_chat) -> None:
    chat, answers = confirm_chat
    answers += ["n keep calc.py, edit it instead", "y", "y"]
    chat.request("clean up")
    assert "said why: keep calc.py, edit it instead" in _observation(chat, 1)


def test_always_allows_the_program_for_the_session(confirm_chat) -> None:
    chat, answers = confirm_chat
    answers += ["n", "a"]  # ls -a then runs without a question (no answer is left)
    chat.request("look")
    assert cs.ChatState.load(chat.runner.folder).allow == ["ls"]


def test_allowlist_shows_and_clears(confirm_chat) -> None:
    from cli.chat_commands import run_command

    chat, answers = confirm_chat
    answers += ["n", "a"]
    chat.request("look")
    run_command(chat, "/allowlist clear")
    run_command(chat, "/allowlist")
    assert "allowlist is empty" in shown(chat)


def test_piped_input_refuses_calls_that_need_approval(tmp_path: Path) -> None:
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("rm calc.py"), finish()], sandbox, yolo=False)
        chat.runner.approve = None
        chat.request("clean up")
        chat.runner.writer.close()
    assert (repo / "calc.py").exists() and "reads its input from a pipe" in _observation(chat, 1)


def test_piped_input_runs_what_the_allowlist_covers(tmp_path: Path) -> None:
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("rm calc.py"), finish()], sandbox, yolo=False)
        chat.runner.approve, chat.runner.state.allow = None, ["rm"]
        chat.request("clean up")
        chat.runner.writer.close()
    assert not (repo / "calc.py").exists()


def test_an_unknown_command_is_named(tmp_path: Path) -> None:
    from cli.chat_commands import run_command

    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [], sandbox)
        run_command(chat, "/foo")
        chat.runner.writer.close()
    assert shown(chat).strip() == "unknown command /foo; /help lists them"


def test_help_prints_the_commands(tmp_path: Path) -> None:
    from cli.chat_commands import run_command

    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [], sandbox)
        run_command(chat, "/help")
        chat.runner.writer.close()
    assert "/checkpoints" in shown(chat)


FOREIGN = {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234}


def _foreign_stats(tmp_path: Path) -> list[str]:
    """/stats of a chat on a server that is not a `nexus-agent serve` (only OpenAI token counts come back)."""
    from pipeline.chat.served import ServedConversation, ServedRecord

    record = ServedRecord("http://127.0.0.1:9/v1", "s", turns=[FOREIGN, {}])
    return ServedConversation(tmp_path, record, {"id": "m"}).stats_lines()


def test_stats_of_a_foreign_server_are_not_python_dicts(tmp_path: Path) -> None:
    assert not any("{" in line for line in _foreign_stats(tmp_path))


def test_stats_of_a_foreign_server_name_the_token_counts(tmp_path: Path) -> None:
    assert (
        _foreign_stats(tmp_path)[0] == "turn 1: prompt 1200 tok, completion 34 tok, total 1234 tok (no cache "
        "statistics from this server)"
    )


def _leave(chat, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("builtins.input", lambda prompt="": "exit")
    chat.run()
    return shown(chat)


def test_a_chat_left_without_a_request_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [], sandbox)
        _leave(chat, monkeypatch)
    assert not (tmp_path / "session").exists()


def test_a_chat_with_a_request_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [finish()], sandbox)
        chat.request("hello")
        assert "session saved in" in _leave(chat, monkeypatch)


def test_agents_md_reaches_the_system_prompt_of_the_first_request(tmp_path: Path) -> None:
    import json

    repo = failing_repo(tmp_path)
    (repo / "AGENTS.md").write_text("Always run pytest -q before finishing.\n")
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [finish()], sandbox)
        chat.request("hello")
        chat.runner.writer.close()
    records = [json.loads(line) for line in (chat.runner.folder / cs.TRAJECTORY_FILE).read_text().splitlines()]
    system = next(r for r in records if r.get("step") == 1)["input"][0]
    assert "Always run pytest -q before finishing." in system["content"]
