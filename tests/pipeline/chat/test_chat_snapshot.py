"""A chat turn's snapshot, diff and undo (pipeline/chat/snapshot.py) on real git repos and plain folders: what a turn
changed, added and deleted comes back; symlinks the agent planted are never followed out of the repo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pipeline.chat import snapshot as snap
from pipeline.chat.diff import turn_diff
from swe_env.safegit import git_dirs

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip


def _repo(root: Path, git: bool = True) -> Path:
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    (repo / "run.sh").write_text("echo hi\n")
    (repo / "run.sh").chmod(0o755)
    (repo / ".gitignore").write_text("build/\n")
    if git:
        for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
            subprocess.run(cmd, cwd=repo, check=True, env=GIT_ENV)
    return repo


@pytest.mark.parametrize("git", [True, False])
def test_undo_restores_changed_new_and_deleted_files(tmp_path: Path, git: bool) -> None:
    repo, folder = _repo(tmp_path, git), tmp_path / "session"
    dirs = git_dirs(repo) if git else None
    (repo / "notes.txt").write_text("untracked before the turn\n")
    taken = snap.take(repo, folder, dirs, turn=1)
    assert {"pkg/mod.py", "run.sh", "notes.txt"} <= set(taken.entries)
    (repo / "pkg" / "mod.py").write_text("x = 2\n")  # the turn: a change, a deletion, new files, a mode change
    (repo / "notes.txt").unlink()
    (repo / "new" / "deep").mkdir(parents=True)
    (repo / "new" / "deep" / "file.py").write_text("new\n")
    (repo / "run.sh").chmod(0o644)
    diff = turn_diff(snap.changes(repo, folder, dirs))
    assert "-x = 1\n+x = 2" in diff and "+new" in diff and "-untracked before the turn" in diff and "mode 755" in diff
    done = snap.restore(repo, folder, dirs)
    assert sorted(done.changed) == ["notes.txt", "pkg/mod.py", "run.sh"] and done.removed == ["new/deep/file.py"]
    assert (repo / "pkg" / "mod.py").read_text() == "x = 1\n" and (repo / "notes.txt").exists()
    assert not (repo / "new").exists() and (repo / "run.sh").stat().st_mode & 0o777 == 0o755
    with pytest.raises(snap.SnapshotError, match="nothing to undo"):
        snap.restore(repo, folder, dirs)  # the snapshot is spent


def test_ignored_files_are_left_alone_and_unchanged_files_not_reread(tmp_path: Path) -> None:
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 100)
    first = snap.take(repo, folder, dirs, turn=1)
    assert "build/out.bin" not in first.entries
    second = snap.take(repo, folder, dirs, turn=2)
    assert second.entries["pkg/mod.py"] == first.entries["pkg/mod.py"]  # same stamp, same digest, one blob
    assert len(list((folder / snap.UNDO_DIR / "blobs").iterdir())) == len({e.digest for e in second.entries.values()})


def test_planted_symlinks_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    (repo / "link").symlink_to(secret)  # planted before the turn: kept as a link, its target never read
    snap.take(repo, folder, dirs, turn=1)
    blobs = [p.read_bytes() for p in (folder / snap.UNDO_DIR / "blobs").iterdir()]
    assert b"host secret\n" not in blobs
    (repo / "pkg" / "mod.py").unlink()  # the turn: the folder becomes a link out of the repo
    (repo / "pkg").rmdir()
    (repo / "pkg").symlink_to(outside)
    (repo / "run.sh").unlink()
    (repo / "run.sh").symlink_to(secret)
    changes = snap.changes(repo, folder, dirs)
    assert all(c.after != b"host secret\n" for c in changes)  # the diff does not show the secret
    assert f"symlink: a file -> a link to {secret}" in [c.note for c in changes]  # was "a file -> -> ..."
    snap.restore(repo, folder, dirs)
    assert not (repo / "pkg").is_symlink() and (repo / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (repo / "run.sh").is_symlink() and (repo / "run.sh").read_text() == "echo hi\n"
    assert os.listdir(outside) == [] and secret.read_text() == "host secret\n"
    assert os.readlink(repo / "link") == str(secret)


def test_undo_leaves_alone_what_changed_after_the_turn(tmp_path: Path) -> None:
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    snap.take(repo, folder, dirs, turn=1)
    (repo / "pkg" / "mod.py").write_text("x = 2\n")  # the turn
    (repo / "run.sh").write_text("echo turn\n")
    snap.seal(repo, folder, dirs)
    (repo / "run.sh").write_text("echo mine\n")  # the user's edits after the turn
    (repo / "mine.txt").write_text("my new file\n")
    done = snap.restore(repo, folder, dirs)
    assert done.changed == ["pkg/mod.py"] and sorted(done.kept) == ["mine.txt", "run.sh"] and done.removed == []
    assert (repo / "pkg" / "mod.py").read_text() == "x = 1\n" and (repo / "run.sh").read_text() == "echo mine\n"
    assert (repo / "mine.txt").exists() and "left as they are (changed after the turn)" in done.summary()


def test_a_submodule_is_not_said_to_be_unrestorable(tmp_path: Path) -> None:
    sub = _repo(tmp_path / "sub")
    repo, folder = _repo(tmp_path), tmp_path / "session"
    add = ["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib"]
    for cmd in (add, ["git", "commit", "-qm", "sub"]):
        subprocess.run(cmd, cwd=repo, check=True, env=GIT_ENV)
    snap.take(repo, folder, git_dirs(repo), turn=1)
    assert snap.restore(repo, folder, git_dirs(repo)).unrestorable == []


def test_only_a_too_large_file_the_turn_changed_is_said_to_be_unrestorable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(snap, "MAX_FILE_BYTES", 1000)  # a 2 kB file stands for one over 32 MiB
    repo, folder = _repo(tmp_path), tmp_path / "session"
    (repo / "data.bin").write_bytes(b"\0" * 2000)  # too large to keep, untouched by the turn
    (repo / "log.bin").write_bytes(b"\1" * 2000)  # too large to keep, rewritten by the turn
    taken = snap.take(repo, folder, git_dirs(repo), turn=1)
    assert sorted(taken.skipped) == ["data.bin", "log.bin"]
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    (repo / "log.bin").write_bytes(b"\2" * 3000)
    done = snap.restore(repo, folder, git_dirs(repo))
    assert done.changed == ["pkg/mod.py"] and done.unrestorable == ["log.bin"]


def test_a_snapshot_saved_before_stamps_of_skipped_files_still_loads(tmp_path: Path) -> None:
    repo, folder = _repo(tmp_path), tmp_path / "session"
    snap.take(repo, folder, git_dirs(repo), turn=1)
    manifest = folder / snap.UNDO_DIR / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"skipped": {}', '"skipped": ["old.bin"]'))
    assert snap.restore(repo, folder, git_dirs(repo)).unrestorable == ["old.bin"]  # no stamp: said, as then


def test_files_a_turn_stops_ignoring_are_not_its_new_files(tmp_path: Path) -> None:
    """A turn that rewrote .gitignore made the user's ignored .env and venv/ look like files it added: the diff
    showed .env's secret, and /undo deleted both (they were never recorded, so nothing could bring them back)."""
    repo, folder = _repo(tmp_path), tmp_path / "session"
    (repo / ".gitignore").write_text(".env\nvenv/\n")
    subprocess.run(["git", "commit", "-qam", "ignore"], cwd=repo, check=True, env=GIT_ENV)
    (repo / ".env").write_text("SECRET_TOKEN=hunter2\n")
    (repo / "venv" / "lib").mkdir(parents=True)
    (repo / "venv" / "lib" / "site.py").write_text("x\n")
    dirs = git_dirs(repo)
    snap.take(repo, folder, dirs, turn=1)
    (repo / ".gitignore").write_text("*.pyc\n")  # the turn
    (repo / "made.py").write_text("new\n")
    diff = turn_diff(snap.changes(repo, folder, dirs))
    assert "hunter2" not in diff
    done = snap.restore(repo, folder, dirs)
    assert (sorted(done.changed), done.removed) == ([".gitignore"], ["made.py"])
    assert (repo / ".env").read_text() == "SECRET_TOKEN=hunter2\n"
    assert (repo / "venv" / "lib" / "site.py").exists()


def test_a_lost_blob_or_a_gone_repo_is_a_snapshot_error(tmp_path: Path) -> None:
    """Both ended the chat with a traceback (FileNotFoundError) where /diff and /undo say one line."""
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    snap.take(repo, folder, dirs, turn=1)
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    for blob in (folder / snap.UNDO_DIR / "blobs").iterdir():
        blob.unlink()
    with pytest.raises(snap.SnapshotError, match="the undo store lost a file's content"):
        snap.changes(repo, folder, dirs)
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    with pytest.raises(snap.SnapshotError, match="cannot undo: the repo .* is not there"):
        snap.restore(repo, folder, dirs)


def test_a_manifest_of_the_wrong_shape_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / snap.UNDO_DIR).mkdir()
    (tmp_path / snap.UNDO_DIR / "manifest.json").write_text('{"turn": 1, "skipped": {}, "entries": []}')
    with pytest.raises(snap.SnapshotError, match="unreadable"):
        snap.Snapshot.load(tmp_path)


def test_only_text_that_changed_is_said_empty_when_it_is(tmp_path: Path) -> None:
    """A mode-only change and a CRLF -> LF change were both shown as "(empty file)"."""
    mode = snap.Change("run.sh", b"echo hi\n", b"echo hi\n", note="mode 644 -> 755")
    endings = snap.Change("win.txt", b"a\r\nb\r\n", b"a\nb\n")
    empty = snap.Change("empty.txt", None, b"")
    assert turn_diff([mode]) == "diff run.sh\nmode 644 -> 755\n"
    assert turn_diff([endings]) == "diff win.txt\n(line endings only: \\r\\n and \\n)\n"
    assert turn_diff([empty]) == "diff empty.txt\n(empty file)\n"


def test_a_file_the_turn_made_a_folder_comes_back_and_its_contents_count_as_removed(tmp_path: Path) -> None:
    """/undo restored the tree, but listed the folder's new file as "left as they are (changed after the turn)"."""
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    snap.take(repo, folder, dirs, turn=1)
    (repo / "run.sh").unlink()  # the turn: rm run.sh && mkdir run.sh && echo x > run.sh/g
    (repo / "run.sh").mkdir()
    (repo / "run.sh" / "g").write_text("x\n")
    snap.seal(repo, folder, dirs)
    done = snap.restore(repo, folder, dirs)
    assert (done.changed, done.removed, done.kept) == (["run.sh"], ["run.sh/g"], [])
    assert (repo / "run.sh").read_text() == "echo hi\n"


def test_control_characters_in_a_file_name_are_shown_as_escapes(tmp_path: Path) -> None:
    """A file named "e\\x1b[31mvil" was shown as "evil" (the terminal-safe print drops control characters): one
    file's name read as another's in the diff, /checkpoints and /undo."""
    repo, folder = _repo(tmp_path), tmp_path / "session"
    dirs = git_dirs(repo)
    snap.take(repo, folder, dirs, turn=1)
    (repo / "e\x1b[31mvil").write_text("x\n")  # the turn
    diff = turn_diff(snap.changes(repo, folder, dirs))
    assert diff.startswith("diff e\\x1b[31mvil\n--- /dev/null\n+++ b/e\\x1b[31mvil\n")
    assert snap.restore(repo, folder, dirs).summary() == "removed 1 new: e\\x1b[31mvil"
