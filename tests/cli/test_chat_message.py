"""`nexus-agent chat --message TEXT`: one request with no one at a prompt, its transcript on stdout, an exit code
that says whether the agent finished (0), did not (1) or the chat could not start (2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chatlib import bash, failing_repo, finish, open_chat, shown
from clilib import cli_env, nexus

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")


@pytest.fixture
def one_shot(tmp_path: Path):
    """(the turn, the transcript) of a one-shot request the scripted model finishes after a call it may not run."""
    from pipeline.chat import approval

    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("rm calc.py"), finish("nothing removed")], sandbox,
                         yolo=False)  # fmt: skip
        chat.runner.approve, chat.runner.unattended = None, approval.ONE_SHOT  # as chat_cmd opens it for --message
        turn = chat.one_shot("clean up")
    return turn, shown(chat)


def test_a_finished_request_counts_as_finished(one_shot) -> None:
    assert one_shot[0].finished


def test_the_opening_lines_say_that_nothing_will_be_asked(one_shot) -> None:
    said = " ".join(one_shot[1].split())  # the console wraps the long opening line
    assert "--message runs unattended: a command that needs approval is not run" in said


def test_the_transcript_shows_the_request(one_shot) -> None:
    assert "you> clean up" in one_shot[1]


def test_the_transcript_says_what_was_not_run(one_shot) -> None:
    assert "not run (--message runs unattended; --yolo or /allowlist): $ rm calc.py" in one_shot[1]


def test_the_transcript_ends_with_the_session_to_resume(one_shot) -> None:
    assert one_shot[1].rstrip().endswith("--session t --resume)")


def test_the_transcript_has_no_command_list(one_shot) -> None:
    assert "/checkpoints" not in one_shot[1]


@pytest.fixture
def cli_runs(tmp_path: Path, tiny_model_dir: Path):
    """Two `chat --message` runs of the tiny random model on one session (new, then resumed), with input on stdin
    that no prompt may read: [(CompletedProcess, chat.json after it)]."""
    repo = failing_repo(tmp_path)
    env = cli_env(tmp_path / "home")
    base = ["chat", "--session", "s", "--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens", "6",
            "--no-env"]  # fmt: skip
    runs = []
    for extra in (["--repo", str(repo), "--message", "first: alpha"], ["--resume", "--message", "second: beta"]):
        res = nexus(*base, *extra, env=env, cwd=tmp_path, input="y\nexit\n")
        runs.append((res, json.loads((tmp_path / "home" / "sessions" / "s" / cs.STATE_FILE).read_text())))
    return runs


@pytest.mark.slow  # two CLI runs of the tiny model (~10-20 s)
def test_an_unfinished_request_exits_1(cli_runs) -> None:
    assert [res.returncode for res, _ in cli_runs] == [1, 1]  # one step, and the random model never calls finish


@pytest.mark.slow
def test_the_cli_prints_the_step_and_how_the_turn_ended(cli_runs) -> None:
    out = cli_runs[0][0].stdout
    assert out.index("you> first: alpha") < out.index("step 1") < out.index("done (abs_step_limit, 1 steps")


@pytest.mark.slow
def test_a_resumed_session_takes_the_message_as_its_next_request(cli_runs) -> None:
    assert cli_runs[1][1]["requests"] == ["first: alpha", "second: beta"]


def test_a_chat_that_cannot_start_exits_2(tmp_path: Path) -> None:
    res = nexus("chat", "--session", "none", "--resume", "--message", "x", env=cli_env(tmp_path / "h"), cwd=tmp_path)
    assert res.returncode == 2


def test_an_empty_message_is_refused_in_one_line(tmp_path: Path) -> None:
    res = nexus("chat", "--message", " ", env=cli_env(tmp_path / "h"), cwd=tmp_path)
    assert res.stderr == "error: --message is empty: give the request's text\n"
