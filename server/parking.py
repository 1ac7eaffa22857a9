"""Parking an idle session's cache off the device (to host memory or a session file) and bringing it back; the
park folder across restarts (every idle session parked to disk at shutdown, adopted again at start).

Disk parking writes the whole session with kvstore's save (kvstore.session.persist: atomic, checksummed) and, beside
it, what the registry needs to match and continue it (a JSON sidecar of the same name, also written atomically: the
session's id, seed, transcript, last use); it loads it back exactly. Host parking keeps the cache's exported tensors
in CPU memory (kvstore.export_state / restore_cache). Either way the restored session continues as if it had never
left (same tokens, same cache, same sampling generator). Files are named by a digest of the session's id, never by
the id itself.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import kvstore
from kvstore.errors import KVStoreError
from kvstore.session.persist import check_session_file
from kvstore.session.session import Session
from server.errors import ServeError, ServeSettingError
from server.messages import Said
from server.sessions import Entry, Registry

FORMAT = "nexus-serve-session"  # the sidecar's format name and version
VERSION = 1
_OURS = re.compile(r"\.?[0-9a-f]{32}\.(safetensors|json)(\..*\.tmp)?")  # a session file, its sidecar, a save cut short
LOCK_NAME = ".lock"  # the park folder's lock file (hold_park_dir): held by the one server using the folder


def log(message: str) -> None:
    print(f"nexus-agent serve: {message}", file=sys.stderr, flush=True)


def session_path(folder: Path, session_id: str) -> Path:
    return folder / f"{hashlib.sha256(session_id.encode()).hexdigest()[:32]}.safetensors"  # never a client's path


def park(entry: Entry, mode: str, registry: Registry) -> bool:
    """Move `entry`'s cache off the device (its `session` becomes None); False when a disk park failed and the
    session was closed instead. After a park, parked sessions past the park quota are closed (least recently used;
    host-parked ones count their tensors' bytes, so host memory is bounded like disk)."""
    if mode == "host":
        session = entry.session
        tensors, meta = kvstore.export_state(session.cache)  # contiguous CPU copies
        session.cache = None
        entry.parked, entry.session, entry.held_bytes = (session, tensors, meta), None, 0
        entry.parked_bytes = sum(t.untyped_storage().nbytes() for t in tensors.values())
        enforce_quota(registry)
        return entry.parked is not None
    path = session_path(registry.park_dir, entry.id)
    try:
        entry.session.save(path)
        _write_sidecar(path.with_suffix(".json"), entry)
    except Exception as exc:  # noqa: BLE001 - any failure to write (a full disk: OSError, safetensors' own error)
        log(f"cannot park session {entry.id} to {path.parent} ({type(exc).__name__}: {exc}): closed; its client's "
            "next turn rebuilds it from its history")  # fmt: skip
        entry.session = None
        registry.drop(entry)
        for stale in (path, path.with_suffix(".json")):
            stale.unlink(missing_ok=True)
        return False
    entry.parked, entry.session, entry.held_bytes = path, None, 0
    entry.parked_bytes = path.stat().st_size + path.with_suffix(".json").stat().st_size
    enforce_quota(registry)
    return entry.parked is not None


def enforce_quota(registry: Registry) -> None:
    """Close the least recently used parked sessions (files deleted, host tensors freed) until the rest fit the park
    quota."""
    for victim in registry.over_quota():
        log(f"closed parked session {victim.id}: the park folder is over its quota of {registry.config.park_quota} B")
        registry.drop(victim)


def restore(entry: Entry, model, tokenizer, config) -> None:
    """Bring a parked session back onto the model's device."""

    if isinstance(entry.parked, Path):
        try:
            session = Session.load(entry.parked, model=model, tokenizer=tokenizer, config=config)
        except KVStoreError as exc:  # the file changed since it was written or adopted: the session is lost
            entry.parked.unlink(missing_ok=True)
            entry.parked.with_suffix(".json").unlink(missing_ok=True)
            entry.parked, entry.transcript = None, []  # nothing left: the registry closes it (Registry.release)
            raise ServeError(
                f"session {entry.id} could not be restored ({exc}); it is closed: send the whole conversation again "
                "to open a new one", 503, "session_lost",
            ) from None  # fmt: skip
        entry.parked.unlink(missing_ok=True)
        entry.parked.with_suffix(".json").unlink(missing_ok=True)
        entry.parked_bytes = 0
    else:
        session, tensors, meta = entry.parked
        session.cache = kvstore.restore_cache(model, tensors, meta)
    entry.session, entry.parked, entry.parked_bytes = session, None, 0
    entry.restores += 1


def park_all(registry: Registry, model) -> str:
    """At shutdown, once the scheduler has stopped: every idle session to disk (host-parked ones too), so that the
    next server on this park folder adopts them; a session mid-turn is left out (its client rebuilds it), and so is
    one that cannot be written (a full disk: park closes it, one line each). What was parked and what was not, in
    words."""
    parked, failed = 0, 0
    for entry in registry.idle():
        try:
            ok = _park_for_restart(entry, registry, model)
        except Exception as exc:  # noqa: BLE001 - what cannot be parked is closed; the others still are parked
            log(f"cannot park session {entry.id} in {registry.park_dir} ({type(exc).__name__}: {exc}): closed")
            registry.drop(entry)
            ok = False
        if ok is not None:
            parked, failed = parked + ok, failed + (not ok)
    for entry in [e for e in registry.entries.values() if e.busy]:
        log(f"session {entry.id} was mid-turn at shutdown: not parked")
    return f"parked {parked} sessions in {registry.park_dir}" + (f"; could not park {failed}" if failed else "")


def _park_for_restart(entry: Entry, registry: Registry, model) -> bool | None:
    """One idle session onto disk with its sidecar up to date; False when it could not be (and was closed); None
    when it holds nothing to park."""
    if entry.on_disk:
        _write_sidecar(entry.parked.with_suffix(".json"), entry)  # its last use, as of now
        return True
    if entry.parked is not None:  # host: back onto the device, then to disk
        session, tensors, meta = entry.parked
        session.cache = kvstore.restore_cache(model, tensors, meta)
        entry.session, entry.parked = session, None
    return None if entry.session is None else park(entry, "disk", registry)


def adopt(registry: Registry, model, session_config) -> int:
    """At start: take every session parked in the park folder by an earlier run (id, transcript, seed, last use);
    remove what cannot be read or continued on this model and cache config, one log line each. The number taken."""
    folder = registry.park_dir
    adopted: set[Path] = set()
    for sidecar in [p for p in parked_files(folder) if p.suffix == ".json"]:
        path = sidecar.with_suffix(".safetensors")
        try:
            entry = _read_entry(sidecar, path, model, session_config)
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            _remove(f"{sidecar.name}: {exc}", sidecar, path)
            continue
        registry.adopt(entry)
        adopted.add(path)
    strays = [p for p in parked_files(folder) if p.suffix != ".json" and p not in adopted]
    for stray in strays:
        _remove(f"{stray.name}: no session sidecar beside it (a park cut short)", stray)
    enforce_quota(registry)
    return len(adopted)


def _remove(reason: str, *paths: Path) -> None:
    log(f"removed unreadable parked session {reason}")
    for p in paths:
        p.unlink(missing_ok=True)


def _read_entry(sidecar: Path, path: Path, model, session_config) -> Entry:
    """The registry entry of a parked session, after checking its session file (format, checksum, model, config)."""

    doc = _check_sidecar(json.loads(sidecar.read_text()))
    if session_path(sidecar.parent, doc["id"]) != path:
        raise ValueError("its session id does not name this file")
    try:
        check_session_file(path, model, replace(session_config, seed=int(doc["seed"])))
    except KVStoreError as exc:
        raise ValueError(str(exc)) from None
    idle = max(0.0, time.time() - float(doc["last_used"]))
    return Entry(
        id=doc["id"], seed=int(doc["seed"]), named=bool(doc["named"]), owner=str(doc.get("owner", "")), parked=path,
        transcript=[Said.load(row) for row in doc["transcript"]],
        last_used=time.monotonic() - idle, history_tokens=int(doc["history_tokens"]),
        parked_bytes=path.stat().st_size + sidecar.stat().st_size, restores=int(doc["restores"]),
    )  # fmt: skip


# a sidecar's fields, their JSON types and those types' names (a value of another type: a file damaged or edited)
_FIELDS = {"id": (str, "string"), "seed": (int, "integer"), "named": (bool, "boolean"), "owner": (str, "string"),
           "last_used": (int | float, "number"), "history_tokens": (int, "integer"), "restores": (int, "integer"),
           "transcript": (list, "array")}  # fmt: skip


def _check_sidecar(doc: Any) -> dict[str, Any]:
    """`doc` when it is a sidecar of this format whose fields hold their types; else ValueError naming the first
    that does not."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"not a {FORMAT} sidecar of version {VERSION}")
    for name, (kind, word) in _FIELDS.items():
        value = doc.get(name, "" if name == "owner" else None)  # sidecars before owners had none
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(f"its field {name!r} is not a JSON {word}")
    return doc


def _write_sidecar(path: Path, entry: Entry) -> None:
    doc: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "id": entry.id, "seed": entry.seed, "named": entry.named,
        "owner": entry.owner,
        "transcript": [s.dump() for s in entry.transcript],
        "last_used": time.time() - (time.monotonic() - entry.last_used), "history_tokens": entry.history_tokens,
        "restores": entry.restores,
    }  # fmt: skip
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def hold_park_dir(folder: Path) -> int:
    """An exclusive lock on `folder`'s `.lock` (created with the folder if need be; a link there is refused, not
    followed), as an open file descriptor that holds it until closed or the process ends, even by kill -9. A second
    server on the same folder would adopt this one's files and park over them, so it is refused with one line naming
    the folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ServeError(f"cannot lock the park folder {folder} ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise ServeError(f"cannot lock the park folder {folder} ({exc.strerror or exc})") from None
        raise ServeSettingError(
            "park_dir", f"{folder}: another nexus-agent serve is using this park folder; give each server its own"
        ) from None
    return fd


def check_park_dir(folder: Path) -> None:
    """Refuse a park folder another server holds now (ServeError), before the model loads; the lock itself is taken
    when the server is built (keep_across_restarts)."""
    os.close(hold_park_dir(folder))


def parked_files(folder: Path) -> list[Path]:
    """The park folder's files that are parked sessions' (session files, sidecars, saves cut short): never its
    `.lock`, nor anything else a user keeps there."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _OURS.fullmatch(p.name) and not p.is_dir())


def keep_across_restarts(registry: Registry, scheduler) -> None:
    """With a park folder of its own (`--park-dir`): adopt the sessions an earlier run parked there, and park every
    idle session there when the scheduler stops (its `on_stop` hook, on its thread, the model then idle)."""
    if not registry.persistent:
        return
    # held while this server runs: released by registry.shutdown(), which Server runs on every way out, a failed
    # start included (or by the system when the process ends)
    registry.park_lock = hold_park_dir(registry.park_dir)
    count = adopt(registry, scheduler.model, scheduler.session_config)
    if count:
        log(f"adopted {count} parked sessions from {registry.park_dir}")
    scheduler.on_stop.append(lambda s: log(park_all(s.registry, s.model)))
