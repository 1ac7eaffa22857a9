"""What chat does with a user's bad input: a slash command's argument that is no number, on a real repo in a real
bubblewrap sandbox with a scripted model (tests/chatlib.py): one line of usage, never a traceback; a first request
that cannot fit in the model's context."""

from __future__ import annotations

from pathlib import Path

import pytest
from chatlib import failing_repo, finish, open_chat, shown

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
UNDO_USAGE = "usage: /undo [N] (N: how many turns to go back, default 1)"
SHOW_USAGE = "usage: /show [N] (N: a step number of the last turn)"


@pytest.fixture
def chat(tmp_path: Path):
    """A chat after one turn (one step: finish)."""
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [finish()], sandbox)
        chat.request("hello")
        shown(chat)
        yield chat
        chat.runner.writer.close()


@pytest.mark.parametrize("arg", ["²", "٣", "0", "-1", "abc", "1 2", "9" * 5000])
def test_undo_with_a_bad_count_prints_its_usage(chat, arg: str) -> None:
    from cli.chat_commands import run_command

    run_command(chat, f"/undo {arg}")
    assert shown(chat).strip() == UNDO_USAGE


def test_a_bad_undo_undoes_nothing(chat) -> None:
    from cli.chat_commands import run_command

    run_command(chat, "/undo ²")
    assert len(chat.runner.checkpoints()) == 1


@pytest.mark.parametrize("arg", ["²", "x", "-1", "1 2"])
def test_show_with_a_bad_step_prints_its_usage(chat, arg: str) -> None:
    from cli.chat_commands import run_command

    run_command(chat, f"/show {arg}")
    assert shown(chat).strip() == SHOW_USAGE


@pytest.fixture
def too_long(tmp_path: Path, tiny_model_dir: Path):
    """`chat --message` on a repo whose AGENTS.md (32 KiB of digits, a token each) fills the tiny model's 16384
    positions before the request: (the CompletedProcess, the session folder)."""
    from clilib import cli_env, nexus

    repo = failing_repo(tmp_path)
    (repo / "AGENTS.md").write_text("1234567890" * 4000)
    res = nexus("chat", "--repo", str(repo), "--session", "s", "--model", str(tiny_model_dir), "--no-env",
                "--max-steps", "1", "--message", "hi", env=cli_env(tmp_path / "home"), cwd=tmp_path)  # fmt: skip
    return res, tmp_path / "home" / "sessions" / "s"


@pytest.mark.slow  # a real model (~20 s)
def test_a_first_request_that_does_not_fit_names_agents_md(too_long) -> None:
    assert "nothing was sent; shorten the repo's AGENTS.md (or the request)" in " ".join(too_long[0].stdout.split())


@pytest.mark.slow  # a real model (~20 s)
def test_a_first_request_that_does_not_fit_keeps_no_session_that_cannot_resume(too_long) -> None:
    assert (too_long[0].returncode, too_long[1].exists()) == (1, False)


def test_a_session_name_with_a_control_character_is_refused_in_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    from clilib import cli_env, nexus

    args = ["--repo", str(failing_repo(tmp_path)), "--model", str(tiny_model_dir), "--no-env", "--max-steps", "1"]
    res = nexus("chat", *args, "--session", "x\ny", "--message", "hi", env=cli_env(tmp_path / "home"), cwd=tmp_path)
    assert (res.returncode, res.stderr.count("\n")) == (2, 1)


def test_the_resume_hint_quotes_a_name_with_a_space(chat) -> None:
    chat.runner.name = "my project"  # the default name of a repo in a folder "my project"
    chat._left(True)
    assert "nexus-agent chat --session 'my project' --resume" in " ".join(shown(chat).split())


@pytest.mark.slow  # a real model, two runs (~30 s)
def test_a_later_request_that_does_not_fit_is_not_sent_and_the_session_goes_on(tmp_path: Path, tiny_model_dir) -> None:
    import json

    from clilib import cli_env, nexus

    env, base = cli_env(tmp_path / "home"), ["chat", "--session", "s", "--model", str(tiny_model_dir), "--no-env"]
    nexus(*base, "--repo", str(failing_repo(tmp_path)), "--max-steps", "1", "--message", "hi", env=env, cwd=tmp_path)
    res = nexus(*base, "--resume", "--message", "1234567890" * 2000, env=env, cwd=tmp_path)
    requests = json.loads((tmp_path / "home" / "sessions" / "s" / cs.STATE_FILE).read_text())["requests"]
    assert ("nothing was sent; shorten it" in " ".join(res.stdout.split()), requests) == (True, ["hi"])
    stack = json.loads((tmp_path / "home" / "sessions" / "s" / "undo" / "checkpoints.json").read_text())
    assert [c["turn"] for c in stack] == [1]  # the unsent request left no checkpoint for /undo to spend
