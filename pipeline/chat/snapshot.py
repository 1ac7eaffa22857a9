"""A chat turn's undo and diff: the repo's files as they were when the turn started, kept in the session folder.

At the start of each agent turn `take` records every file of the repo (for a git repo: the tracked files and the
untracked ones that are not ignored, as `git ls-files` lists them with the safe git of swe_env.safegit; otherwise
every file but `.git`) as a manifest of (kind, mode, sha256) entries, and copies each content it has not kept yet
into a content-addressed store (`undo/blobs/`). A file whose size, mtime, ctime and inode did not change since the
last snapshot is not read again. `changes` compares the repo now with the snapshot (the turn's diff); `seal`, at the
turn's end, records what the turn left; `restore` puts back what the turn changed, re-creates what it deleted and
removes what it added, and leaves alone a path changed again since the turn ended (an edit of the user's).

The agent can plant symlinks in the repo (`x -> /etc/shadow`) and this runs as the host user (root, possibly):
every file is opened with `common.open_inside` (O_NOFOLLOW, its folder must resolve inside the repo), a symlink
is recorded and restored as a link (its target is never read), and nothing outside the repo is written or removed.
Files over MAX_FILE_BYTES, and files past MAX_TOTAL_BYTES of new content in one snapshot, are not kept: undo says
which ones it cannot restore. `.git` and ignored files (build outputs, virtualenvs) are not part of a snapshot.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.chat.repo_files import list_files, list_ignored, shown_path, was_ignored
from pipeline.files import atomic_write
from swe_env.safegit import GitError
from swe_env.sandbox.common import open_inside
from swe_env.sandbox.overlay_sync import remove_entry

UNDO_DIR = "undo"  # in the session folder: manifest.json, turns/ (each turn's, pipeline.chat.checkpoints), blobs/
MAX_FILE_BYTES = 32 * 2**20  # a larger file is left out of the snapshot (not restorable)
MAX_TOTAL_BYTES = 512 * 2**20  # most new content one snapshot copies; past it files are left out
INSIDE = "/r"  # the repo's name for open_inside (any absolute prefix)


class SnapshotError(RuntimeError):
    """A snapshot cannot be taken or restored (a one-line message for the user)."""


@dataclass
class Entry:
    """One path of the repo in a snapshot."""

    kind: str  # "file" or "link"
    mode: int  # permission bits (files)
    digest: str  # sha256 of the content (file) or of the link's target (link)
    target: str = ""  # a link's target
    stamp: list[int] = field(default_factory=list)  # size, mtime_ns, ctime_ns, inode when taken (a file's reuse key)


@dataclass
class Snapshot:
    """The repo's files at the start of a turn (paths relative to the repo, '/'-separated)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)  # files too large to keep -> their stamp then: undo
    # cannot restore them, and says so for those that changed
    turn: int = 0  # the request this snapshot was taken before (1-based)
    after: dict[str, str] | None = None  # each path the turn changed -> what it held when the turn ended (`seal`);
    # None: the turn did not end here (the program was killed): undo takes back every change
    ignored: list[str] = field(default_factory=list)  # what git ignored when it was taken ("dir/": a whole folder):
    # not recorded, and never taken for a file the turn added, even once a turn's .gitignore stops ignoring it

    def save(self, folder: Path) -> None:
        data = {"turn": self.turn, "skipped": self.skipped, "entries": {k: asdict(v) for k, v in self.entries.items()},
                "after": self.after, "ignored": self.ignored}  # fmt: skip
        atomic_write(folder / UNDO_DIR / "manifest.json", json.dumps(data) + "\n")
        turn_file(folder, self.turn).parent.mkdir(exist_ok=True)
        atomic_write(turn_file(folder, self.turn), json.dumps(data) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Snapshot | None:
        path = folder / UNDO_DIR / "manifest.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = {k: Entry(**v) for k, v in data["entries"].items()}
            skipped = data["skipped"]
            if not isinstance(skipped, dict):  # a list of paths (snapshots of before 2026-12): no stamps, all said
                skipped = dict.fromkeys(skipped, [])
            ignored = [str(p) for p in data.get("ignored", [])]
            return cls(entries, {k: list(v) for k, v in skipped.items()}, int(data["turn"]), data.get("after"), ignored)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise SnapshotError(f"{path} is unreadable ({type(exc).__name__}); undo is not available") from None


def turn_file(folder: Path, turn: int) -> Path:
    """Where the snapshot of turn `turn` is kept (a checkpoint: pipeline.chat.checkpoints)."""
    return folder / UNDO_DIR / "turns" / f"{turn}.json"


def _files(repo: Path, dirs: tuple[Path, Path] | None) -> list[str]:
    try:
        return list_files(repo, dirs)
    except GitError as exc:
        raise SnapshotError(f"cannot list the repo's files: {exc}") from None


def take(repo: Path, folder: Path, dirs: tuple[Path, Path] | None, turn: int) -> Snapshot:
    """Snapshot the repo before a turn (reusing the last snapshot's digests of unchanged files) and save it."""
    previous = Snapshot.load(folder) if (folder / UNDO_DIR / "manifest.json").exists() else None
    store = folder / UNDO_DIR / "blobs"
    store.mkdir(parents=True, exist_ok=True)
    snap, budget = Snapshot(turn=turn, ignored=list_ignored(repo, dirs)), [MAX_TOTAL_BYTES]
    for rel in _files(repo, dirs):
        entry = _record(repo, rel, store, previous.entries.get(rel) if previous else None, budget)
        if entry is not None:
            snap.entries[rel] = entry
        elif not (repo / rel).is_symlink() and (repo / rel).is_file():  # too large (a submodule: not in a snapshot)
            snap.skipped[rel] = _stamp(repo, rel)
    snap.save(folder)
    _collect(store, _kept_digests(folder))
    return snap


def _record(repo: Path, rel: str, store: Path, before: Entry | None, budget: list[int]) -> Entry | None:
    """The entry of one path (None: missing, not a file or link, or too large to keep)."""
    st, link = _lstat(repo, rel)
    if st is None or link is not None:
        return link
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        return None
    stamp, mode = _stamp(repo, rel), stat.S_IMODE(st.st_mode)
    if before is not None and before.kind == "file" and before.stamp == stamp and (store / before.digest).exists():
        return Entry("file", mode, before.digest, stamp=stamp)
    data = read_inside(repo, rel)
    if data is None:
        return None
    digest = _sha(data)
    if not (store / digest).exists():
        if len(data) > budget[0]:
            return None
        budget[0] -= len(data)
        _write_blob(store / digest, data)
    return Entry("file", mode, digest, stamp=stamp)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_blob(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _kept_digests(folder: Path) -> set[str]:
    """The contents the kept snapshots (every checkpoint's) name."""
    keep: set[str] = set()
    for path in (folder / UNDO_DIR / "turns").glob("*.json"):
        try:
            entries = json.loads(path.read_text(encoding="utf-8")).get("entries", {})
            keep |= {e["digest"] for e in entries.values() if e.get("kind") == "file"}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            path.unlink(missing_ok=True)  # a damaged checkpoint: undo stops before its turn (checkpoints.step_back)
    return keep


def _collect(store: Path, keep: set[str]) -> None:
    """Remove the blobs no entry of a kept snapshot names."""
    for blob in store.iterdir():
        if blob.name not in keep:
            blob.unlink(missing_ok=True)


def read_inside(repo: Path, rel: str) -> bytes | None:
    """The bytes of the regular file `rel` of the repo, never through a symlink (None: missing, a link, unreadable)."""

    try:
        fd = open_inside(f"{INSIDE}/{rel}", INSIDE, {INSIDE: repo}, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(MAX_FILE_BYTES + 1)[: MAX_FILE_BYTES + 1]


@dataclass
class Change:
    """One path the turn changed: its content before and now (None: absent; b"" with `link`: a symlink)."""

    path: str
    before: bytes | None
    after: bytes | None
    note: str = ""  # what a text diff cannot show (a symlink, a mode change, a file too large)


def changes(repo: Path, folder: Path, dirs: tuple[Path, Path] | None) -> list[Change]:
    """What differs between the repo now and the last snapshot (empty when there is no snapshot)."""
    snap = Snapshot.load(folder)
    if snap is None:
        return []
    store, out = folder / UNDO_DIR / "blobs", []
    for rel in sorted(set(snap.entries) | set(_files(repo, dirs))):
        if rel in snap.skipped:
            continue
        old = snap.entries.get(rel)
        if old is None and was_ignored(rel, snap.ignored):
            continue  # there before the turn, unrecorded (a .gitignore the turn changed lists it now): not the turn's
        if old is not None and old.kind == "file" and old.stamp == _stamp(repo, rel):
            continue  # not touched since the snapshot (size, mtime, ctime and inode as they were)
        now = _current(repo, rel)
        if old is None and now is None:
            continue
        if old is not None and now is not None and (old.kind, old.digest, old.mode) == (now.kind, now.digest, now.mode):
            continue
        change = Change(rel, _content(store, old), _content_now(repo, rel, now))
        if old is not None and now is not None and old.digest == now.digest:
            change.note = f"mode {old.mode:o} -> {now.mode:o}"
        elif "link" in (getattr(old, "kind", ""), getattr(now, "kind", "")):
            change.note = f"symlink: {_link_text(old)} -> {_link_text(now)}"
        out.append(change)
    return out


def seal(repo: Path, folder: Path, dirs: tuple[Path, Path] | None) -> Snapshot | None:
    """At the end of a turn: record what each path it changed holds now. Undo then leaves alone what was changed
    again after the turn (by you, in your editor) and says so."""
    snap = Snapshot.load(folder)
    if snap is not None:
        snap.after = {c.path: _state_now(repo, c.path) for c in changes(repo, folder, dirs)}
        snap.save(folder)
    return snap


def _state_now(repo: Path, rel: str) -> str:
    """What `rel` holds now, as one comparable string ("" when nothing)."""
    entry = _current(repo, rel)
    return "" if entry is None else f"{entry.kind}:{entry.mode}:{entry.digest}"


def _stamp(repo: Path, rel: str) -> list[int]:
    try:
        st = os.lstat(repo / rel)
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] if stat.S_ISREG(st.st_mode) else []


def _link_text(entry: Entry | None) -> str:
    if entry is None:
        return "(absent)"
    return f"a link to {entry.target}" if entry.kind == "link" else "a file"


def _lstat(repo: Path, rel: str) -> tuple[os.stat_result | None, Entry | None]:
    """The path's lstat (None: missing) and, for a symlink, its entry (the link itself, never followed)."""
    try:
        st = os.lstat(repo / rel)
    except OSError:
        return None, None
    if not stat.S_ISLNK(st.st_mode):
        return st, None
    target = os.readlink(repo / rel)
    return st, Entry("link", 0, _sha(target.encode("utf-8", "surrogateescape")), target)


def _current(repo: Path, rel: str) -> Entry | None:
    st, link = _lstat(repo, rel)
    if st is None or link is not None:
        return link
    data = read_inside(repo, rel) if stat.S_ISREG(st.st_mode) else None
    return None if data is None else Entry("file", stat.S_IMODE(st.st_mode), _sha(data))


def _content(store: Path, entry: Entry | None) -> bytes | None:
    if entry is None or entry.kind != "file":
        return None
    try:
        return (store / entry.digest).read_bytes()
    except OSError as exc:
        raise SnapshotError(f"the undo store lost a file's content ({exc.strerror}: {store / entry.digest})") from None


def _content_now(repo: Path, rel: str, entry: Entry | None) -> bytes | None:
    return read_inside(repo, rel) if entry is not None and entry.kind == "file" else None


@dataclass
class Restored:
    """What `restore` did."""

    changed: list[str] = field(default_factory=list)  # files put back as they were
    removed: list[str] = field(default_factory=list)  # files the turn added, deleted
    unrestorable: list[str] = field(default_factory=list)  # files too large to have been kept
    kept: list[str] = field(default_factory=list)  # paths changed after the turn ended: left as they are

    def summary(self) -> str:
        if not (self.changed or self.removed or self.kept):
            return "nothing to undo: the repo is as it was before the last turn"

        def names(paths: list[str]) -> str:
            return ", ".join(map(shown_path, paths))

        parts = [f"restored {len(self.changed)}: {names(self.changed)}"] if self.changed else []
        parts += [f"removed {len(self.removed)} new: {names(self.removed)}"] if self.removed else []
        parts += [f"left as they are (changed after the turn): {names(self.kept)}"] if self.kept else []
        return "; ".join(parts)


def restore(repo: Path, folder: Path, dirs: tuple[Path, Path] | None) -> Restored:
    """Put the repo back as the last snapshot has it; the snapshot is then spent (pipeline.chat.checkpoints makes
    the one before it current)."""
    snap = Snapshot.load(folder)
    if snap is None:
        raise SnapshotError("nothing to undo: no agent turn has run in this session yet")
    try:
        owner = os.lstat(repo)
    except OSError as exc:
        raise SnapshotError(f"cannot undo: the repo {repo} is not there ({exc.strerror})") from None
    changed = [rel for rel, stamp in snap.skipped.items() if not stamp or stamp != _stamp(repo, rel)]  # no stamp: said
    done, store = Restored(unrestorable=changed), folder / UNDO_DIR / "blobs"
    swept: tuple[str, ...] = ()  # paths removed here, and so all that was inside them (a folder put where a file was)
    for change in changes(repo, folder, dirs):
        entry = snap.entries.get(change.path)
        if entry is None and change.path.startswith(swept):
            done.removed.append(change.path)  # the turn's, gone with the folder it was in
            continue
        if snap.after is not None and snap.after.get(change.path) != _state_now(repo, change.path):
            done.kept.append(change.path)
            continue
        _remove(repo, change.path)
        swept += (change.path + "/",)
        if entry is None:
            done.removed.append(change.path)
            _prune(repo, Path(change.path).parent, snap)
        else:
            _put(repo, change.path, entry, store, (owner.st_uid, owner.st_gid))
            done.changed.append(change.path)
    (folder / UNDO_DIR / "manifest.json").unlink()
    return done


def _safe_parent(repo: Path, rel: str) -> Path:
    """The host path of `rel`, after checking its folder resolves inside the repo (no planted symlink above it)."""
    path = repo / rel
    if not Path(os.path.realpath(path.parent)).is_relative_to(os.path.realpath(repo)):
        raise SnapshotError(f"cannot undo {rel}: a symbolic link above it leaves the repo")
    return path


def _remove(repo: Path, rel: str) -> None:
    """Remove what is at `rel` now (a file, a link, or a folder the turn put where a file was)."""

    remove_entry(_safe_parent(repo, rel))


def _put(repo: Path, rel: str, entry: Entry, store: Path, owner: tuple[int, int]) -> None:

    path = _safe_parent(repo, rel)
    if entry.kind == "link":
        _make_parents(repo, rel, owner)
        os.symlink(entry.target, path)
        os.lchown(path, *owner)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = open_inside(f"{INSIDE}/{rel}", INSIDE, {INSIDE: repo}, flags, make_parents=True)
    except OSError as exc:
        raise SnapshotError(f"cannot restore {rel}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as fh:
        os.fchown(fh.fileno(), *owner)
        os.fchmod(fh.fileno(), entry.mode)
        fh.write((store / entry.digest).read_bytes())
    _own_parents(repo, rel, owner)


def _make_parents(repo: Path, rel: str, owner: tuple[int, int]) -> None:
    parent = Path(rel).parent
    for depth in range(1, len(parent.parts) + 1):
        folder = repo.joinpath(*parent.parts[:depth])
        try:
            os.mkdir(folder)
            os.lchown(folder, *owner)
        except FileExistsError:
            if not folder.is_dir() or folder.is_symlink():
                raise SnapshotError(f"cannot restore {rel}: {folder} is not a folder") from None


def _own_parents(repo: Path, rel: str, owner: tuple[int, int]) -> None:
    """Folders open_inside made for a restored file belong to the repo's owner, not to the host user."""
    folder = (repo / rel).parent
    while folder != repo and folder.is_relative_to(repo):
        st = os.lstat(folder)
        if (st.st_uid, st.st_gid) != owner:
            os.lchown(folder, *owner)
        folder = folder.parent


def _prune(repo: Path, folder: Path, snap: Snapshot) -> None:
    """Remove folders the turn made that are empty now (folders holding a snapshot file are kept)."""
    kept = {p for rel in snap.entries for p in Path(rel).parents}
    while folder != Path(".") and folder not in kept:
        try:
            os.rmdir(repo / folder)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                return
            raise
        folder = folder.parent
