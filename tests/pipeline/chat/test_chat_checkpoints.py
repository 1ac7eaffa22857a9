"""Every turn's checkpoint (pipeline/chat/checkpoints.py) on a real git repo: /undo N, a repeated /undo, the list."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.chat import checkpoints as cp
from pipeline.chat import snapshot as snap
from swe_env.safegit import git_dirs

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "PATH": "/usr/bin:/bin"}  # fmt: skip


@pytest.fixture
def three_turns(tmp_path: Path) -> tuple[Path, Path, tuple]:
    """A repo whose a.txt said v0 and three sealed turns that wrote v1, v2, v3 (turn 2 also added b.txt)."""
    repo, folder = tmp_path / "repo", tmp_path / "session"
    repo.mkdir()
    (repo / "a.txt").write_text("v0\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env=ENV)
    dirs = git_dirs(repo)
    for turn in (1, 2, 3):
        cp.start(repo, folder, dirs, turn, f"request {turn}")
        (repo / "a.txt").write_text(f"v{turn}\n")
        if turn == 2:
            (repo / "b.txt").write_text("new\n")
        cp.seal(repo, folder, dirs)
    return repo, folder, dirs


def test_the_stack_lists_every_turn(three_turns: tuple) -> None:
    assert [c.turn for c in cp.load(three_turns[1])] == [1, 2, 3]


def test_a_checkpoint_names_the_files_its_turn_changed(three_turns: tuple) -> None:
    assert cp.load(three_turns[1])[1].files == ["a.txt", "b.txt"]


def test_a_checkpoint_describes_its_request(three_turns: tuple) -> None:
    assert "'request 3'  a.txt" in cp.load(three_turns[1])[2].describe()


def test_undo_two_goes_back_two_turns(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    cp.undo(repo, folder, dirs, 2)
    assert (repo / "a.txt").read_text() == "v1\n"


def test_undo_two_removes_the_file_turn_two_added(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    cp.undo(repo, folder, dirs, 2)
    assert not (repo / "b.txt").exists()


def test_a_second_undo_goes_back_one_more(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    cp.undo(repo, folder, dirs, 1)
    cp.undo(repo, folder, dirs, 1)
    assert (repo / "a.txt").read_text() == "v1\n"


def test_undoing_past_the_first_turn_stops_there(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    assert [t for t, _ in cp.undo(repo, folder, dirs, 5)] == [3, 2, 1]


def test_nothing_left_to_undo_says_so(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    cp.undo(repo, folder, dirs, 3)
    with pytest.raises(snap.SnapshotError, match="nothing to undo"):
        cp.undo(repo, folder, dirs, 1)


def test_a_new_turn_after_an_undo_stacks_on_what_is_left(three_turns: tuple) -> None:
    repo, folder, dirs = three_turns
    cp.undo(repo, folder, dirs, 2)
    cp.start(repo, folder, dirs, 4, "request 4")
    assert [c.turn for c in cp.load(folder)] == [1, 4]


def test_a_damaged_checkpoint_file_does_not_stop_the_next_turn(three_turns: tuple) -> None:
    """A truncated undo/turns/N.json raised JSONDecodeError in every later turn's snapshot: the chat ended with a
    traceback on each request, resumed or not. It is dropped; undo stops before its turn."""
    repo, folder, dirs = three_turns
    snap.turn_file(folder, 1).write_text('{"turn": 1, "entr')
    cp.start(repo, folder, dirs, 4, "request 4")
    assert not snap.turn_file(folder, 1).exists()
    assert [turn for turn, _ in cp.undo(repo, folder, dirs, 9)] == [4, 3, 2]


def test_a_checkpoint_list_of_the_wrong_types_is_no_list(three_turns: tuple) -> None:
    """/checkpoints ended the chat with a TypeError on a request that was a number."""
    folder = three_turns[1]
    (folder / snap.UNDO_DIR / cp.STACK_FILE).write_text('[{"turn": 1, "started": "x", "request": 5}]')
    assert cp.load(folder) == []
