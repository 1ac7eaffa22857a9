"""The chat sessions on disk (one folder each under <home>/sessions, pipeline.chat): listing a repo's sessions,
deleting one, and the name of a new chat when the repo's default name is taken."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.chat import state as cs
from pipeline.errors import RunError
from pipeline.folder_lock import LOCK_FILE, FolderBusy, held_elsewhere, hold_folder
from pipeline.home import home


@dataclass(frozen=True)
class SessionInfo:
    """One saved chat session."""

    name: str  # its folder's name (what --session takes)
    repo: str  # the repo it works on
    requests: int  # the user's requests so far
    last_used: float  # when its chat.json was last written (seconds since the epoch)
    size: int  # bytes of its folder (KV cache, messages, trajectory, undo snapshot)


def _folder_size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink() and p.is_file())


def read_info(folder: Path) -> SessionInfo | None:
    """The session in `folder` (None: not a readable chat session)."""
    state = folder / cs.STATE_FILE
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
        return SessionInfo(folder.name, str(data["repo"]), len(data["requests"]), state.stat().st_mtime,
                           _folder_size(folder))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def sessions_of(repo: Path | None = None) -> list[SessionInfo]:
    """Every saved session (of `repo` only, when given), the most recently used first."""
    root = home() / "sessions"
    found = [read_info(f) for f in sorted(root.iterdir())] if root.is_dir() else []
    want = None if repo is None else str(repo.resolve())
    out = [s for s in found if s is not None and (want is None or s.repo == want)]
    return sorted(out, key=lambda s: s.last_used, reverse=True)


def new_name(base: str) -> str:
    """`base` when no session has that name yet, else the first free `base-2`, `base-3`, ... (a name a chat is
    opening in another process is taken too)."""

    def taken(name: str) -> bool:
        return (cs.session_dir(name) / cs.STATE_FILE).exists() or in_use(cs.session_dir(name))

    if not taken(base):
        return base
    n = 2
    while taken(f"{base}-{n}"):
        n += 1
    return f"{base}-{n}"


@contextmanager
def hold(folder: Path) -> Iterator[None]:
    """The open chat's hold on its session folder (pipeline.folder_lock): a second chat on the same session is
    refused at once (the two would overwrite each other's memory and requests). A folder that holds only the lock
    file when the chat ends (it never started) is removed."""
    with ExitStack() as held:
        try:
            held.enter_context(hold_folder(folder))
        except FolderBusy as exc:
            raise RunError(f"session {folder.name!r} is open in another chat (pid {exc.holder}); leave that chat "
                           "first, or pick another --session") from None  # fmt: skip
        try:
            yield
        finally:
            if folder.is_dir() and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
                (folder / LOCK_FILE).unlink()  # still held: no other chat can have taken it
                folder.rmdir()


def in_use(folder: Path) -> bool:
    """Whether a chat (another process) holds the session in `folder` now."""
    return held_elsewhere(folder) is not None


def open_on(repo: Path, besides: str) -> list[str]:
    """The sessions of `repo` other than `besides` that a chat has open now (its edits would mix with this one's)."""
    return [s.name for s in sessions_of(repo) if s.name != besides and in_use(cs.session_dir(s.name))]


def delete(name: str, current: str) -> SessionInfo:
    """Delete the saved session `name` (never the one this chat is running, nor one another chat has open);
    RunError when there is no such one."""
    if name == current:
        raise RunError(f"session {name!r} is this chat's own; leave it first, then delete it from another chat")
    folder = cs.session_dir(name)
    holder = held_elsewhere(folder)
    if holder is not None:
        raise RunError(f"session {name!r} is open in another chat (pid {holder}); leave it there first")
    info = read_info(folder)
    if info is None:
        raise RunError(f"no chat session {name!r} (see /sessions)")
    shutil.rmtree(folder)
    return info


def describe(info: SessionInfo, now: float) -> str:
    """One line of /sessions: name, requests, last used, size."""
    return (f"{info.name}  {info.requests} request(s)  last used {_ago(now - info.last_used)}  "
            f"{info.size / 2**20:.1f} MiB")  # fmt: skip


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def discard_if_empty(folder: Path) -> bool:
    """At a chat's end: a session no request was sent in is not kept (it would only crowd /sessions and --resume's
    choice). True when its folder was removed."""
    try:
        empty = not cs.ChatState.load(folder).requests
    except RunError:
        return False  # not a readable session: leave it to the user
    if empty:
        shutil.rmtree(folder)
    return empty
