"""A chat's checkpoints: one per turn, so that `/undo N` goes back N turns and `/checkpoints` lists them.

Each turn's snapshot (pipeline.chat.snapshot) is kept as `undo/turns/N.json` beside the current one
(`undo/manifest.json`), and `undo/checkpoints.json` holds the stack of turns that can be undone, oldest first: the
turn, when it started, the user's request and the files it changed. Undoing a turn restores its snapshot and makes
the turn before it current, so a second `/undo` goes back one more. A turn without a snapshot (it could not be
taken) empties the stack: nothing older can be restored safely. At most MAX_CHECKPOINTS turns are kept.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.chat import snapshot as snap
from pipeline.chat.repo_files import shown_path
from pipeline.files import atomic_write

STACK_FILE = "checkpoints.json"  # in undo/
MAX_CHECKPOINTS = 50
REQUEST_CUT = 50  # characters of the request /checkpoints shows


@dataclass
class Checkpoint:
    turn: int
    started: float  # time.time() when the turn started
    request: str
    files: list[str] = field(default_factory=list)  # what the turn changed (known when it ended)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        text = self.request if len(self.request) <= REQUEST_CUT else self.request[: REQUEST_CUT - 1] + "…"
        files = ", ".join(map(shown_path, self.files)) if self.files else "no files changed"
        return f"turn {self.turn}  {when}  {text!r}  {files}"


def load(folder: Path) -> list[Checkpoint]:
    """The turns that can be undone, oldest first ([] when none or the file is unreadable)."""
    try:
        data = json.loads((folder / snap.UNDO_DIR / STACK_FILE).read_text(encoding="utf-8"))
        stack = [Checkpoint(**c) for c in data]
    except (OSError, ValueError, TypeError, RecursionError):
        return []
    if all(_well_typed(c) for c in stack):
        return stack
    return []


def _well_typed(c: Checkpoint) -> bool:
    return (isinstance(c.turn, int) and isinstance(c.started, int | float) and isinstance(c.request, str)
            and isinstance(c.files, list) and all(isinstance(f, str) for f in c.files))  # fmt: skip


def _save(folder: Path, stack: list[Checkpoint]) -> None:
    atomic_write(folder / snap.UNDO_DIR / STACK_FILE, json.dumps([asdict(c) for c in stack]) + "\n")


def start(repo: Path, folder: Path, dirs, turn: int, request: str) -> None:
    """The start of a turn: its snapshot, pushed on the stack (the oldest dropped past MAX_CHECKPOINTS)."""
    try:
        snap.take(repo, folder, dirs, turn)
    except (snap.SnapshotError, OSError):
        if (folder / snap.UNDO_DIR).is_dir():
            _save(folder, [])
        raise
    stack = [c for c in load(folder) if c.turn < turn] + [Checkpoint(turn, time.time(), request)]
    for old in stack[:-MAX_CHECKPOINTS]:
        snap.turn_file(folder, old.turn).unlink(missing_ok=True)
    _save(folder, stack[-MAX_CHECKPOINTS:])


def seal(repo: Path, folder: Path, dirs) -> None:
    """The end of a turn: its snapshot sealed, the files it changed noted on its checkpoint."""
    sealed = snap.seal(repo, folder, dirs)
    stack = load(folder)
    if sealed is not None and stack and stack[-1].turn == sealed.turn:
        stack[-1].files = sorted(sealed.after or {})
        _save(folder, stack)


def undo(repo: Path, folder: Path, dirs, n: int) -> list[tuple[int, snap.Restored]]:
    """Undo the last `n` turns, the most recent first: (turn, what was restored) each; fewer when the stack ends
    first. SnapshotError when there is nothing to undo."""
    done: list[tuple[int, snap.Restored]] = []
    for _ in range(n):
        current = snap.Snapshot.load(folder)
        if current is None:
            if done:
                break
            raise snap.SnapshotError("nothing to undo: no agent turn of this session is left to undo")
        done.append((current.turn, snap.restore(repo, folder, dirs)))
        step_back(folder, current.turn)
    return done


def step_back(folder: Path, turn: int) -> None:
    """Turn `turn` is undone, or never ran (its request was not sent): its checkpoint is dropped and the turn before
    it on the stack becomes the current snapshot."""
    snap.turn_file(folder, turn).unlink(missing_ok=True)
    stack = [c for c in load(folder) if c.turn < turn]
    _save(folder, stack)
    if stack and snap.turn_file(folder, stack[-1].turn).is_file():
        shutil.copyfile(snap.turn_file(folder, stack[-1].turn), folder / snap.UNDO_DIR / "manifest.json")
